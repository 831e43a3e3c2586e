//! A user's role (docs/design.md, "Roles"): a `member` administers nothing, an `admin` its
//! organisation, an `operator` the instance. The admin scopes travel only in tokens of users
//! whose role allows them; authentication drops them from a token whose user no longer has it.

use std::fmt;

use super::Scope;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Role {
    #[default]
    Member,
    Admin,
    Operator,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown role (one of member, admin, operator)")]
pub struct UnknownRole;

impl Role {
    pub const ALL: [Role; 3] = [Role::Member, Role::Admin, Role::Operator];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Member => "member",
            Role::Admin => "admin",
            Role::Operator => "operator",
        }
    }

    pub fn parse(raw: &str) -> Result<Self, UnknownRole> {
        Self::ALL
            .into_iter()
            .find(|role| role.as_str() == raw)
            .ok_or(UnknownRole)
    }

    /// Administers its organisation (an operator administers every one): decides workflow
    /// approvals, and may hold the admin scopes.
    pub fn administers(self) -> bool {
        self != Role::Member
    }

    /// Whether a token of a user in this role may hold `scope`.
    pub fn allows(self, scope: Scope) -> bool {
        !scope.is_admin() || self.administers()
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_role_round_trips() {
        for role in Role::ALL {
            assert_eq!(Role::parse(role.as_str()), Ok(role));
        }
        assert_eq!(Role::parse("Admin"), Err(UnknownRole));
    }

    #[test]
    fn only_administrators_may_hold_the_admin_scopes() {
        for scope in Scope::ALL {
            assert!(Role::Admin.allows(scope) && Role::Operator.allows(scope));
            assert_eq!(Role::Member.allows(scope), !scope.is_admin(), "{scope}");
        }
        assert!(Scope::AdminRead.is_admin() && Scope::AdminWrite.is_admin());
    }
}
