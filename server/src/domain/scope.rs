use std::fmt;

/// A permission a token can hold. The list is closed: an unknown value is rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    TokensIssue,
    TokensRevoke,
    RunnerPoolsDelete,
    RunnerCommandsSubmit,
    AuditRead,
    ActivityRead,
    WorkflowsRequestApproval,
    ReviewsWrite,
    ReviewsReport,
    /// Reading the admin operations' resources; only for a user whose role administers.
    AdminRead,
    /// Changing them; only for a user whose role administers.
    AdminWrite,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown scope")]
pub struct UnknownScope;

impl Scope {
    pub const ALL: [Scope; 11] = [
        Scope::TokensIssue,
        Scope::TokensRevoke,
        Scope::RunnerPoolsDelete,
        Scope::RunnerCommandsSubmit,
        Scope::AuditRead,
        Scope::ActivityRead,
        Scope::WorkflowsRequestApproval,
        Scope::ReviewsWrite,
        Scope::ReviewsReport,
        Scope::AdminRead,
        Scope::AdminWrite,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::TokensIssue => "tokens:issue",
            Scope::TokensRevoke => "tokens:revoke",
            Scope::RunnerPoolsDelete => "runner-pools:delete",
            Scope::RunnerCommandsSubmit => "runner-commands:submit",
            Scope::AuditRead => "audit:read",
            Scope::ActivityRead => "activity:read",
            Scope::WorkflowsRequestApproval => "workflows:request-approval",
            Scope::ReviewsWrite => "reviews:write",
            Scope::ReviewsReport => "reviews:report",
            Scope::AdminRead => "admin:read",
            Scope::AdminWrite => "admin:write",
        }
    }

    /// An admin scope: held only by tokens of users whose role allows it (`Role::allows`).
    pub fn is_admin(self) -> bool {
        matches!(self, Scope::AdminRead | Scope::AdminWrite)
    }

    pub fn parse(raw: &str) -> Result<Self, UnknownScope> {
        Self::ALL
            .into_iter()
            .find(|scope| scope.as_str() == raw)
            .ok_or(UnknownScope)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A set of scopes that keeps the order in which they were first given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scopes(Vec<Scope>);

impl Scopes {
    pub fn all() -> Self {
        Self(Scope::ALL.to_vec())
    }

    pub fn contains(&self, scope: Scope) -> bool {
        self.0.contains(&scope)
    }

    pub fn iter(&self) -> impl Iterator<Item = Scope> + '_ {
        self.0.iter().copied()
    }

    /// The scopes of `self` that `other` lacks.
    pub fn missing_from(&self, other: &Scopes) -> Vec<Scope> {
        self.iter().filter(|s| !other.contains(*s)).collect()
    }

    pub fn to_strings(&self) -> Vec<String> {
        self.iter().map(|s| s.as_str().to_owned()).collect()
    }
}

impl FromIterator<Scope> for Scopes {
    fn from_iter<I: IntoIterator<Item = Scope>>(iter: I) -> Self {
        let mut scopes = Vec::new();
        for scope in iter {
            if !scopes.contains(&scope) {
                scopes.push(scope);
            }
        }
        Self(scopes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scope_round_trips() {
        for scope in Scope::ALL {
            assert_eq!(Scope::parse(scope.as_str()), Ok(scope));
        }
        assert_eq!(Scope::parse("tokens:Issue"), Err(UnknownScope));
    }

    #[test]
    fn duplicates_collapse_in_first_order() {
        let scopes: Scopes = [Scope::AuditRead, Scope::TokensIssue, Scope::AuditRead]
            .into_iter()
            .collect();
        assert_eq!(scopes.to_strings(), ["audit:read", "tokens:issue"]);
    }
}
