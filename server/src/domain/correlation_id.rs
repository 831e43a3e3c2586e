use std::fmt;

/// A request's correlation id: 8 to 128 characters of `^[A-Za-z0-9][A-Za-z0-9._:-]+$`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CorrelationId(String);

impl CorrelationId {
    pub const LENGTH: (usize, usize) = (8, 128);

    pub fn parse(raw: &str) -> Result<Self, String> {
        let valid = |bytes: &[u8]| {
            bytes.first().is_some_and(u8::is_ascii_alphanumeric)
                && bytes[1..].iter().all(|&b| super::ids::is_key_char(b))
        };
        let pattern = "^[A-Za-z0-9][A-Za-z0-9._:-]+$";
        super::ids::key_text(raw, Self::LENGTH, valid, pattern).map(Self)
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
