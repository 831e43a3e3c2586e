//! The drill's pass criteria, as printed first and quoted by RELIABILITY.md, and the two
//! thresholds they name: how many requests are timed with the sleeping policy active, and how many
//! HTTP answers the attacker must get in each attack phase. A broken criterion is recorded by
//! number with `Drill::breaks`.

/// Requests timed with the sleeping policy active.
pub(super) const SAMPLES: usize = 40;
/// HTTP answers the attacker must get in each attack phase, some of them 429.
pub(super) const MIN_ANSWERS: u64 = 50;

/// The drill's criteria, in the words RELIABILITY.md quotes.
pub(super) fn criteria(deadline_ms: u64, margin_ms: u64) -> [String; 5] {
    [
        "clients served: the good client and the runner get only 2xx in every attack phase; \
         every runner submission counts, and a connection error, a non-2xx or a 2xx without a \
         deliveryId on it is a failure, as is any non-2xx on the signed report"
            .into(),
        "no 5xx: the server answers no 5xx during the whole drill (http_requests_total in \
         /metrics)"
            .into(),
        "no panic: the server log holds no panic (tests/drills/abuse.sh checks it)".into(),
        format!(
            "policy deadline: with the sleeping policy active, each of {SAMPLES} requests ends \
             within the {deadline_ms} ms deadline + a {margin_ms} ms margin and answers 403 \
             `policy_error`; a 429 or any other answer is a failure"
        ),
        format!(
            "attacks ran: in every attack phase the attacker got at least {MIN_ANSWERS} HTTP \
             answers, some of them 429"
        ),
    ]
}
