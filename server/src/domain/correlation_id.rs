use std::fmt;

/// A request's correlation id: 8 to 128 characters of `^[A-Za-z0-9][A-Za-z0-9._:-]+$`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CorrelationId(String);

impl CorrelationId {
    pub const MIN_LEN: usize = 8;
    pub const MAX_LEN: usize = 128;

    pub fn parse(raw: &str) -> Result<Self, String> {
        // The pattern is ASCII-only, so a byte length equals the character length of a valid id.
        if !(Self::MIN_LEN..=Self::MAX_LEN).contains(&raw.len()) {
            return Err(format!(
                "must be {} to {} characters",
                Self::MIN_LEN,
                Self::MAX_LEN
            ));
        }
        let mut bytes = raw.bytes();
        let first_ok = bytes.next().is_some_and(|b| b.is_ascii_alphanumeric());
        let rest_ok = bytes.all(super::ids::is_key_char);
        if first_ok && rest_ok {
            Ok(Self(raw.to_owned()))
        } else {
            Err("must match ^[A-Za-z0-9][A-Za-z0-9._:-]+$".to_owned())
        }
    }

    pub fn generate() -> Self {
        Self(uuid::Uuid::new_v4().to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CorrelationId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::CorrelationId;

    #[test]
    fn accepts_the_boundaries() {
        assert!(CorrelationId::parse("abcdefgh").is_ok());
        assert!(CorrelationId::parse(&"a".repeat(128)).is_ok());
        assert!(CorrelationId::parse("A1._:-zz").is_ok());
    }

    #[test]
    fn rejects_outside_the_rules() {
        for bad in [
            "abcdefg",
            &"a".repeat(129),
            ".abcdefgh",
            "abc defgh",
            "abcdéfghi",
            "abcd/efgh",
        ] {
            assert!(
                CorrelationId::parse(bad).is_err(),
                "{bad:?} should be rejected"
            );
        }
    }

    #[test]
    fn generated_ids_are_valid() {
        let id = CorrelationId::generate();
        assert!(CorrelationId::parse(id.as_str()).is_ok());
    }
}
