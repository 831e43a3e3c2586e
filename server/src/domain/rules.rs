//! The rules the records adapters enforce inside their transactions, decided here once.
//!
//! An adapter counts or reads under its lock (Postgres row locks, SQLite's write lock) and asks
//! these functions what the counts mean, so a rule cannot drift between backends. They are
//! business rules, not storage, so they live in `domain`; they still take and return three of
//! the storage ports' values (`TokenRecord`, `InsertTokenError`, `ModerationBasis`), the one
//! place `domain` names `storage`.

use chrono::{DateTime, Utc};

use crate::domain::{CommandStatus, DeliveryStatus, ReviewStatus};
use crate::storage::{InsertTokenError, ModerationBasis, TokenRecord};

/// May `token` be issued, given what its transaction counted under its locks: the live grants
/// its issuer (when it has one) holds on the requested workspaces, and the owner's active
/// tokens with its name (`same_name`) and in all (`active`). The issuer's loss comes first.
pub(crate) fn may_issue(
    token: &TokenRecord,
    issuer_grants: i64,
    same_name: i64,
    active: i64,
    max_active: u32,
) -> Result<(), InsertTokenError> {
    if token.issued_by_token_id.is_some() {
        issuer_kept_access(issuer_grants, token.workspace_ids.len())?;
    }
    owner_may_hold_another(same_name, active, max_active)
}

/// The issuing token must still hold a live grant on every workspace the new token names:
/// `live` is how many of the `requested` workspaces it still holds.
fn issuer_kept_access(live: i64, requested: usize) -> Result<(), InsertTokenError> {
    if live != requested as i64 {
        return Err(InsertTokenError::IssuerLostAccess);
    }
    Ok(())
}

/// The owner may hold one more active token unless one of them has the same name
/// (`same_name` > 0) or they already hold `max_active` (`active`).
fn owner_may_hold_another(
    same_name: i64,
    active: i64,
    max_active: u32,
) -> Result<(), InsertTokenError> {
    if same_name > 0 {
        return Err(InsertTokenError::NameTaken);
    }
    if active >= i64::from(max_active) {
        return Err(InsertTokenError::LimitReached);
    }
    Ok(())
}

/// A runner's report applies only from the state the service read (`read`), still the
/// delivery's (`now`, read under its lock), and only while its command is open: a cancelled or
/// timed-out command takes no more reports.
pub(crate) fn report_applies(
    read: DeliveryStatus,
    now: DeliveryStatus,
    command: CommandStatus,
) -> bool {
    read == now && command.is_open()
}

/// A pool with open commands is deleted only when forced (which cancels them).
pub(crate) fn pool_is_busy(open: i64) -> bool {
    open > 0
}

/// A caller limited to some environments deletes a pool only when none of its open commands
/// lies outside them (`outside` counts those, a command without an environment included):
/// forcing would cancel work it cannot reach, and even the `pool_busy` answer would tell it
/// about that work. An unlimited caller counts none outside.
pub(crate) fn pool_deletion_reaches(outside: i64) -> bool {
    outside == 0
}

/// A review hidden after reports stays hidden when its author replaces it: only an
/// administrator's restore clears that. Any other stored status yields to the new moderation.
pub(crate) fn replacement_keeps_moderation(stored: Option<ReviewStatus>) -> bool {
    stored == Some(ReviewStatus::Hidden)
}

/// A moderation decision applies only to the review it was made on: the same number of reports
/// (`reports`, counted under the review's lock), the same status, and not replaced or restored
/// since. The status is compared too because the service reads it apart from the count: a
/// report that hid the review in between adds to the count, but the count may be read after it.
pub(crate) fn moderation_is_current(
    reports: i64,
    status: ReviewStatus,
    updated_at: DateTime<Utc>,
    basis: &ModerationBasis,
) -> bool {
    reports == basis.reports as i64 && status == basis.status && updated_at == basis.updated_at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_issuer_must_still_hold_every_requested_workspace() {
        assert!(issuer_kept_access(2, 2).is_ok());
        assert!(matches!(
            issuer_kept_access(1, 2),
            Err(InsertTokenError::IssuerLostAccess)
        ));
    }

    #[test]
    fn a_taken_name_wins_over_the_cap() {
        assert!(owner_may_hold_another(0, 2, 3).is_ok());
        assert!(matches!(
            owner_may_hold_another(1, 3, 3),
            Err(InsertTokenError::NameTaken)
        ));
        assert!(matches!(
            owner_may_hold_another(0, 3, 3),
            Err(InsertTokenError::LimitReached)
        ));
    }

    #[test]
    fn a_limited_caller_deletes_only_when_nothing_open_lies_outside() {
        assert!(pool_deletion_reaches(0));
        assert!(!pool_deletion_reaches(1));
    }

    #[test]
    fn only_a_hidden_review_keeps_its_moderation_when_replaced() {
        assert!(replacement_keeps_moderation(Some(ReviewStatus::Hidden)));
        for status in [
            ReviewStatus::Published,
            ReviewStatus::Held,
            ReviewStatus::Rejected,
        ] {
            assert!(!replacement_keeps_moderation(Some(status)));
        }
        assert!(!replacement_keeps_moderation(None));
    }

    #[test]
    fn a_decision_on_fewer_reports_another_status_or_an_older_review_is_stale() {
        let at = Utc::now();
        let published = ReviewStatus::Published;
        let basis = ModerationBasis {
            reports: 2,
            status: published,
            updated_at: at,
        };
        assert!(moderation_is_current(2, published, at, &basis));
        assert!(!moderation_is_current(3, published, at, &basis));
        assert!(!moderation_is_current(
            2,
            published,
            at + chrono::Duration::microseconds(1),
            &basis
        ));
        // Hidden by a report the count was read after: the same count, another status.
        assert!(!moderation_is_current(2, ReviewStatus::Hidden, at, &basis));
    }

    #[test]
    fn a_report_applies_from_the_state_read_and_to_an_open_command_only() {
        use DeliveryStatus::{Pending, Received};
        assert!(report_applies(Pending, Pending, CommandStatus::Queued));
        // Another report moved the delivery since the service read it.
        assert!(!report_applies(
            Pending,
            Received,
            CommandStatus::Dispatched
        ));
        // The command was cancelled (or timed out) meanwhile.
        assert!(!report_applies(Pending, Pending, CommandStatus::Cancelled));
        assert!(!report_applies(Received, Received, CommandStatus::Failed));
    }

    #[test]
    fn only_open_commands_make_a_pool_busy() {
        assert!(!pool_is_busy(0));
        assert!(pool_is_busy(1));
    }
}
