//! Every fast-state key layout, built in one place.
//!
//! Each key starts with the deployment's prefix (`--redis-prefix`, or a test's own), names its
//! kind, and wraps the principal it belongs to in braces: a Redis Cluster hash tag, so one
//! principal's keys share a slot. Each Lua script touches one key, except the rate limit's,
//! which charges a bearer request's token, user and organisation buckets at once: those share
//! the organisation's tag, so no script needs more than one slot. The in-process adapter uses
//! the same keys, so both adapters see the same layout.
//!
//! The layouts are pinned by the tests below: changing one orphans every stored record
//! (idempotency records live 24 hours, nonces 660 s, quota counts 24 hours, last-use claims
//! 60 s) and splits running replicas. (The rate-limit buckets moved under the organisation's
//! tag with the per-user and per-organisation budgets: an upgrade starts each token's bucket
//! afresh, once.)

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

/// Whose budget a rate-limit bucket is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RateScope<'a> {
    /// A bearer token of an organisation.
    Token {
        organisation: Uuid,
        token: Uuid,
    },
    /// A user of an organisation, whichever of its tokens it uses.
    User {
        organisation: Uuid,
        user: Uuid,
    },
    Organisation(Uuid),
    /// A client address without a valid bearer token.
    Address(&'a str),
    /// A client address sending signed runner requests, before the signature is checked.
    RunnerAddress(&'a str),
    /// A runner whose signature verified.
    Runner(Uuid),
}

/// A rate-limit bucket; `bucket` is `all` or `issue`. The buckets of a bearer request (its
/// token's, its user's and its organisation's) share the organisation's hash tag, so the one
/// script that charges them together touches one slot; the others are tagged by their own
/// subject.
pub fn rate_limit(prefix: &str, scope: RateScope<'_>, bucket: &str) -> String {
    match scope {
        RateScope::Token {
            organisation,
            token,
        } => format!("{prefix}rl:{{org:{organisation}}}:tok:{token}:{bucket}"),
        RateScope::User { organisation, user } => {
            format!("{prefix}rl:{{org:{organisation}}}:user:{user}:{bucket}")
        }
        RateScope::Organisation(organisation) => {
            format!("{prefix}rl:{{org:{organisation}}}:org:{bucket}")
        }
        RateScope::Address(address) => format!("{prefix}rl:{{ip:{address}}}:{bucket}"),
        RateScope::RunnerAddress(address) => {
            format!("{prefix}rl:{{runner-ip:{address}}}:{bucket}")
        }
        RateScope::Runner(runner) => format!("{prefix}rl:{{runner:{runner}}}:{bucket}"),
    }
}

/// The count of idempotency bytes stored for one owner (`user:<id>` or `runner:<id>`) in the
/// current window.
pub fn idempotency_quota(prefix: &str, owner: &str) -> String {
    format!("{prefix}idem-quota:{{{owner}}}")
}

/// A runner signature nonce, remembered so it is spent once.
pub fn runner_nonce(prefix: &str, runner_id: Uuid, nonce: &str) -> String {
    format!("{prefix}nonce:{{{runner_id}}}:{nonce}")
}

/// The claim on writing a token's last use in the current window (`service::token_hygiene`).
pub fn token_last_use(prefix: &str, token_id: Uuid) -> String {
    format!("{prefix}last-use:{{tok:{token_id}}}")
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
    fn rate_limits_are_tagged_by_organisation_or_subject() {
        let org = Uuid::parse_str("00000000-0000-4000-8000-000000000001").unwrap();
        let id = Uuid::parse_str("00000000-0000-4000-8000-000000000002").unwrap();
        assert_eq!(
            rate_limit("cp:", RateScope::Address("127.0.0.1"), "all"),
            "cp:rl:{ip:127.0.0.1}:all"
        );
        assert_eq!(
            rate_limit(
                "",
                RateScope::Token {
                    organisation: org,
                    token: id
                },
                "all"
            ),
            format!("rl:{{org:{org}}}:tok:{id}:all")
        );
        assert_eq!(
            rate_limit(
                "",
                RateScope::User {
                    organisation: org,
                    user: id
                },
                "issue"
            ),
            format!("rl:{{org:{org}}}:user:{id}:issue")
        );
        assert_eq!(
            rate_limit("", RateScope::Organisation(org), "all"),
            format!("rl:{{org:{org}}}:org:all")
        );
        assert_eq!(
            rate_limit("", RateScope::RunnerAddress("10.0.0.1"), "all"),
            "rl:{runner-ip:10.0.0.1}:all"
        );
        assert_eq!(
            rate_limit("", RateScope::Runner(id), "all"),
            format!("rl:{{runner:{id}}}:all")
        );
    }

    #[test]
    fn idempotency_quotas_are_tagged_by_owner() {
        assert_eq!(
            idempotency_quota("cp:", "user:abc"),
            "cp:idem-quota:{user:abc}"
        );
    }

    #[test]
    fn nonces_are_tagged_by_runner() {
        let runner = Uuid::parse_str("1f0e6b2c-3c4d-4e5f-8a9b-0c1d2e3f4a5b").unwrap();
        assert_eq!(
            runner_nonce("test-1:", runner, "n-0123456789abcdef"),
            "test-1:nonce:{1f0e6b2c-3c4d-4e5f-8a9b-0c1d2e3f4a5b}:n-0123456789abcdef"
        );
    }

    #[test]
    fn last_use_claims_are_tagged_by_token() {
        let token = Uuid::parse_str("1f0e6b2c-3c4d-4e5f-8a9b-0c1d2e3f4a5b").unwrap();
        assert_eq!(
            token_last_use("cp:", token),
            "cp:last-use:{tok:1f0e6b2c-3c4d-4e5f-8a9b-0c1d2e3f4a5b}"
        );
    }

    /// The cluster slot of a key, as Redis Cluster and its client compute it: CRC16 (XMODEM)
    /// of the hash tag, or of the whole key without one, modulo 16384.
    fn slot(key: &str) -> redis::cluster_routing::Slot {
        redis::cluster_routing::Slot::for_key(key)
    }

    #[test]
    fn slots_are_computed_as_redis_cluster_does() {
        // From the Redis Cluster specification: "123456789" hashes to 0x31C3.
        assert_eq!(
            slot("123456789"),
            redis::cluster_routing::Slot::new(0x31C3).unwrap()
        );
        assert_eq!(slot("{123456789}.other"), slot("123456789"));
    }

    /// The one script with several keys charges a request's buckets together
    /// (`RateGuard::buckets`): a bearer request's token, user and organisation buckets (and,
    /// for issuance, the user's issue bucket), or an address's `all` and `issue` buckets. Each
    /// set is in one slot, whatever the prefix, which stays outside the tag.
    #[test]
    fn every_script_touches_one_slot_whatever_the_prefix() {
        let org = Uuid::new_v4();
        let (token, user, runner) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        for prefix in ["", "cp:", "cpt:0123456789abcdef0123456789abcdef:"] {
            let bearer = [
                rate_limit(
                    prefix,
                    RateScope::User {
                        organisation: org,
                        user,
                    },
                    "issue",
                ),
                rate_limit(
                    prefix,
                    RateScope::Token {
                        organisation: org,
                        token,
                    },
                    "all",
                ),
                rate_limit(
                    prefix,
                    RateScope::User {
                        organisation: org,
                        user,
                    },
                    "all",
                ),
                rate_limit(prefix, RateScope::Organisation(org), "all"),
            ];
            let address = [
                rate_limit(prefix, RateScope::Address("10.1.2.3"), "issue"),
                rate_limit(prefix, RateScope::Address("10.1.2.3"), "all"),
            ];
            for set in [&bearer[..], &address[..]] {
                assert!(
                    set.iter().all(|k| slot(k) == slot(&set[0])),
                    "one GCRA call, several slots: {set:?}"
                );
            }
            assert_eq!(slot(&bearer[0]), slot(&format!("org:{org}")));
            // Single-key scripts: the slot is the principal's, not the key's text, so a
            // principal's records, quota and claims stay together under any prefix.
            let principal = format!("tok:{token}");
            for key in [
                idempotency_record(prefix, &principal, "POST", "issueToken", "key-1"),
                idempotency_record(prefix, &principal, "DELETE", "revokeToken", "key-2"),
                token_last_use(prefix, token),
            ] {
                assert_eq!(slot(&key), slot(&principal), "{key}");
            }
            let owner = format!("user:{user}");
            assert_eq!(slot(&idempotency_quota(prefix, &owner)), slot(&owner));
            assert_eq!(
                slot(&runner_nonce(prefix, runner, "n-1")),
                slot(&runner.to_string())
            );
            assert_eq!(
                slot(&rate_limit(prefix, RateScope::Runner(runner), "all")),
                slot(&format!("runner:{runner}"))
            );
            assert_eq!(
                slot(&rate_limit(
                    prefix,
                    RateScope::RunnerAddress("10.0.0.1"),
                    "all"
                )),
                slot("runner-ip:10.0.0.1")
            );
        }
    }
}
