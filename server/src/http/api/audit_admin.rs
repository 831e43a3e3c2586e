//! The audit log on the admin plane: a workspace's export (streamed, NDJSON or CSV, with the
//! proofs to check it offline) and its verification, an organisation's retention and a purge
//! now. Thin: the rules are `service/audit_integrity/admin.rs`'s.

use std::borrow::Cow;
use std::sync::Arc;

use futures_util::{Stream, StreamExt};
use poem::web::Data;
use poem::{Body, Endpoint, IntoResponse, Response};
use poem_openapi::param::{Path, Query};
use poem_openapi::payload::Json;
use poem_openapi::registry::{
    MetaMediaType, MetaResponse, MetaResponses, MetaSchema, MetaSchemaRef, Registry,
};
use poem_openapi::types::Type;
use poem_openapi::{ApiResponse, Enum, Object, OpenApi};
use serde_json::Value;
use uuid::Uuid;

use super::ApiTags;
use crate::domain::{FieldError, Operation, Span, Timestamp, ValidationErrors, parse_whpk};
use crate::http::admission::admitted;
use crate::http::auth::BearerAuth;
use crate::http::error::{ApiFailure, error_responses};
use crate::http::fields::{Invalid, JsonValue, request_body};
use crate::http::idempotency::{Idempotent, Permitted, admin_permission};
use crate::http::payload::{FromJson, JsonBody};
use crate::service::audit_integrity::{
    Anchor, ChainReport, ExportFormat, ExportRequest, PurgeReport,
};
use crate::service::{Permission, ServiceError, Services};
use crate::storage::TimeWindow;

/// The longest retention, as `Span` bounds every length of time.
const MAX_RETENTION_SECONDS: i64 = 10 * 366 * 24 * 3600;

/// An organisation's retention in whole seconds, or null: kept forever.
pub struct RetentionSeconds(pub Option<Span>);

impl Type for RetentionSeconds {
    const IS_REQUIRED: bool = true;
    type RawValueType = Self;
    type RawElementValueType = Self;

    fn name() -> Cow<'static, str> {
        "RetentionSeconds".into()
    }

    fn schema_ref() -> MetaSchemaRef {
        i64::schema_ref().merge(MetaSchema {
            minimum: Some(1.0),
            maximum: Some(MAX_RETENTION_SECONDS as f64),
            nullable: true,
            ..MetaSchema::ANY
        })
    }

    fn as_raw_value(&self) -> Option<&Self> {
        Some(self)
    }

    fn raw_element_iter<'a>(&'a self) -> Box<dyn Iterator<Item = &'a Self> + 'a> {
        Box::new(self.as_raw_value().into_iter())
    }
}

impl JsonValue for RetentionSeconds {
    fn parse(value: &Value) -> Result<Self, Invalid> {
        if value.is_null() {
            return Ok(Self(None));
        }
        let seconds = value
            .as_i64()
            .ok_or(Invalid::Type("must be an integer or null"))?;
        if !(1..=MAX_RETENTION_SECONDS).contains(&seconds) {
            return Err(Invalid::Rule(format!(
                "must be from 1 to {MAX_RETENTION_SECONDS} (about ten years), or null"
            )));
        }
        Span::from_seconds(seconds)
            .map(|s| Self(Some(s)))
            .map_err(Invalid::Rule)
    }
}

request_body! {
    /// Request body of setting an organisation's audit retention.
    pub struct SetAuditRetentionInput {
        /// Events older than this are removed (in the background, or by a purge); null keeps
        /// them forever.
        "retentionSeconds" => retention_seconds: required RetentionSeconds,
    }
}

/// A parsed retention.
#[derive(Debug)]
pub struct Retention(Option<Span>);

impl FromJson for Retention {
    type Body = SetAuditRetentionInput;

    fn from_body(body: SetAuditRetentionInput) -> Result<Self, ValidationErrors> {
        Ok(Self(body.retention_seconds.0))
    }
}

impl Permitted for Retention {
    fn permission<'a>(&'a self, req: &'a poem::Request) -> Permission<'a> {
        admin_permission(Operation::SetAuditRetention, req)
    }
}

request_body! {
    /// Request body of a purge: an empty object.
    pub struct PurgeAuditLogInput {}
}

#[derive(Debug)]
pub struct Purge;

impl FromJson for Purge {
    type Body = PurgeAuditLogInput;

    fn from_body(_: PurgeAuditLogInput) -> Result<Self, ValidationErrors> {
        Ok(Self)
    }
}

impl Permitted for Purge {
    fn permission<'a>(&'a self, req: &'a poem::Request) -> Permission<'a> {
        admin_permission(Operation::PurgeAuditLog, req)
    }
}

/// How an export is written.
#[derive(Enum, Debug, Clone, Copy, PartialEq, Eq)]
#[oai(rename = "AuditExportFormat", rename_all = "lowercase")]
pub enum AuditExportFormat {
    /// One JSON object a line: `{"auditExport": …}` first, the events, then the proofs.
    Ndjson,
    /// A header, one event a row (`data` as a JSON string), then the proofs as rows.
    Csv,
}

type ExportStream =
    std::pin::Pin<Box<dyn Stream<Item = Result<bytes::Bytes, ServiceError>> + Send>>;

/// 200 with the export, written as it is read.
pub struct AuditExportResponse {
    format: ExportFormat,
    chunks: ExportStream,
}

impl ApiResponse for AuditExportResponse {
    fn meta() -> MetaResponses {
        let text = || String::schema_ref();
        MetaResponses {
            responses: vec![MetaResponse {
                description: "The export, streamed: NDJSON (`application/x-ndjson`) or CSV \
                              (`text/csv`) as `format` asks. A response cut short (a store \
                              failure mid-way) has no signed head at its end, and fails an \
                              offline verify",
                status: Some(200),
                status_range: None,
                content: vec![
                    MetaMediaType {
                        content_type: "application/x-ndjson",
                        schema: text(),
                    },
                    MetaMediaType {
                        content_type: "text/csv",
                        schema: text(),
                    },
                ],
                headers: vec![],
            }],
        }
    }

    fn register(_: &mut Registry) {}
}

impl IntoResponse for AuditExportResponse {
    fn into_response(self) -> Response {
        let body = self.chunks.map(|chunk| {
            chunk.map_err(|e| {
                // The body ends without its last chunk: the client sees a broken transfer.
                tracing::warn!(error = %e, "audit export ended early");
                std::io::Error::other("the export failed")
            })
        });
        Response::builder()
            .content_type(self.format.content_type())
            .header("cache-control", "no-store")
            .header("x-accel-buffering", "no")
            .body(Body::from_bytes_stream(body))
    }
}

#[derive(Object)]
#[oai(rename = "AuditChainBreak", rename_all = "camelCase")]
pub struct ChainBreakBody {
    /// Such as `changed`, `deleted`, `cut_tail`, `forged_signed_head`, `unknown_key`.
    problem: String,
    /// Where the chain breaks.
    sequence: i64,
    /// What the problem means, in a sentence.
    description: String,
    /// For `reordered`: where the event chained at `sequence` is now.
    #[oai(skip_serializing_if_is_none)]
    found_at: Option<i64>,
    /// For `unknown_key`: the key id no trusted key has.
    #[oai(skip_serializing_if_is_none)]
    kid: Option<String>,
}

/// A verification's report; `broken`, the first break, is absent when the chain is intact.
#[derive(Object)]
#[oai(rename = "AuditVerification", rename_all = "camelCase")]
pub struct VerificationBody {
    workspace_id: Uuid,
    /// No break found.
    intact: bool,
    /// The chain was verified after this sequence (its latest checkpoint's; 0 from the start).
    checkpoint_sequence: i64,
    /// The workspace's last sequence when the walk began: save it with `headHash` as an
    /// `anchor` for a later verification.
    head_sequence: i64,
    /// The head's hash, in hex.
    head_hash: String,
    /// Events whose hash matched, before any break.
    verified: u64,
    #[oai(nullable)]
    signed_head_sequence: Option<i64>,
    signed_heads_matched: u64,
    checkpoints: u64,
    /// Whether the log extends `anchor`; null when none was given.
    #[oai(nullable)]
    anchor_extended: Option<bool>,
    // The first break: absent when intact (a nullable or described reference would need an
    // `allOf`, which client generators refuse).
    #[oai(skip_serializing_if_is_none)]
    broken: Option<ChainBreakBody>,
}

impl From<ChainReport> for VerificationBody {
    fn from(r: ChainReport) -> Self {
        Self {
            workspace_id: r.workspace_id,
            intact: r.intact(),
            checkpoint_sequence: r.checkpoint_seq,
            head_sequence: r.head_seq,
            head_hash: r.head_hash,
            verified: r.verified,
            signed_head_sequence: r.signed_head_seq,
            signed_heads_matched: r.signed_heads_matched,
            checkpoints: r.checkpoints,
            anchor_extended: r.anchor_extended,
            broken: r.broken.map(|b| ChainBreakBody {
                problem: b.problem.as_str().to_owned(),
                sequence: b.sequence,
                description: b.problem.describe().to_owned(),
                found_at: b.found_at,
                kid: b.kid,
            }),
        }
    }
}

#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct VerificationEnvelope {
    verification: VerificationBody,
}

#[derive(Object)]
#[oai(rename = "AuditRetention", rename_all = "camelCase")]
pub struct RetentionBody {
    organisation_id: Uuid,
    /// Null: kept forever.
    #[oai(nullable)]
    retention_seconds: Option<i64>,
    /// The same length as an administrator writes it, such as `90d`; null: forever.
    #[oai(nullable)]
    retention: Option<String>,
}

#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct RetentionEnvelope {
    audit_retention: RetentionBody,
}

#[derive(Object)]
#[oai(rename = "AuditPurge", rename_all = "camelCase")]
pub struct PurgeBody {
    /// Events removed, of every workspace.
    removed: u64,
    /// Workspaces that lost at least one event.
    workspaces: u64,
}

#[derive(Object)]
#[oai(rename_all = "camelCase")]
pub struct PurgeEnvelope {
    purge: PurgeBody,
}

impl From<PurgeReport> for PurgeEnvelope {
    fn from(r: PurgeReport) -> Self {
        Self {
            purge: PurgeBody {
                removed: r.removed,
                workspaces: r.workspaces,
            },
        }
    }
}

#[derive(ApiResponse)]
pub enum VerifyAuditResponse {
    /// The report, intact or not (a broken chain is an answer, not an error).
    #[oai(status = 200)]
    Ok(Json<VerificationEnvelope>),
}

#[derive(ApiResponse)]
pub enum SetRetentionResponse {
    #[oai(status = 200)]
    Ok(Json<RetentionEnvelope>),
}

#[derive(ApiResponse)]
pub enum PurgeResponse {
    #[oai(status = 200)]
    Ok(Json<PurgeEnvelope>),
}

error_responses!(ReadAuditLogErrors: 400, 401, 403, 404, 413, 429, 500, 503);
error_responses!(ChangeAuditLogErrors: 400, 401, 403, 404, 409, 413, 429, 500, 503);

fn export_audit_log(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::ExportAuditLog, ep)
}

fn verify_audit_log(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::VerifyAuditLog, ep)
}

fn set_audit_retention(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::SetAuditRetention, ep)
}

fn purge_audit_log(ep: impl Endpoint) -> impl Endpoint {
    admitted(Operation::PurgeAuditLog, ep)
}

fn time_param(
    name: &str,
    raw: Option<&str>,
) -> Result<Option<chrono::DateTime<chrono::Utc>>, ValidationErrors> {
    // Empty is refused too: the document's `format: date-time` has no empty value.
    match raw {
        None => Ok(None),
        Some(raw) => Timestamp::parse(raw)
            .map(|t| Some(t.get()))
            .map_err(|_| FieldError::new(name, "must be an RFC 3339 time").into()),
    }
}

/// `auditKeys`: `whpk_…` public keys, comma-separated.
fn keys_param(raw: Option<&str>) -> Result<Vec<ed25519_dalek::VerifyingKey>, ValidationErrors> {
    raw.unwrap_or_default()
        .split(',')
        .map(str::trim)
        // `str::is_empty` by name: poem's `Type::is_empty` (in scope) would answer for `&&str`.
        .filter(|k| !str::is_empty(k))
        .map(|k| {
            parse_whpk(k).map_err(|_| {
                FieldError::new("auditKeys", "must be whpk_ public keys, comma-separated").into()
            })
        })
        .collect()
}

pub struct AuditAdminApi;

#[OpenApi(prefix_path = "/v1", tag = "ApiTags::Admin")]
impl AuditAdminApi {
    /// Export a workspace's audit log
    ///
    /// Requires `admin:read` and a user who administers the organisation. Every event of the
    /// workspace in sequence order (within `since`/`until`), then the proofs an offline
    /// `cpctl audit verify --export` checks it with: every checkpoint, the signed heads over
    /// the exported range, and a head signed now at its last event once the chain verifies.
    /// Streamed as it is read, a page at a time. A workspace of another organisation is a 404.
    #[oai(
        path = "/organisations/:organisationId/workspaces/:workspaceId/audit/export",
        method = "get",
        operation_id = "exportAuditLog",
        transform = "export_audit_log"
    )]
    #[allow(clippy::too_many_arguments)]
    async fn export(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        #[oai(name = "workspaceId")] workspace_id: Path<String>,
        /// `ndjson` (default) or `csv`.
        format: Query<Option<AuditExportFormat>>,
        /// Events that occurred at or after this RFC 3339 time.
        since: Query<Option<String>>,
        /// Events that occurred before this RFC 3339 time.
        until: Query<Option<String>>,
        /// Public keys trusted only to verify the chain before a head is signed, `whpk_…`,
        /// comma-separated: old webhook keys a rotation dropped. An operator's only (403).
        #[oai(name = "auditKeys")]
        audit_keys: Query<Option<String>>,
    ) -> Result<AuditExportResponse, ReadAuditLogErrors> {
        let format = match format.0 {
            Some(AuditExportFormat::Csv) => ExportFormat::Csv,
            _ => ExportFormat::Ndjson,
        };
        let request = ExportRequest {
            window: TimeWindow {
                since: time_param("since", since.0.as_deref()).map_err(ApiFailure::from)?,
                until: time_param("until", until.0.as_deref()).map_err(ApiFailure::from)?,
            },
            format,
            extra_keys: keys_param(audit_keys.0.as_deref()).map_err(ApiFailure::from)?,
        };
        let chunks = services
            .admin_export_audit(&auth.0, &organisation_id, &workspace_id, request)
            .await?;
        Ok(AuditExportResponse {
            format,
            chunks: Box::pin(chunks),
        })
    }

    /// Verify a workspace's audit log
    ///
    /// Requires `admin:read` and a user who administers the organisation. Walks the hash
    /// chain from the latest checkpoint to the stored head, through every signed head,
    /// checking each checkpoint's seal and link, and the `anchor` when given. A broken chain
    /// is a 200 with `intact: false` and the first break.
    #[oai(
        path = "/organisations/:organisationId/workspaces/:workspaceId/audit/verification",
        method = "get",
        operation_id = "verifyAuditLog",
        transform = "verify_audit_log"
    )]
    async fn verify(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        #[oai(name = "workspaceId")] workspace_id: Path<String>,
        /// A head saved earlier, `SEQUENCE:HASH` (hex): the report says whether the log still
        /// extends it.
        anchor: Query<Option<String>>,
        /// Public keys trusted only for this verification, `whpk_…`, comma-separated: old
        /// webhook keys a rotation dropped.
        #[oai(name = "auditKeys")]
        audit_keys: Query<Option<String>>,
    ) -> Result<VerifyAuditResponse, ReadAuditLogErrors> {
        let anchor = match anchor.0.as_deref().filter(|a| !str::is_empty(a)) {
            None => None,
            Some(raw) => Some(
                raw.parse::<Anchor>()
                    .map_err(|e| ApiFailure::validation(&FieldError::new("anchor", e).into()))?,
            ),
        };
        let extra = keys_param(audit_keys.0.as_deref()).map_err(ApiFailure::from)?;
        let report = services
            .admin_verify_audit(&auth.0, &organisation_id, &workspace_id, anchor, extra)
            .await?;
        Ok(VerifyAuditResponse::Ok(Json(VerificationEnvelope {
            verification: report.into(),
        })))
    }

    /// Set an organisation's audit retention
    ///
    /// Requires `admin:write` and an operator: an organisation's admin must not shorten the
    /// trail of its own actions. Events older than the retention are removed in the
    /// background (or by a purge) behind a signed checkpoint.
    #[oai(
        path = "/organisations/:organisationId/audit-retention",
        method = "put",
        operation_id = "setAuditRetention",
        transform = "set_audit_retention"
    )]
    async fn set_retention(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        #[oai(name = "organisationId")] organisation_id: Path<String>,
        body: Idempotent<JsonBody<Retention>>,
    ) -> Result<SetRetentionResponse, ChangeAuditLogErrors> {
        let Retention(retention) = body.input.value;
        services
            .admin_set_audit_retention(&auth.0, &organisation_id, retention, &body.write)
            .await?;
        let organisation_id = crate::domain::parse_uuid(&organisation_id).unwrap_or_default();
        Ok(SetRetentionResponse::Ok(Json(RetentionEnvelope {
            audit_retention: RetentionBody {
                organisation_id,
                retention_seconds: retention.map(Span::seconds),
                retention: retention.map(|r| r.to_string()),
            },
        })))
    }

    /// Purge expired audit events now
    ///
    /// Requires `admin:write` and an operator. One retention pass over every organisation
    /// (the server runs one in the background too), recorded as `audit.purged` with its counts
    /// in the operator's organisation's log. A workspace whose signed heads carry a key this
    /// server does not hold is left as it is: a 409 `audit_key_not_held` after the others.
    #[oai(
        path = "/audit/purge",
        method = "post",
        operation_id = "purgeAuditLog",
        transform = "purge_audit_log"
    )]
    async fn purge(
        &self,
        auth: BearerAuth,
        services: Data<&Arc<Services>>,
        body: Idempotent<JsonBody<Purge>>,
    ) -> Result<PurgeResponse, ChangeAuditLogErrors> {
        let report = services.admin_purge_audit(&auth.0, &body.write).await?;
        Ok(PurgeResponse::Ok(Json(report.into())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audit_keys_absent_or_empty_are_none() {
        assert!(keys_param(None).ok().unwrap().is_empty());
        assert!(keys_param(Some("")).ok().unwrap().is_empty());
        assert!(keys_param(Some(" , ")).ok().unwrap().is_empty());
        assert!(keys_param(Some("nope")).is_err());
    }
}
