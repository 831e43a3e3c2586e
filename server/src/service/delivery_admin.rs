//! Deliveries after the fact, for an organisation's administrator over the admin API (and the
//! operator): a pool's deliveries, one with every attempt, and resending them (`cpctl
//! deliveries …`). The authorizer decides first; a pool or delivery of another organisation is
//! the same 404 as one that does not exist. Every resend is audited as
//! `webhook_delivery.resent` in the delivery's workspace, naming the user and token that acted;
//! a failed delivery's resend also writes its new command's `runner_command.submitted` (both
//! declared on `resendDelivery` and `recoverDeliveries` in `domain/operation.rs`).
//!
//! A resend never moves a finished command back: `failed` is final in the v1 contract. A
//! `pending` delivery of an open command gets a new attempt now; a `failed` one is resent as a
//! new `queued` command whose delivery carries the failed one's `webhook-id`, so a runner that
//! deduplicates on it (and may have run the first) runs the command at most once.

use chrono::{DateTime, Utc};
use serde_json::json;
use uuid::Uuid;

use super::admin::event_by;
use super::directory::{AdminPage, Paged};
use super::{Operation, ServiceError, Services};
use crate::domain::{DeliveryStatus, Principal, parse_uuid};
use crate::storage::{
    DeliveryFilter, DeliveryReport, DeliverySummary, ResendFailed, RunnerPool, WriteContext,
};

/// At most this many failed deliveries are resent by one `recover`.
pub const RECOVER_LIMIT: u32 = 10_000;

/// The event of every resend, one `recover` writing one per delivery it resends.
const RESENT: &str = "webhook_delivery.resent";

/// What `resend` did.
#[derive(Debug, Clone, PartialEq)]
pub struct Resent {
    /// The delivery resent.
    pub delivery_id: Uuid,
    /// The delivery that carries the new attempt: the same one (it was `pending`) or the
    /// delivery of the new command (it had `failed`).
    pub sent_as: Uuid,
    pub new_command_id: Option<Uuid>,
    /// The same as the resent delivery's attempts carried.
    pub webhook_id: Uuid,
}

fn wrong_state(message: String) -> ServiceError {
    ServiceError::Conflict {
        code: "invalid_state",
        message,
        details: None,
    }
}

impl Services {
    /// The pool the route names, which must belong to a workspace of its organisation.
    async fn pool_for_deliveries(
        &self,
        organisation_id: Uuid,
        pool: &str,
    ) -> Result<RunnerPool, ServiceError> {
        let missing = || ServiceError::not_found("no such runner pool in this organisation");
        let id = parse_uuid(pool).ok_or_else(missing)?;
        let pool = self.store.get_pool(id).await?.ok_or_else(missing)?;
        let workspace = self.store.get_workspace(pool.workspace_id).await?;
        match workspace {
            Some(w) if w.organisation_id == organisation_id => Ok(pool),
            _ => Err(missing()),
        }
    }

    /// The delivery the route names, which must belong to its organisation.
    async fn delivery_in(
        &self,
        organisation_id: Uuid,
        delivery: &str,
    ) -> Result<DeliverySummary, ServiceError> {
        let missing = || ServiceError::not_found("no such delivery in this organisation");
        let id = parse_uuid(delivery).ok_or_else(missing)?;
        self.store
            .delivery_summary(id)
            .await?
            .filter(|d| d.organisation_id == organisation_id)
            .ok_or_else(missing)
    }

    /// A pool's deliveries, newest first, optionally only those in `status` or last changed
    /// at or after `since`.
    pub async fn admin_list_deliveries(
        &self,
        principal: &Principal,
        organisation: &str,
        pool: &str,
        status: Option<DeliveryStatus>,
        since: Option<DateTime<Utc>>,
        page: AdminPage,
    ) -> Result<Paged<DeliverySummary>, ServiceError> {
        let org = self
            .admit_admin(
                principal,
                Operation::ListDeliveries,
                organisation,
                Some(pool),
            )
            .await?;
        let pool = self.pool_for_deliveries(org, pool).await?;
        let filter = DeliveryFilter {
            pool_id: pool.id,
            status,
            since,
            limit: page.fetch(),
        };
        let rows = self.store.deliveries_page(&filter, page.after()).await?;
        Ok(page.of(rows, |d| d.id))
    }

    /// A delivery with every attempt (the full error of each is here, never in events).
    pub async fn admin_get_delivery(
        &self,
        principal: &Principal,
        organisation: &str,
        delivery: &str,
    ) -> Result<DeliveryReport, ServiceError> {
        let operation = Operation::GetDelivery;
        let org = self
            .admit_admin(principal, operation, organisation, Some(delivery))
            .await?;
        let summary = self.delivery_in(org, delivery).await?;
        self.delivery_report(summary.id).await
    }

    pub async fn admin_resend_delivery(
        &self,
        principal: &Principal,
        organisation: &str,
        delivery: &str,
        write: &WriteContext,
    ) -> Result<Resent, ServiceError> {
        let operation = Operation::ResendDelivery;
        let org = self
            .admit_admin(principal, operation, organisation, Some(delivery))
            .await?;
        let summary = self.delivery_in(org, delivery).await?;
        self.resend_delivery(summary.id, write).await
    }

    pub async fn admin_recover_deliveries(
        &self,
        principal: &Principal,
        organisation: &str,
        pool: &str,
        since: DateTime<Utc>,
        write: &WriteContext,
    ) -> Result<Vec<Resent>, ServiceError> {
        let operation = Operation::RecoverDeliveries;
        let org = self
            .admit_admin(principal, operation, organisation, Some(pool))
            .await?;
        let pool = self.pool_for_deliveries(org, pool).await?;
        self.recover_deliveries(pool.id, since, write).await
    }

    /// A pool's deliveries, last changed first.
    pub async fn list_deliveries(
        &self,
        pool_id: Uuid,
        status: Option<DeliveryStatus>,
        since: Option<DateTime<Utc>>,
        limit: u32,
    ) -> Result<Vec<DeliverySummary>, ServiceError> {
        self.store
            .get_pool(pool_id)
            .await?
            .ok_or_else(|| ServiceError::not_found("no such runner pool"))?;
        let filter = DeliveryFilter {
            pool_id,
            status,
            since,
            limit,
        };
        Ok(self.store.list_deliveries(&filter).await?)
    }

    /// Resends a delivery: a `pending` one of an open command gets an attempt now; a `failed`
    /// one becomes a new `queued` command whose delivery carries its `webhook-id`, once.
    pub async fn resend_delivery(
        &self,
        delivery_id: Uuid,
        write: &WriteContext,
    ) -> Result<Resent, ServiceError> {
        let d = self
            .store
            .delivery_summary(delivery_id)
            .await?
            .ok_or_else(|| ServiceError::not_found("no such delivery"))?;
        let event = |data: serde_json::Value| {
            event_by(
                write,
                d.organisation_id,
                Some(d.workspace_id),
                RESENT,
                "webhook_delivery",
                d.id,
                data,
            )
        };
        let now = Self::now();
        match d.status {
            DeliveryStatus::Pending if d.command_status.is_open() => {
                let data = json!({
                    "commandId": d.command_id,
                    "webhookId": d.webhook_id,
                    "resentAs": d.id,
                    "newCommandId": null,
                });
                if !self
                    .store
                    .resend_pending(write, d.id, now, &event(data))
                    .await?
                {
                    return Err(wrong_state(
                        "the delivery has an attempt in flight, or is no longer pending; try again when it ends"
                            .into(),
                    ));
                }
                Ok(Resent {
                    delivery_id: d.id,
                    sent_as: d.id,
                    new_command_id: None,
                    webhook_id: d.webhook_id,
                })
            }
            DeliveryStatus::Pending => Err(wrong_state(format!(
                "the delivery's command is {}; it is not sent again",
                d.command_status
            ))),
            DeliveryStatus::Failed => {
                if let Some(resent_as) = d.resent_as {
                    return Err(wrong_state(format!(
                        "the delivery was already resent as delivery {resent_as}"
                    )));
                }
                if d.pool_deleted {
                    return Err(ServiceError::Conflict {
                        code: "pool_deleted",
                        message: "the runner pool is deleted".into(),
                        details: None,
                    });
                }
                let new_command_id = Uuid::new_v4();
                let new_delivery_id = Uuid::new_v4();
                let deadline_at =
                    now + chrono::Duration::seconds(i64::from(d.timeout_seconds.max(1)));
                let data = json!({
                    "commandId": d.command_id,
                    "webhookId": d.webhook_id,
                    "resentAs": new_delivery_id,
                    "newCommandId": new_command_id,
                });
                let resend = ResendFailed {
                    delivery_id: d.id,
                    new_command_id,
                    new_delivery_id,
                    webhook_id: d.webhook_id,
                    at: now,
                    deadline_at,
                    // The new command is submitted like any other, so a stream or export
                    // consumer that follows `runner_command.submitted` sees it; its text is
                    // the original's, whose digest that command's own event already carries.
                    events: vec![
                        event(data),
                        event_by(
                            write,
                            d.organisation_id,
                            Some(d.workspace_id),
                            "runner_command.submitted",
                            "runner_command",
                            new_command_id,
                            json!({
                                "poolId": d.pool_id,
                                "timeoutSeconds": d.timeout_seconds,
                                "deliveryId": new_delivery_id,
                                "resentFrom": d.command_id,
                            }),
                        ),
                    ],
                };
                if !self.store.resend_failed(write, &resend).await? {
                    return Err(wrong_state(
                        "the delivery was resent meanwhile or its pool deleted".into(),
                    ));
                }
                Ok(Resent {
                    delivery_id: d.id,
                    sent_as: new_delivery_id,
                    new_command_id: Some(new_command_id),
                    webhook_id: d.webhook_id,
                })
            }
            other => Err(wrong_state(format!(
                "the delivery is {other}: only a pending or failed delivery can be resent"
            ))),
        }
    }

    /// Resends every delivery of the pool that failed at or after `since` and was not resent
    /// yet, each once; returns what was resent.
    pub async fn recover_deliveries(
        &self,
        pool_id: Uuid,
        since: DateTime<Utc>,
        write: &WriteContext,
    ) -> Result<Vec<Resent>, ServiceError> {
        let failed = self
            .list_deliveries(
                pool_id,
                Some(DeliveryStatus::Failed),
                Some(since),
                RECOVER_LIMIT,
            )
            .await?;
        let mut resent = Vec::new();
        for d in failed.iter().filter(|d| d.resent_as.is_none()) {
            match self.resend_delivery(d.id, write).await {
                Ok(r) => resent.push(r),
                // Resent meanwhile (another recover), or its pool deleted: skipped.
                Err(ServiceError::Conflict { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(resent)
    }
}
