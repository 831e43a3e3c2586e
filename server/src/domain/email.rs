//! A user's email address, its name within its organisation: trimmed, at most 254 bytes, one
//! `@` with something on each side, no U+0000. Plausible, not verified: nothing is sent to it.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Email(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be an email address")]
pub struct InvalidEmail;

impl Email {
    /// RFC 5321's limit on a path, which bounds an address (counted in characters, as the
    /// document's `maxLength` is).
    pub const MAX_CHARS: usize = 254;
    /// The document's pattern: what the parser accepts once trimmed.
    pub const PATTERN: &str = r"^[^@\s\u0000][^@\u0000]*@[^@\u0000]*[^@\s\u0000]$";

    pub fn parse(raw: &str) -> Result<Self, InvalidEmail> {
        let email = raw.trim();
        let plausible = !email.contains('\0')
            && email.chars().count() <= Self::MAX_CHARS
            && email.split_once('@').is_some_and(|(local, domain)| {
                !local.is_empty() && !domain.is_empty() && !domain.contains('@')
            });
        if plausible {
            Ok(Self(email.to_owned()))
        } else {
            Err(InvalidEmail)
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Display for Email {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_trimmed_and_needs_one_at_with_both_sides() {
        assert_eq!(
            Email::parse(" a@b.example ").unwrap().as_str(),
            "a@b.example"
        );
        for bad in [
            "",
            "a",
            "@b",
            "a@",
            "a@b@c",
            "a\0@b",
            &format!("{}@b", "a".repeat(253)),
        ] {
            assert_eq!(Email::parse(bad), Err(InvalidEmail), "{bad:?}");
        }
    }
}
