//! Opening a fresh store of each backend, running a test body against each, and the fixtures
//! the tests share (a tenant, a token, an outcome). Postgres is skipped with a line when it
//! does not answer, unless `CP_TEST_REQUIRE_SERVICES=1` (CI) makes that a failure.

#![allow(dead_code)]

#[path = "../support/services.rs"]
mod services;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use control_plane::domain::{Actor, NewAuditEvent};
use control_plane::storage::postgres::PostgresSettings;
use control_plane::storage::{
    NewToken, Organisation, OutcomeRecord, PostgresStore, RecordStore, SqliteStore, TokenRecord,
    User, Workspace, WriteContext,
};
use serde_json::json;
use sqlx::{Connection, Executor, PgConnection};
use uuid::Uuid;

pub(crate) use services::test_name;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Sqlite,
}

/// One fresh, migrated records store, removed when dropped.
pub struct TestStore {
    pub backend: Backend,
    pub store: Arc<dyn RecordStore>,
    postgres: Option<(PostgresStore, String)>,
    sqlite: Option<(SqliteStore, PathBuf)>,
}

impl TestStore {
    async fn open(backend: Backend) -> Self {
        match backend {
            Backend::Postgres => {
                let name = format!("cp_store_{}", Uuid::new_v4().simple());
                let mut admin =
                    PgConnection::connect(&format!("{}/postgres", services::postgres_base()))
                        .await
                        .expect("connect to Postgres");
                admin
                    .execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                    .await
                    .expect("create the test database");
                let url = format!("{}/{name}", services::postgres_base());
                let store = PostgresStore::connect_lazy(&url, &PostgresSettings::default())
                    .expect("open Postgres");
                store.migrate().await.expect("migrate Postgres");
                Self {
                    backend,
                    store: Arc::new(store.clone()),
                    postgres: Some((store, name)),
                    sqlite: None,
                }
            }
            Backend::Sqlite => {
                let dir = std::env::temp_dir()
                    .join("cp-store-tests")
                    .join(Uuid::new_v4().simple().to_string());
                let store = SqliteStore::open(&dir.join("cp.db"), 4)
                    .await
                    .expect("open SQLite");
                store.migrate().await.expect("migrate SQLite");
                Self {
                    backend,
                    store: Arc::new(store.clone()),
                    postgres: None,
                    sqlite: Some((store, dir)),
                }
            }
        }
    }

    /// `SELECT count(*) …` on the store's own pool, outside any transaction a test holds.
    pub async fn count(&self, sql: &str) -> i64 {
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        match (&self.postgres, &self.sqlite) {
            (Some((pg, _)), _) => sqlx::query_scalar(sql).fetch_one(pg.pool()).await,
            (_, Some((lite, _))) => sqlx::query_scalar(sql).fetch_one(lite.pool()).await,
            _ => unreachable!("a test store is one of the two"),
        }
        .expect("count")
    }

    /// Runs a statement that takes no parameters, on the store's own pool.
    pub async fn exec(&self, sql: &str) {
        let sql = sqlx::AssertSqlSafe(sql.to_owned());
        match (&self.postgres, &self.sqlite) {
            (Some((pg, _)), _) => sqlx::query(sql).execute(pg.pool()).await.map(drop),
            (_, Some((lite, _))) => sqlx::query(sql).execute(lite.pool()).await.map(drop),
            _ => unreachable!("a test store is one of the two"),
        }
        .expect("statement");
    }
}

impl Drop for TestStore {
    fn drop(&mut self) {
        if let Some((_, dir)) = &self.sqlite {
            let _ = std::fs::remove_dir_all(dir);
        }
        let Some((_store, name)) = self.postgres.take() else {
            return;
        };
        // Async drop does not exist: drop the database on a thread of its own. Not the pool's
        // close: its connections are driven by the test's runtime, which this drop blocks.
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async {
                if let Ok(mut admin) =
                    PgConnection::connect(&format!("{}/postgres", services::postgres_base())).await
                {
                    let drop = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
                    let _ = admin.execute(sqlx::AssertSqlSafe(drop)).await;
                }
            });
        })
        .join();
    }
}

/// Runs `body` against a fresh store of each backend, Postgres first. A Postgres that does not
/// answer skips its half with a line (or fails the test under `CP_TEST_REQUIRE_SERVICES=1`).
pub async fn each_backend<F, Fut>(test: &str, body: F)
where
    F: Fn(TestStore) -> Fut,
    Fut: Future<Output = ()>,
{
    if services::answers(&services::postgres_base()) {
        body(TestStore::open(Backend::Postgres).await).await;
    } else {
        services::missing("Postgres does not answer");
        services::skip(&format!("{test} (Postgres half)"), "Postgres");
    }
    body(TestStore::open(Backend::Sqlite).await).await;
}

/// An organisation with one workspace and one user.
#[derive(Debug, Clone, Copy)]
pub struct Tenant {
    pub organisation_id: Uuid,
    pub workspace_id: Uuid,
    pub user_id: Uuid,
}

fn event(
    organisation_id: Uuid,
    workspace_id: Option<Uuid>,
    kind: &'static str,
    id: Uuid,
) -> NewAuditEvent {
    NewAuditEvent {
        organisation_id,
        workspace_id,
        event_type: kind,
        actor: Actor::admin(),
        target_kind: kind,
        target_id: id,
        correlation_id: "store-test".into(),
        occurred_at: Utc::now(),
        data: json!({}),
    }
}

pub async fn tenant(store: &dyn RecordStore) -> Tenant {
    let write = WriteContext::system();
    let now = Utc::now();
    let org = Organisation {
        id: Uuid::new_v4(),
        name: format!("org-{}", Uuid::new_v4().simple()),
        created_at: now,
    };
    store
        .create_organisation(
            &write,
            &org,
            &event(org.id, None, "organisation.created", org.id),
        )
        .await
        .unwrap();
    let workspace = Workspace {
        id: Uuid::new_v4(),
        organisation_id: org.id,
        name: "main".into(),
        created_at: now,
    };
    let created = event(
        org.id,
        Some(workspace.id),
        "workspace.created",
        workspace.id,
    );
    store
        .create_workspace(&write, &workspace, &created)
        .await
        .unwrap();
    let user = User {
        id: Uuid::new_v4(),
        organisation_id: org.id,
        email: format!("{}@example.test", Uuid::new_v4().simple()),
        created_at: now,
        role: control_plane::domain::Role::Member,
        disabled: None,
    };
    let created = event(org.id, None, "user.created", user.id);
    store.create_user(&write, &user, &created).await.unwrap();
    Tenant {
        organisation_id: org.id,
        workspace_id: workspace.id,
        user_id: user.id,
    }
}

/// A token for the tenant's user on its workspace, valid for a day from `now`.
pub fn token(tenant: &Tenant, name: &str, issuer: Option<Uuid>, now: DateTime<Utc>) -> NewToken {
    NewToken {
        record: TokenRecord {
            id: Uuid::new_v4(),
            public_id: format!("pub{}", Uuid::new_v4().simple()),
            user_id: tenant.user_id,
            organisation_id: tenant.organisation_id,
            name: name.to_owned(),
            scopes: vec!["activity:read".into()],
            workspace_ids: vec![tenant.workspace_id],
            environment_ids: vec![],
            created_at: now,
            expires_at: now + chrono::Duration::days(1),
            revoked_at: None,
            issued_by_token_id: issuer,
            last_use: None,
        },
        secret_hash: vec![0; 32],
    }
}

/// The `token.issued` event of `token` in its workspace.
pub fn issued(token: &NewToken) -> NewAuditEvent {
    let t = &token.record;
    event(
        t.organisation_id,
        Some(t.workspace_ids[0]),
        "token.issued",
        t.id,
    )
}

/// An outcome under a fresh place, live for a minute.
pub fn outcome() -> OutcomeRecord {
    OutcomeRecord {
        place: format!("place-{}", Uuid::new_v4().simple()),
        fingerprint: "fingerprint".into(),
        sealed: vec![1, 2, 3],
        expires_at_ms: now_ms() + 60_000,
    }
}

pub fn now_ms() -> i64 {
    Utc::now().timestamp_millis()
}
