//! What each side of an attack got: `Tally` counts outcomes (an HTTP status, a connection error,
//! or an answer lacking what it must carry), and the helpers here show a tally, tell whether it
//! holds only 2xx, count its HTTP answers and turn a request's result into an outcome.

use std::collections::BTreeMap;
use std::sync::Mutex;

pub(super) const CONNECTION_ERROR: &str = "connection error";

/// Outcomes of one side of one attack: a status ("200"), a connection error, or an answer that
/// lacks what it must carry ("201 without deliveryId").
#[derive(Default)]
pub(super) struct Tally(Mutex<BTreeMap<String, u64>>);

impl Tally {
    pub(super) fn add(&self, outcome: impl Into<String>) {
        *self
            .0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(outcome.into())
            .or_default() += 1;
    }

    pub(super) fn take(&self) -> BTreeMap<String, u64> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

pub(super) fn show(tally: &BTreeMap<String, u64>) -> String {
    if tally.is_empty() {
        return "nothing".into();
    }
    tally
        .iter()
        .map(|(outcome, n)| format!("{n}×{outcome}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn status(outcome: &str) -> Option<u16> {
    outcome.parse().ok()
}

/// Something was asked, and every answer was a plain 2xx.
pub(super) fn all_2xx(tally: &BTreeMap<String, u64>) -> bool {
    !tally.is_empty()
        && tally
            .keys()
            .all(|o| status(o).is_some_and(|s| (200..300).contains(&s)))
}

/// HTTP answers (connection errors left out).
pub(super) fn answers(tally: &BTreeMap<String, u64>) -> u64 {
    tally
        .iter()
        .filter(|(o, _)| status(o).is_some())
        .map(|(_, n)| n)
        .sum()
}

pub(super) fn outcome_of(result: reqwest::Result<reqwest::Response>) -> String {
    result.map_or(CONNECTION_ERROR.into(), |r| r.status().as_u16().to_string())
}
