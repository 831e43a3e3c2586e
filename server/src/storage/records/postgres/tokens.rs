//! Personal access tokens and their grants: the Postgres statements, and the batching of
//! issuances; the rest, with the issuance rules, is shared (`storage/records/sql/tokens.rs`).
//!
//! Issuances of requests without an `Idempotency-Key` run in batches (`throughput/write_batcher.rs`): a batch
//! is five statements whatever its size: lock every issuer (FOR SHARE) and owner (FOR UPDATE)
//! in id order, count every issuer's grants and owner's tokens, insert the accepted tokens
//! with their grants, insert their events, commit. [`rules::may_issue`] decides each
//! issuance in queue order, counting the ones accepted before it in the batch.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use sqlx::PgConnection;
use uuid::Uuid;

use super::audit::write_events;
use super::throughput::{Kind, Ran};
use super::{PostgresStore, map_err};
use crate::domain::{NewAuditEvent, rules};
use crate::storage::records::dialect::Issuance;
use crate::storage::{InsertTokenError, NewToken, StoreError, WriteContext};

/// Active grants as an array, in grant order.
pub(super) const TOKEN_COLUMNS: &str =
    "t.id, t.public_id, t.user_id, t.organisation_id, t.name, t.scopes,
    ARRAY(SELECT tw.workspace_id FROM token_workspaces tw
          WHERE tw.token_id = t.id AND tw.revoked_at IS NULL ORDER BY tw.position) AS workspace_ids,
    t.environment_ids, t.created_at, t.expires_at, t.revoked_at, t.issued_by_token_id,
    t.last_used_at, t.last_used_address, t.last_used_agent";

/// The token and its grants in one round trip.
pub(super) const INSERT_TOKEN: &str = "WITH t AS (
         INSERT INTO tokens (id, public_id, user_id, organisation_id, name, secret_hash, scopes,
             environment_ids, created_at, expires_at, issued_by_token_id)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING id
     )
     INSERT INTO token_workspaces (token_id, workspace_id, position)
     SELECT t.id, w.workspace_id, w.ord - 1
     FROM t, unnest($12::uuid[]) WITH ORDINALITY AS w(workspace_id, ord)";

/// Issuances, in batches.
pub(super) struct Issuances;

pub(super) struct Job {
    token: NewToken,
    events: Vec<NewAuditEvent>,
    max_active: u32,
    now: DateTime<Utc>,
}

/// Runs an issuance in a batch; `None` when it must run alone (see `throughput/write_batcher.rs`).
pub(super) async fn batch_insert_token(
    store: &PostgresStore,
    write: &WriteContext,
    issuance: Issuance<'_>,
) -> Option<Result<(), InsertTokenError>> {
    let job = Job {
        token: issuance.token.clone(),
        events: issuance.events.to_vec(),
        max_active: issuance.max_active,
        now: issuance.now,
    };
    let verdict = store
        .issuances
        .submit(&store.pool, &store.sequencer, write, job)
        .await?;
    Some(verdict.unwrap_or_else(|e| Err(InsertTokenError::Store(e))))
}

#[async_trait::async_trait]
impl Kind for Issuances {
    type Job = Job;
    type Verdict = Result<(), InsertTokenError>;
    const WHAT: &'static str = "issuance";

    fn key(job: &Job) -> Uuid {
        job.token.record.user_id
    }

    async fn run(tx: &mut PgConnection, jobs: &[Job]) -> Result<Ran<Self::Verdict>, StoreError> {
        issue_batch(tx, jobs).await
    }
}

/// What a batch counted for one issuance, under the batch's locks.
#[derive(sqlx::FromRow)]
struct Counted {
    issuer_grants: i64,
    same_name: i64,
    active: i64,
}

/// All `jobs` in the batch's transaction: the verdict of each, in order.
async fn issue_batch(
    tx: &mut PgConnection,
    jobs: &[Job],
) -> Result<Ran<Result<(), InsertTokenError>>, StoreError> {
    let records = || jobs.iter().map(|j| &j.token.record);
    // In id order, so batches and revocations (which lock tokens in id order) cannot deadlock.
    // Revoked issuers too: the counts below check revocation, and with `revoked_at IS NULL`
    // here the planner, misled by a table growing faster than its statistics, intersected the
    // primary key with a scan of every active token (3 ms a batch at 25,000 tokens).
    sqlx::query(
        "WITH issuers AS (SELECT id FROM tokens WHERE id = ANY($1) ORDER BY id FOR SHARE),
              owners AS (SELECT id FROM users WHERE id = ANY($2) ORDER BY id FOR UPDATE)
         SELECT (SELECT count(*) FROM issuers), (SELECT count(*) FROM owners)",
    )
    .bind(
        records()
            .filter_map(|r| r.issued_by_token_id)
            .collect::<Vec<Uuid>>(),
    )
    .bind(records().map(|r| r.user_id).collect::<Vec<Uuid>>())
    .execute(&mut *tx)
    .await
    .map_err(map_err)?;
    // The next statement, so a snapshot that sees what the locks waited for.
    let (grant_job, grant_workspace): (Vec<i32>, Vec<Uuid>) = records()
        .enumerate()
        .flat_map(|(n, r)| r.workspace_ids.iter().map(move |w| (n as i32, *w)))
        .unzip();
    let counted: Vec<Counted> = sqlx::query_as(
        "SELECT (SELECT count(*) FROM token_workspaces tw
                 WHERE tw.token_id = (SELECT id FROM tokens WHERE id = j.issuer AND revoked_at IS NULL)
                   AND tw.revoked_at IS NULL
                   AND tw.workspace_id IN (SELECT g.workspace_id FROM unnest($5::int4[], $6::uuid[])
                                           AS g(n, workspace_id) WHERE g.n = j.n)) AS issuer_grants,
                c.same_name, c.active
         FROM unnest($1::int4[], $2::uuid[], $3::uuid[], $4::text[], $7::timestamptz[])
              AS j(n, owner, issuer, name, now)
         CROSS JOIN LATERAL (
             SELECT count(*) FILTER (WHERE t.name = j.name) AS same_name, count(*) AS active
             FROM tokens t WHERE t.user_id = j.owner AND t.revoked_at IS NULL AND t.expires_at > j.now
         ) c
         ORDER BY j.n",
    )
    .bind((0..jobs.len() as i32).collect::<Vec<i32>>())
    .bind(records().map(|r| r.user_id).collect::<Vec<Uuid>>())
    .bind(records().map(|r| r.issued_by_token_id).collect::<Vec<Option<Uuid>>>())
    .bind(records().map(|r| r.name.clone()).collect::<Vec<String>>())
    .bind(&grant_job)
    .bind(&grant_workspace)
    .bind(jobs.iter().map(|j| j.now).collect::<Vec<DateTime<Utc>>>())
    .fetch_all(&mut *tx)
    .await
    .map_err(map_err)?;
    if counted.len() != jobs.len() {
        return Err(StoreError::Internal(
            "an issuance batch lost a count".into(),
        ));
    }
    // The rules, in queue order; each issuance sees the ones accepted before it.
    let mut accepted: HashMap<Uuid, (i64, HashSet<&str>)> = HashMap::new();
    let verdicts: Vec<Result<(), InsertTokenError>> = jobs
        .iter()
        .zip(&counted)
        .map(|(job, c)| {
            let r = &job.token.record;
            let (earlier, names) = accepted.entry(r.user_id).or_default();
            let same_name = c.same_name + i64::from(names.contains(r.name.as_str()));
            rules::may_issue(
                r,
                c.issuer_grants,
                same_name,
                c.active + *earlier,
                job.max_active,
            )?;
            *earlier += 1;
            names.insert(r.name.as_str());
            Ok(())
        })
        .collect();
    let issued: Vec<&Job> = jobs
        .iter()
        .zip(&verdicts)
        .filter(|(_, v)| v.is_ok())
        .map(|(job, _)| job)
        .collect();
    if !issued.is_empty() {
        insert_batch(&mut *tx, &issued).await?;
        write_events(&mut *tx, issued.iter().flat_map(|j| &j.events)).await?;
    }
    Ok(Ran {
        workspaces: issued
            .iter()
            .flat_map(|j| &j.events)
            .filter_map(|e| e.workspace_id)
            .collect(),
        verdicts: verdicts.into_iter().map(Some).collect(),
    })
}

/// The tokens and their grants, in one statement. Lists of varying length (scopes,
/// environments) travel as JSON arrays, since Postgres arrays must be rectangular.
async fn insert_batch(conn: &mut PgConnection, issued: &[&Job]) -> Result<(), StoreError> {
    let records = || issued.iter().map(|j| &j.token.record);
    let (grant_token, (grant_workspace, grant_position)): (Vec<Uuid>, (Vec<Uuid>, Vec<i32>)) =
        records()
            .flat_map(|r| {
                r.workspace_ids
                    .iter()
                    .enumerate()
                    .map(move |(i, w)| (r.id, (*w, i as i32)))
            })
            .unzip();
    sqlx::query(
        "WITH t AS (
             INSERT INTO tokens (id, public_id, user_id, organisation_id, name, secret_hash, scopes,
                 environment_ids, created_at, expires_at, issued_by_token_id)
             SELECT x.id, x.public_id, x.user_id, x.organisation_id, x.name, x.secret_hash,
                 ARRAY(SELECT jsonb_array_elements_text(x.scopes::jsonb)),
                 ARRAY(SELECT jsonb_array_elements_text(x.environment_ids::jsonb)::uuid),
                 x.created_at, x.expires_at, x.issued_by
             FROM unnest($1::uuid[], $2::text[], $3::uuid[], $4::uuid[], $5::text[], $6::bytea[],
                         $7::text[], $8::text[], $9::timestamptz[], $10::timestamptz[], $11::uuid[])
                  AS x(id, public_id, user_id, organisation_id, name, secret_hash, scopes,
                       environment_ids, created_at, expires_at, issued_by)
             RETURNING id
         )
         INSERT INTO token_workspaces (token_id, workspace_id, position)
         SELECT g.token_id, g.workspace_id, g.position
         FROM unnest($12::uuid[], $13::uuid[], $14::int4[]) AS g(token_id, workspace_id, position)
         WHERE g.token_id IN (SELECT id FROM t)",
    )
    .bind(records().map(|r| r.id).collect::<Vec<Uuid>>())
    .bind(
        records()
            .map(|r| r.public_id.clone())
            .collect::<Vec<String>>(),
    )
    .bind(records().map(|r| r.user_id).collect::<Vec<Uuid>>())
    .bind(records().map(|r| r.organisation_id).collect::<Vec<Uuid>>())
    .bind(records().map(|r| r.name.clone()).collect::<Vec<String>>())
    .bind(
        issued
            .iter()
            .map(|j| j.token.secret_hash.clone())
            .collect::<Vec<Vec<u8>>>(),
    )
    .bind(
        records()
            .map(|r| json_text(&r.scopes))
            .collect::<Vec<String>>(),
    )
    .bind(
        records()
            .map(|r| json_text(&r.environment_ids))
            .collect::<Vec<String>>(),
    )
    .bind(
        records()
            .map(|r| r.created_at)
            .collect::<Vec<DateTime<Utc>>>(),
    )
    .bind(
        records()
            .map(|r| r.expires_at)
            .collect::<Vec<DateTime<Utc>>>(),
    )
    .bind(
        records()
            .map(|r| r.issued_by_token_id)
            .collect::<Vec<Option<Uuid>>>(),
    )
    .bind(grant_token)
    .bind(grant_workspace)
    .bind(grant_position)
    .execute(conn)
    .await
    .map_err(map_err)?;
    Ok(())
}

fn json_text<T: serde::Serialize>(list: &[T]) -> String {
    serde_json::to_string(list).unwrap_or_else(|_| "[]".into())
}
