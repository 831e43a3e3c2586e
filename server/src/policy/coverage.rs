//! What a cases file covers. An authorizer's cases cover an operation when, among the cases
//! that passed, one is allowed and one denied (`deny:not-found` counts as a denial); every
//! operation the server asks a policy about (the bearer rows of `domain::operation`) must be
//! covered. A moderator's cases cover a verdict when a passing case reaches it; every verdict
//! must be reached, and the rows say whether by a written or a reported review. Failing cases
//! count for nothing: they already fail the test.

use super::cases::CaseResult;
use super::engine::PolicyKind;
use crate::domain::Operation;

/// One operation (authorizer) or verdict (moderator), with how many passing cases reached it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoverageRow {
    /// The operation id or the verdict.
    pub subject: String,
    /// The columns, in order: `allow`, `deny` for an authorizer; `written`, `reported` for a
    /// moderator.
    pub counts: Vec<(&'static str, usize)>,
    /// What no case reached: `allow` or `deny`; for a moderator `any case`.
    pub missing: Vec<&'static str>,
}

impl CoverageRow {
    pub fn complete(&self) -> bool {
        self.missing.is_empty()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coverage {
    pub kind: PolicyKind,
    pub rows: Vec<CoverageRow>,
}

const VERDICTS: [&str; 4] = ["publish", "hold", "reject", "hide"];

/// The operations the server asks an authorizer about, in the contract's order.
pub fn authorized_operations() -> impl Iterator<Item = &'static str> {
    Operation::bearer().map(Operation::id)
}

impl Coverage {
    pub fn of(kind: PolicyKind, results: &[CaseResult]) -> Self {
        let passed = || results.iter().filter(|r| r.passed());
        let rows = match kind {
            PolicyKind::Authorizer => authorized_operations()
                .map(|op| {
                    let of_op = || passed().filter(move |r| r.subject == op);
                    let allow = of_op().filter(|r| r.actual == "allow").count();
                    let deny = of_op().filter(|r| r.actual.starts_with("deny")).count();
                    CoverageRow {
                        subject: op.to_owned(),
                        counts: vec![("allow", allow), ("deny", deny)],
                        missing: [("allow", allow), ("deny", deny)]
                            .into_iter()
                            .filter(|(_, n)| *n == 0)
                            .map(|(what, _)| what)
                            .collect(),
                    }
                })
                .collect(),
            PolicyKind::Moderator => VERDICTS
                .iter()
                .map(|verdict| {
                    let reached = |subject: &str| {
                        passed()
                            .filter(|r| r.actual == *verdict && r.subject == subject)
                            .count()
                    };
                    let (written, reported) = (reached("written"), reached("reported"));
                    CoverageRow {
                        subject: (*verdict).to_owned(),
                        counts: vec![("written", written), ("reported", reported)],
                        missing: if written + reported == 0 {
                            vec!["any case"]
                        } else {
                            vec![]
                        },
                    }
                })
                .collect(),
        };
        Self { kind, rows }
    }

    pub fn complete(&self) -> bool {
        self.rows.iter().all(CoverageRow::complete)
    }

    /// One line naming everything missing, such as `coverage: deleteRunnerPool has no deny
    /// case; hide is reached by no case`; `None` when complete.
    pub fn missing_line(&self) -> Option<String> {
        let gaps: Vec<String> = self
            .rows
            .iter()
            .filter(|row| !row.complete())
            .map(|row| match self.kind {
                PolicyKind::Authorizer => format!(
                    "{} has no {} case",
                    row.subject,
                    row.missing.join(" and no ")
                ),
                PolicyKind::Moderator => format!("{} is reached by no case", row.subject),
            })
            .collect();
        (!gaps.is_empty()).then(|| format!("coverage: {}", gaps.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(subject: &str, expected: &str, actual: &str) -> CaseResult {
        CaseResult {
            name: format!("{subject} {expected}"),
            subject: subject.into(),
            expected: expected.into(),
            actual: actual.into(),
        }
    }

    #[test]
    fn an_operation_without_a_denial_or_a_passing_allow_is_named() {
        let mut results: Vec<CaseResult> = authorized_operations()
            .flat_map(|op| [result(op, "allow", "allow"), result(op, "deny", "deny")])
            .collect();
        assert!(Coverage::of(PolicyKind::Authorizer, &results).complete());
        results.retain(|r| !(r.subject == "deleteRunnerPool" && r.expected == "deny"));
        // A failing case covers nothing.
        results.retain(|r| r.subject != "listActivity");
        results.push(result("listActivity", "allow", "deny"));
        results.push(result("listActivity", "deny", "deny:not-found"));
        let coverage = Coverage::of(PolicyKind::Authorizer, &results);
        assert_eq!(
            coverage.missing_line().unwrap(),
            "coverage: deleteRunnerPool has no deny case; \
             listActivity has no allow and no deny case"
        );
    }

    #[test]
    fn a_verdict_no_case_reaches_is_named() {
        let results = vec![
            result("written", "publish", "publish"),
            result("written", "hold", "hold"),
            result("reported", "reject", "reject"),
        ];
        let coverage = Coverage::of(PolicyKind::Moderator, &results);
        assert_eq!(
            coverage.missing_line().unwrap(),
            "coverage: hide is reached by no case"
        );
        assert_eq!(
            coverage.rows[2].counts,
            vec![("written", 0), ("reported", 1)]
        );
    }
}
