//! Every fast-state key layout, built in one place.
//!
//! Each key starts with the deployment's prefix (`--redis-prefix`, or a test's own), names its
//! kind, and wraps the principal it belongs to in braces: a Redis Cluster hash tag, so one
//! principal's keys share a slot. Each Lua script touches exactly one key, so nothing needs more
//! than one slot today; the tag keeps that true if a script ever touches two keys of one
//! principal. The in-process adapter uses the same keys, so both adapters see the same layout.
//!
//! The layouts are pinned by the tests below: changing one orphans every stored record
//! (idempotency records live 24 hours, nonces 660 s) and splits running replicas.

use uuid::Uuid;

/// An idempotency record: one per principal, method, operation and `Idempotency-Key`.
/// `principal` is `tok:<token id>` or `runner:<id>`.
pub fn idempotency_record(
    prefix: &str,
    principal: &str,
    method: &str,
    operation: &str,
    key: &str,
) -> String {
    format!("{prefix}idem:{{{principal}}}:{method}:{operation}:{key}")
}

/// A rate-limit bucket of one subject (`tok:<token id>`, `runner:<id>` or `ip:<address>`);
/// `bucket` is `all` or `issue`.
pub fn rate_limit(prefix: &str, subject: &str, bucket: &str) -> String {
    format!("{prefix}rl:{{{subject}}}:{bucket}")
}

/// A runner signature nonce, remembered so it is spent once.
pub fn runner_nonce(prefix: &str, runner_id: Uuid, nonce: &str) -> String {
    format!("{prefix}nonce:{{{runner_id}}}:{nonce}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idempotency_records_are_tagged_by_principal() {
        assert_eq!(
            idempotency_record(
                "cp:",
                "tok:1f0e6b2c-3c4d-4e5f-8a9b-0c1d2e3f4a5b",
                "POST",
                "issueToken",
                "key-0123456789abcdef"
            ),
            "cp:idem:{tok:1f0e6b2c-3c4d-4e5f-8a9b-0c1d2e3f4a5b}:POST:issueToken:key-0123456789abcdef"
        );
    }

    #[test]
    fn rate_limits_are_tagged_by_subject() {
        assert_eq!(
            rate_limit("cp:", "ip:127.0.0.1", "all"),
            "cp:rl:{ip:127.0.0.1}:all"
        );
        assert_eq!(rate_limit("", "tok:abc", "issue"), "rl:{tok:abc}:issue");
    }

    #[test]
    fn nonces_are_tagged_by_runner() {
        let runner = Uuid::parse_str("1f0e6b2c-3c4d-4e5f-8a9b-0c1d2e3f4a5b").unwrap();
        assert_eq!(
            runner_nonce("test-1:", runner, "n-0123456789abcdef"),
            "test-1:nonce:{1f0e6b2c-3c4d-4e5f-8a9b-0c1d2e3f4a5b}:n-0123456789abcdef"
        );
    }
}
