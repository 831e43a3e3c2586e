//! The audit log on the admin plane: export and verify a workspace's log (its organisation's
//! administrators), set an organisation's retention and purge now (the operator's: an admin
//! must not shorten the trail of its own actions). The authorizer decides each first; then the
//! workspace must belong to the route's organisation (else the same 404 as one that does not
//! exist). Verification-only keys given by the caller are trusted for a report, and for the
//! check before an export signs a head only when an operator gives them.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::Stream;

use super::export::ExportRequest;
use super::*;
use crate::domain::{Principal, Role};
use crate::service::Operation;

/// What a purge over the admin API removed (also the `audit.purged` event's data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PurgeReport {
    pub removed: u64,
    /// Workspaces that lost at least one event.
    pub workspaces: u64,
}

impl Services {
    /// Checks the caller may export the workspace's log, then streams it (`export.rs`).
    pub async fn admin_export_audit(
        self: &Arc<Self>,
        principal: &Principal,
        organisation: &str,
        workspace: &str,
        request: ExportRequest,
    ) -> Result<impl Stream<Item = Result<Bytes, ServiceError>> + Send + 'static, ServiceError>
    {
        let org = self
            .admit_admin(
                principal,
                Operation::ExportAuditLog,
                organisation,
                Some(workspace),
            )
            .await?;
        let workspace = self.workspace_of(org, workspace).await?;
        if !request.extra_keys.is_empty() && principal.role != Role::Operator {
            // They would let the export vouch (sign a head) for a chain checked with them.
            return Err(ServiceError::forbidden(
                "only an operator adds verification keys to an export",
            ));
        }
        Ok(self.audit_export_stream(workspace.id, request))
    }

    /// Verifies the workspace's chain on the server (`verify_chain`): a report, broken or not.
    pub async fn admin_verify_audit(
        &self,
        principal: &Principal,
        organisation: &str,
        workspace: &str,
        anchor: Option<Anchor>,
        extra_keys: Vec<ed25519_dalek::VerifyingKey>,
    ) -> Result<ChainReport, ServiceError> {
        let org = self
            .admit_admin(
                principal,
                Operation::VerifyAuditLog,
                organisation,
                Some(workspace),
            )
            .await?;
        let workspace = self.workspace_of(org, workspace).await?;
        self.verify_audit_chain_with(workspace.id, anchor, extra_keys)
            .await
    }

    pub async fn admin_set_audit_retention(
        &self,
        principal: &Principal,
        organisation: &str,
        retention: Option<Span>,
        write: &WriteContext,
    ) -> Result<(), ServiceError> {
        let org = self
            .admit_admin(principal, Operation::SetAuditRetention, organisation, None)
            .await?;
        self.set_audit_retention(org, retention, write).await
    }

    /// One retention pass now, then `audit.purged` with its counts in the acting operator's
    /// organisation's log (no workspace), also when a workspace was refused (the error follows).
    pub async fn admin_purge_audit(
        &self,
        principal: &Principal,
        write: &WriteContext,
    ) -> Result<PurgeReport, ServiceError> {
        self.authorize(principal, Operation::PurgeAuditLog, None, vec![])
            .await?;
        let purged = self.purge_expired(Utc::now()).await;
        let report = PurgeReport {
            removed: purged.removed,
            workspaces: purged.workspaces,
        };
        let event = event_by(
            write,
            principal.organisation_id,
            None,
            "audit.purged",
            "organisation",
            principal.organisation_id,
            json!({
                "removed": report.removed,
                "workspaces": report.workspaces,
                "complete": purged.refused.is_none(),
            }),
        );
        self.store.record_event(write, &event).await?;
        match purged.refused {
            Some(refused) => Err(refused),
            None => Ok(report),
        }
    }
}
