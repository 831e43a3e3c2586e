//! The bounds of request fields: how long free text may be, what it may not contain, how many
//! items a list holds. One rule each, so the parsers (`http/fields`) and the document's schemas
//! state the same limits, and the service's value types can use them too. The per-field
//! maxima stay beside the input they bound (`TokenName::MAX_CHARS`,
//! `SubmitCommandInput::MAX_ARG`, ...); the rules here take them as arguments.

/// The document's statement of [`reject_nul`] on every free-text input: no U+0000.
pub const NO_NUL_PATTERN: &str = r"^[^\u0000]*$";

/// Text containing U+0000 cannot be stored (Postgres rejects it): refuse it as input instead.
pub fn reject_nul(raw: &str) -> Result<&str, String> {
    if raw.contains('\0') {
        Err("must not contain the NUL character".to_owned())
    } else {
        Ok(raw)
    }
}

/// The fewest characters of any free-text input.
pub const MIN_TEXT_CHARS: usize = 1;

/// The rule of every free-text input: `MIN_TEXT_CHARS` to `max` characters, without NUL.
pub fn bounded_text(raw: &str, max: usize) -> Result<String, String> {
    let n = reject_nul(raw)?.chars().count();
    if n < MIN_TEXT_CHARS || n > max {
        return Err(format!("must be {MIN_TEXT_CHARS} to {max} characters"));
    }
    Ok(raw.to_owned())
}

/// The rule of every integer input with bounds: `min` to `max`, both included.
pub fn bounded_integer(n: i64, min: i64, max: i64) -> Result<i64, String> {
    if (min..=max).contains(&n) {
        Ok(n)
    } else {
        Err(format!("must be an integer from {min} to {max}"))
    }
}

/// An argument-like string: possibly empty, at most `max` characters, without NUL.
pub fn bounded_arg(raw: &str, max: usize) -> Result<&str, String> {
    if raw.contains('\0') || raw.chars().count() > max {
        Err(format!("must be at most {max} characters without NUL"))
    } else {
        Ok(raw)
    }
}

/// A list of `len` items holds `min` to `max` of them.
pub fn item_count(len: usize, min: usize, max: usize) -> Result<(), String> {
    if len < min {
        let plural = if min == 1 { "" } else { "s" };
        return Err(format!("must contain at least {min} item{plural}"));
    }
    if len > max {
        return Err(format!("must have at most {max} items"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_one_to_max_characters_without_nul() {
        assert_eq!(bounded_text("ab", 2).as_deref(), Ok("ab"));
        assert!(bounded_text("", 2).is_err());
        assert!(bounded_text("abc", 2).is_err());
        assert!(bounded_text("a\0", 5).is_err());
    }

    #[test]
    fn an_argument_may_be_empty_but_not_long_or_nul() {
        assert_eq!(bounded_arg("", 2), Ok(""));
        assert!(bounded_arg("abc", 2).is_err());
        assert!(bounded_arg("\0", 2).is_err());
    }

    #[test]
    fn item_counts_name_the_bound_they_miss() {
        assert!(item_count(1, 1, 3).is_ok());
        assert_eq!(
            item_count(0, 1, 3),
            Err("must contain at least 1 item".to_owned())
        );
        assert_eq!(
            item_count(0, 2, 3),
            Err("must contain at least 2 items".to_owned())
        );
        assert_eq!(
            item_count(4, 1, 3),
            Err("must have at most 3 items".to_owned())
        );
    }
}
