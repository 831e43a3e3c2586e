use uuid::Uuid;

/// Parses the canonical 36-character hyphenated form only (`format: uuid`); `Uuid::parse_str`
/// alone would also take the braced, URN and 32-digit forms.
pub fn parse_uuid(raw: &str) -> Option<Uuid> {
    if raw.len() == 36 {
        Uuid::try_parse(raw).ok()
    } else {
        None
    }
}

/// The characters correlation ids and idempotency keys are made of: `[A-Za-z0-9._:-]`.
pub(crate) fn is_key_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-')
}

/// A correlation id or idempotency key: `raw` when it is `min` to `max` bytes long and
/// `valid` takes its bytes, else the rule it breaks (`pattern`, the regex `valid` checks).
/// Those characters are ASCII, so a byte length equals the character length of a valid key.
pub(crate) fn key_text(
    raw: &str,
    (min, max): (usize, usize),
    valid: impl FnOnce(&[u8]) -> bool,
    pattern: &str,
) -> Result<String, String> {
    if !(min..=max).contains(&raw.len()) {
        Err(format!("must be {min} to {max} characters"))
    } else if valid(raw.as_bytes()) {
        Ok(raw.to_owned())
    } else {
        Err(format!("must match {pattern}"))
    }
}

/// A cursor naming a record by id, as the admin lists take it: the canonical form
/// [`parse_uuid`] accepts, or empty (the same as absent). The document states it as written.
pub const UUID_CURSOR_PATTERN: &str =
    "^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})?$";

/// A workspace sequence as a query parameter takes it (`cursor`, `after`): 1 to 18 digits, so
/// every value fits an i64; empty is the same as absent. The document states it as written.
pub const SEQUENCE_PATTERN: &str = "^([0-9]{1,18})?$";

/// A non-empty value of [`SEQUENCE_PATTERN`], or `None`.
pub fn parse_sequence(raw: &str) -> Option<i64> {
    if (1..=18).contains(&raw.len()) && raw.bytes().all(|b| b.is_ascii_digit()) {
        raw.parse().ok()
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_canonical_form_parses() {
        let id = Uuid::new_v4();
        assert_eq!(parse_uuid(&id.to_string()), Some(id));
        assert_eq!(parse_uuid(&id.to_string().to_uppercase()), Some(id));
        assert_eq!(parse_uuid(&format!("{{{id}}}")), None);
        assert_eq!(parse_uuid(&format!("urn:uuid:{id}")), None);
        assert_eq!(parse_uuid(&id.simple().to_string()), None);
    }
}
