//! The audit log's integrity: verifying a workspace's hash chain, exporting its
//! events (`export.rs`, streamed), the admin plane's operations on them (`admin.rs`), and
//! retention (an organisation keeps its events for a set time; older ones are
//! removed in small batches behind a checkpoint the chain restarts from). The chain itself is
//! `domain/audit_chain.rs`; it is written where sequences are given (the Postgres numbering
//! pass, SQLite's insert).

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::json;
use uuid::Uuid;

use super::admin::event_by;
use super::{ServiceError, Services};
use crate::domain::WebhookSigner;
use crate::domain::audit_proof::{
    CheckpointClaim, ProofKeys, Seal, SignedHead, from_hex, sign_checkpoint, sign_head, to_hex,
};
use crate::domain::{AuditEvent, GENESIS_HASH, Span, chain_hash};
use crate::storage::{
    AuditCheckpoint, AuditHead, ChainedEvent, CheckpointSealer, RecordStore, StoreError,
    TimeWindow, WriteContext,
};

/// Events read per page while walking a chain or exporting.
pub const AUDIT_PAGE: u32 = 1000;
/// Events retention removes in one transaction.
pub const RETENTION_BATCH: u32 = 500;
/// Batches one retention pass runs per workspace at most; the next pass goes on.
const RETENTION_BATCHES_PER_PASS: usize = 20;

/// What is wrong with a chain, at the first event where it breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChainProblem {
    /// The event at this sequence is not the one that was chained there (its content changed).
    Changed,
    /// The event at this sequence is missing.
    Deleted,
    /// An event was put in at this sequence, the ones after it renumbered.
    Inserted,
    /// The event chained at this sequence now sits at another one.
    Reordered,
    /// The walk ended at this sequence with a hash other than the stored head's, or the stored
    /// head names a sequence the walk did not end at.
    HeadMismatch,
    /// Events exist above the stored head (the head pointer was moved back).
    BeyondHead,
    /// The log ends below a signed head: its tail was cut (this is the signed head's sequence).
    CutTail,
    /// The chain reached a signed head's sequence with another hash.
    SignedHeadMismatch,
    /// A signed head whose signature does not verify with a trusted key.
    ForgedSignedHead,
    /// A checkpoint whose signature does not verify, or an unsigned one where only the
    /// migration's may be.
    ForgedCheckpoint,
    /// A checkpoint that does not name the checkpoint just below it.
    CheckpointUnlinked,
    /// A checkpoint's hash matches no signed head at its sequence.
    CheckpointUnsigned,
    /// Events a checkpoint says were removed still exist.
    CheckpointEventsRemain,
    /// The log does not extend the head given by `--anchor`.
    AnchorNotExtended,
    /// (An export) the last event is not covered by a signed head.
    UnsignedTail,
    /// (An export) two event lines carry this sequence.
    DuplicateSequence,
    /// A signed head or checkpoint whose key id no trusted key has (its kid is named): an old
    /// key a rotation dropped needs `--audit-keys` to verify it.
    UnknownKey,
    /// (An export) an event line at or below the chain's start, which no walk reads.
    UnwalkedEvent,
    /// (An export) its chain starts where no proof it carries vouches for (neither genesis,
    /// nor a checkpoint, nor a signed head at that sequence with that hash).
    UnprovenStart,
}

impl ChainProblem {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Changed => "changed",
            Self::Deleted => "deleted",
            Self::Inserted => "inserted",
            Self::Reordered => "reordered",
            Self::HeadMismatch => "head_mismatch",
            Self::BeyondHead => "beyond_head",
            Self::CutTail => "cut_tail",
            Self::SignedHeadMismatch => "signed_head_mismatch",
            Self::ForgedSignedHead => "forged_signed_head",
            Self::ForgedCheckpoint => "forged_checkpoint",
            Self::CheckpointUnlinked => "checkpoint_unlinked",
            Self::CheckpointUnsigned => "checkpoint_unsigned",
            Self::CheckpointEventsRemain => "checkpoint_events_remain",
            Self::AnchorNotExtended => "anchor_not_extended",
            Self::UnsignedTail => "unsigned_tail",
            Self::DuplicateSequence => "duplicate_sequence",
            Self::UnknownKey => "unknown_key",
            Self::UnwalkedEvent => "unwalked_event",
            Self::UnprovenStart => "unproven_start",
        }
    }

    /// The sentence the table output gives.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Changed => "event changed",
            Self::Deleted => "event deleted",
            Self::Inserted => "event inserted",
            Self::Reordered => "event reordered",
            Self::HeadMismatch => "the chain does not end at the stored head",
            Self::BeyondHead => "events exist beyond the stored head (head moved back)",
            Self::CutTail => "the log ends below a signed head (tail cut)",
            Self::SignedHeadMismatch => "the chain does not match a signed head",
            Self::ForgedSignedHead => "a signed head's signature does not verify",
            Self::ForgedCheckpoint => "a checkpoint is forged (signature does not verify)",
            Self::CheckpointUnlinked => "a checkpoint does not link to the one before it",
            Self::CheckpointUnsigned => "a checkpoint matches no signed head",
            Self::CheckpointEventsRemain => "events a checkpoint removed still exist",
            Self::AnchorNotExtended => "the log does not extend the anchor",
            Self::UnsignedTail => "the export's last event is not covered by a signed head",
            Self::DuplicateSequence => "two of the export's events carry one sequence",
            Self::UnknownKey => {
                "signed with a key not trusted here (an old key: give it with --audit-keys)"
            }
            Self::UnwalkedEvent => "an event of the export lies at or below its chain's start",
            Self::UnprovenStart => "the export's chain starts where no proof it carries vouches",
        }
    }
}

/// The first break in a chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChainBreak {
    pub problem: ChainProblem,
    pub sequence: i64,
    /// For `reordered`: where the event chained at `sequence` is now.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub found_at: Option<i64>,
    /// For `unknown_key`: the key id no trusted key has.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kid: Option<String>,
}

impl ChainBreak {
    fn at(problem: ChainProblem, sequence: i64) -> Self {
        Self {
            problem,
            sequence,
            found_at: None,
            kid: None,
        }
    }

    fn unknown_key(sequence: i64, kid: &str) -> Self {
        Self {
            kid: Some(kid.to_owned()),
            ..Self::at(ChainProblem::UnknownKey, sequence)
        }
    }
}

/// A head a verifier saved earlier (`--anchor SEQUENCE:HASH`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Anchor {
    pub seq: i64,
    pub hash: Vec<u8>,
}

/// An anchor as a query parameter takes it ([`Anchor`]'s `FromStr`), or empty (the same as
/// absent). The document states it as written.
pub const ANCHOR_PATTERN: &str = "^([0-9]{1,18}:[0-9a-fA-F]{64})?$";

impl std::str::FromStr for Anchor {
    type Err = String;

    fn from_str(raw: &str) -> Result<Self, String> {
        let (seq, hash) = raw
            .split_once(':')
            .ok_or("an anchor is SEQUENCE:HASH (the hash in hex)")?;
        let seq = crate::domain::parse_sequence(seq)
            .ok_or("an anchor's sequence is a whole number of 1 to 18 digits")?;
        // Digits only: `from_hex` alone would take a sign before a pair.
        let hash = Some(hash)
            .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(from_hex)
            .ok_or("an anchor's hash is 64 hex digits")?;
        Ok(Self { seq, hash })
    }
}

/// What verifying a workspace's chain found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChainReport {
    pub workspace_id: Uuid,
    /// The chain was verified after this sequence (a checkpoint's; 0 from the start).
    pub checkpoint_seq: i64,
    /// The workspace's last sequence when the walk began (offline: the export's last event).
    pub head_seq: i64,
    /// The head's hash, hex (the walk's own when intact; the stored one otherwise).
    pub head_hash: String,
    /// Events whose hash matched, in order, before any break.
    pub verified: u64,
    /// Signed heads the walk passed through and matched.
    pub signed_heads_matched: u64,
    /// The highest signed head's sequence, if any.
    pub signed_head_seq: Option<i64>,
    /// Checkpoints checked (signature, link, signed head).
    pub checkpoints: u64,
    /// The `--anchor` was extended (none when no anchor was given).
    pub anchor_extended: Option<bool>,
    pub broken: Option<ChainBreak>,
}

impl ChainReport {
    pub fn intact(&self) -> bool {
        self.broken.is_none()
    }
}

fn unhashable(e: crate::domain::UnhashableEvent) -> StoreError {
    StoreError::Internal(e.to_string())
}

/// Whether `event`, moved to `seq`, is the one chained there after `prev`.
fn belongs_at(prev: &[u8], seq: i64, event: &ChainedEvent) -> bool {
    let mut moved = event.event.clone();
    moved.sequence = Some(seq);
    match (chain_hash(prev, &moved), &event.hash) {
        (Ok(hash), Some(stored)) => hash[..] == stored[..],
        _ => false,
    }
}

/// Names the break at `window[0]`, the first event whose hash does not follow `prev`; `window`
/// holds the events from it on.
fn classify(prev: &[u8], window: &[ChainedEvent]) -> ChainBreak {
    let here = &window[0];
    let seq = here.event.sequence.unwrap_or_default();
    // The event chained at `seq`, if it is still in the log somewhere after.
    let moved = window[1..].iter().find(|e| belongs_at(prev, seq, e));
    let Some(moved) = moved else {
        return ChainBreak::at(ChainProblem::Changed, seq);
    };
    let found_at = moved.event.sequence.unwrap_or_default();
    // It moved one up: `here` either came from just after it (two swapped) or was put in.
    let swapped = found_at != seq + 1
        || moved
            .hash
            .as_deref()
            .is_some_and(|chained| belongs_at(chained, seq + 1, here));
    ChainBreak {
        problem: if swapped {
            ChainProblem::Reordered
        } else {
            ChainProblem::Inserted
        },
        sequence: seq,
        found_at: swapped.then_some(found_at),
        kid: None,
    }
}

/// Where a walk reads events: the store, or an export held in memory.
#[async_trait]
pub trait ChainSource: Send + Sync {
    /// Numbered events above `after`, oldest first, at most `limit`.
    async fn events_after(&self, after: i64, limit: u32) -> Result<Vec<ChainedEvent>, StoreError>;
    /// Whether events carry the hash stored beside them (an export carries none: only signed
    /// heads vouch for its hashes).
    fn stored_hashes(&self) -> bool;
    /// Every event the source holds (an export's lines), so a verifier can check each is
    /// walked; none for the store, which is walked to its head.
    fn all_events(&self) -> Option<&[ChainedEvent]> {
        None
    }
}

struct StoreSource<'a> {
    store: &'a dyn RecordStore,
    workspace_id: Uuid,
}

#[async_trait]
impl ChainSource for StoreSource<'_> {
    async fn events_after(&self, after: i64, limit: u32) -> Result<Vec<ChainedEvent>, StoreError> {
        self.store
            .chained_events(self.workspace_id, after, limit)
            .await
    }

    fn stored_hashes(&self) -> bool {
        true
    }
}

/// An export's events, in memory, oldest first.
pub struct ExportSource(pub Vec<ChainedEvent>);

#[async_trait]
impl ChainSource for ExportSource {
    async fn events_after(&self, after: i64, limit: u32) -> Result<Vec<ChainedEvent>, StoreError> {
        let from = self
            .0
            .partition_point(|e| e.event.sequence.unwrap_or_default() <= after);
        Ok(self.0[from..]
            .iter()
            .take(limit as usize)
            .cloned()
            .collect())
    }

    fn stored_hashes(&self) -> bool {
        false
    }

    fn all_events(&self) -> Option<&[ChainedEvent]> {
        Some(&self.0)
    }
}

/// An export's event lines, sorted by sequence, must run exactly `start+1..` with no
/// duplicate and no gap: a line the walk would skip is one nothing vouches for.
fn check_lines(start: i64, events: &[ChainedEvent]) -> Option<ChainBreak> {
    for (expected, e) in (start + 1..).zip(events) {
        let seq = e.event.sequence.unwrap_or_default();
        if seq <= start {
            return Some(ChainBreak::at(ChainProblem::UnwalkedEvent, seq));
        }
        if seq == expected - 1 {
            return Some(ChainBreak::at(ChainProblem::DuplicateSequence, seq));
        }
        if seq != expected {
            return Some(ChainBreak::at(ChainProblem::Deleted, expected));
        }
    }
    None
}

/// What a verification checks the chain against.
pub struct Proofs {
    pub workspace_id: Uuid,
    /// The stored head (online); none offline, where the log ends at its last event.
    pub head: Option<AuditHead>,
    /// Where an export's chain starts (offline): after this sequence, from this hash.
    pub start: Option<(i64, Vec<u8>)>,
    pub checkpoints: Vec<AuditCheckpoint>,
    /// Lowest sequence first.
    pub signed_heads: Vec<SignedHead>,
    pub keys: ProofKeys,
    pub anchor: Option<Anchor>,
}

/// What one walk from `start` found.
struct Walk {
    verified: u64,
    /// The last sequence walked and its hash.
    end: (i64, Vec<u8>),
    matched: u64,
    broken: Option<ChainBreak>,
}

/// Walks from `start` up to `until` (inclusive; none: to the last event), checking each event's
/// hash against the one stored beside it (when the source has them) and, at each sequence of
/// `points`, against the hash a signed head or anchor vouches for.
async fn walk(
    source: &dyn ChainSource,
    start: (i64, Vec<u8>),
    until: Option<i64>,
    points: &BTreeMap<i64, (Vec<u8>, ChainProblem)>,
) -> Result<Walk, StoreError> {
    let (mut expected, mut prev) = (start.0 + 1, start.1);
    let mut out = Walk {
        verified: 0,
        end: (start.0, prev.clone()),
        matched: 0,
        broken: None,
    };
    'pages: while until.is_none_or(|u| expected <= u) {
        let page = source.events_after(expected - 1, AUDIT_PAGE).await?;
        if page.is_empty() {
            break;
        }
        for (i, event) in page.iter().enumerate() {
            let seq = event.event.sequence.unwrap_or_default();
            if until.is_some_and(|u| seq > u) || seq != expected {
                break 'pages;
            }
            let hash = chain_hash(&prev, &event.event).map_err(unhashable)?;
            let follows = !source.stored_hashes() || event.hash.as_deref() == Some(&hash[..]);
            if !follows {
                let mut window = page[i..].to_vec();
                if window.len() < AUDIT_PAGE as usize {
                    let last = window.last().and_then(|e| e.event.sequence).unwrap_or(seq);
                    window.extend(source.events_after(last, AUDIT_PAGE).await?);
                }
                out.broken = Some(classify(&prev, &window));
                return Ok(out);
            }
            if let Some((vouched, problem)) = points.get(&seq) {
                if vouched[..] != hash[..] {
                    out.broken = Some(ChainBreak::at(*problem, seq));
                    return Ok(out);
                }
                if *problem == ChainProblem::SignedHeadMismatch {
                    out.matched += 1;
                }
            }
            prev = hash.to_vec();
            out.end = (seq, prev.clone());
            expected += 1;
            out.verified += 1;
        }
    }
    Ok(out)
}

/// Checks the checkpoints (lowest first): each retention checkpoint's seal, its link to the
/// one below, and a signed head at its sequence with its hash; an unsigned one only as the
/// migration wrote it (hashless, removing nothing, the only one, strictly below every signed
/// head: one at a signed head's sequence would let a database holder restart the chain there
/// from zero bytes, and any signed head it covers would no longer be walked to).
fn check_checkpoints(p: &Proofs) -> Option<ChainBreak> {
    let unsigned = p.checkpoints.iter().filter(|c| c.seal.is_none()).count();
    let lowest_signed = p.signed_heads.first().map(|h| h.seq);
    let mut below: Option<&AuditCheckpoint> = None;
    for c in &p.checkpoints {
        let seq = c.last_seq;
        let broken = |problem| Some(ChainBreak::at(problem, seq));
        match &c.seal {
            None => {
                let legacy = c.hash.is_none()
                    && c.removed == 0
                    && unsigned == 1
                    && c.prev_seq.is_none()
                    && lowest_signed.is_none_or(|s| seq < s);
                if !legacy {
                    return broken(ChainProblem::ForgedCheckpoint);
                }
            }
            Some(seal) => {
                let claim = c.claim();
                if !p.keys.knows(&seal.kid) {
                    return Some(ChainBreak::unknown_key(seq, &seal.kid));
                }
                if c.workspace_id != p.workspace_id || !p.keys.verifies_checkpoint(&claim, seal) {
                    return broken(ChainProblem::ForgedCheckpoint);
                }
                let (want_seq, want_hash) =
                    below.map_or((0, None), |b| (b.last_seq, b.hash.clone()));
                if claim.prev_seq != want_seq || claim.prev_hash != want_hash {
                    return broken(ChainProblem::CheckpointUnlinked);
                }
                match &c.hash {
                    Some(hash) => {
                        let signed = p
                            .signed_heads
                            .iter()
                            .any(|h| h.seq == seq && h.hash == *hash);
                        if !signed {
                            return broken(ChainProblem::CheckpointUnsigned);
                        }
                    }
                    // Events never hashed: only below every signed head.
                    None if lowest_signed.is_some_and(|s| seq > s) => {
                        return broken(ChainProblem::CheckpointUnsigned);
                    }
                    None => {}
                }
            }
        }
        below = Some(c);
    }
    None
}

/// Verifies a workspace's chain (or an export's) against its proofs: signed heads' and
/// checkpoints' seals, the checkpoints' links, the walk from the latest checkpoint through
/// every signed head above it, to the stored head (online) or a signed head at the last
/// event (offline), and the anchor.
pub async fn verify_against(
    source: &dyn ChainSource,
    p: &Proofs,
) -> Result<ChainReport, StoreError> {
    let latest_cp = p.checkpoints.last();
    let start = match (&p.start, latest_cp) {
        (Some(start), _) => start.clone(),
        (None, Some(c)) => (
            c.last_seq,
            c.hash.clone().unwrap_or_else(|| GENESIS_HASH.to_vec()),
        ),
        (None, None) => (0, GENESIS_HASH.to_vec()),
    };
    let mut report = ChainReport {
        workspace_id: p.workspace_id,
        checkpoint_seq: start.0,
        head_seq: p.head.as_ref().map_or(start.0, |h| h.seq),
        head_hash: p
            .head
            .as_ref()
            .map(|h| to_hex(h.hash.as_deref().unwrap_or(&GENESIS_HASH[..])))
            .unwrap_or_default(),
        verified: 0,
        signed_heads_matched: 0,
        signed_head_seq: p.signed_heads.last().map(|h| h.seq),
        checkpoints: p.checkpoints.len() as u64,
        anchor_extended: p.anchor.as_ref().map(|_| false),
        broken: None,
    };
    let fail = |mut report: ChainReport, problem, seq| {
        report.broken = Some(ChainBreak::at(problem, seq));
        Ok(report)
    };
    if let Some(unknown) = p.signed_heads.iter().find(|h| !p.keys.knows(&h.seal.kid)) {
        report.broken = Some(ChainBreak::unknown_key(unknown.seq, &unknown.seal.kid));
        return Ok(report);
    }
    if let Some(forged) = p
        .signed_heads
        .iter()
        .find(|h| h.workspace_id != p.workspace_id || !p.keys.verifies_head(h))
    {
        return fail(report, ChainProblem::ForgedSignedHead, forged.seq);
    }
    if let Some(broken) = check_checkpoints(p) {
        report.broken = Some(broken);
        return Ok(report);
    }
    if let Some(events) = source.all_events() {
        if let Some(broken) = check_lines(start.0, events) {
            report.broken = Some(broken);
            return Ok(report);
        }
        // Offline the start comes from the export's header: only a proof it carries makes it
        // one (otherwise raising it would hide edited events below it).
        let proven = (start.0 == 0 && start.1[..] == GENESIS_HASH[..])
            || p.checkpoints.iter().any(|c| {
                c.last_seq == start.0
                    && c.hash.clone().unwrap_or_else(|| GENESIS_HASH.to_vec()) == start.1
            })
            || p.signed_heads
                .iter()
                .any(|h| h.seq == start.0 && h.hash == start.1);
        if !proven {
            return fail(report, ChainProblem::UnprovenStart, start.0);
        }
    }
    // A retention checkpoint removed everything up to it.
    if latest_cp.is_some_and(|c| c.seal.is_some()) && p.start.is_none() {
        let first = source.events_after(0, 1).await?;
        if let Some(seq) = first.first().and_then(|e| e.event.sequence)
            && seq <= start.0
        {
            return fail(report, ChainProblem::CheckpointEventsRemain, seq);
        }
    }
    let mut points: BTreeMap<i64, (Vec<u8>, ChainProblem)> = p
        .signed_heads
        .iter()
        .filter(|h| h.seq > start.0)
        .map(|h| (h.seq, (h.hash.clone(), ChainProblem::SignedHeadMismatch)))
        .collect();
    if let Some(anchor) = &p.anchor {
        // The chain's start is a proof only at genesis or at a signed retention checkpoint;
        // a legacy (unsigned) one is a row anyone holding the database can write.
        let start_proven = start.0 == 0
            || p.checkpoints.iter().any(|c| {
                c.last_seq == start.0 && c.seal.is_some() && c.hash.as_ref() == Some(&start.1)
            })
            || p.signed_heads
                .iter()
                .any(|h| h.seq == start.0 && h.hash == start.1);
        if anchor.seq <= start.0 && !start_proven {
            return fail(report, ChainProblem::AnchorNotExtended, anchor.seq);
        }
        if anchor.seq <= start.0 {
            // Below the chain's start: only a record at exactly that sequence can vouch for it.
            let vouched = anchor.seq == start.0 && anchor.hash == start.1
                || p.signed_heads
                    .iter()
                    .any(|h| h.seq == anchor.seq && h.hash == anchor.hash)
                || p.checkpoints
                    .iter()
                    .any(|c| c.last_seq == anchor.seq && c.hash.as_ref() == Some(&anchor.hash));
            if !vouched {
                return fail(report, ChainProblem::AnchorNotExtended, anchor.seq);
            }
            report.anchor_extended = Some(true);
        } else {
            // The anchor's hash is the one the walk must meet there (a signed head at the same
            // sequence is checked against the chain all the same: the walk fails on either).
            let signed = points.insert(
                anchor.seq,
                (anchor.hash.clone(), ChainProblem::AnchorNotExtended),
            );
            if signed.is_some_and(|(hash, _)| hash != anchor.hash) {
                return fail(report, ChainProblem::AnchorNotExtended, anchor.seq);
            }
        }
    }
    let until = p.head.as_ref().map(|h| h.seq);
    let start_seq = start.0;
    let walked = walk(source, start, until, &points).await?;
    report.verified = walked.verified;
    report.signed_heads_matched = walked.matched;
    if let Some(broken) = walked.broken {
        report.broken = Some(broken);
        return Ok(report);
    }
    if let Some(events) = source.all_events()
        && walked.verified != events.len() as u64
    {
        let seq = walked.end.0 + 1;
        return fail(report, ChainProblem::UnwalkedEvent, seq);
    }
    let (end_seq, end_hash) = walked.end;
    match &p.head {
        Some(head) => {
            if end_seq < head.seq {
                // A sequence the workspace handed out is not in the log.
                return fail(report, ChainProblem::Deleted, end_seq + 1);
            }
            if head.hash.as_deref().unwrap_or(&GENESIS_HASH[..]) != &end_hash[..] {
                return fail(report, ChainProblem::HeadMismatch, head.seq);
            }
        }
        None => {
            report.head_seq = end_seq;
            report.head_hash = to_hex(&end_hash);
        }
    }
    // Every point above the end was not reached: the tail was cut below it, or the anchor is
    // ahead of the log.
    if let Some((&seq, (_, problem))) = points.range(end_seq + 1..).next() {
        let problem = match problem {
            ChainProblem::SignedHeadMismatch => ChainProblem::CutTail,
            other => *other,
        };
        return fail(report, problem, seq);
    }
    if p.head.is_none() && end_seq > start_seq && !p.signed_heads.iter().any(|h| h.seq == end_seq) {
        return fail(report, ChainProblem::UnsignedTail, end_seq);
    }
    if report.anchor_extended.is_some() {
        report.anchor_extended = Some(true);
    }
    report.head_hash = to_hex(&end_hash);
    Ok(report)
}

/// Verifies a workspace's chain in the store. `None` when there is no such workspace.
///
/// A retention batch that commits during the walk removes events it has yet to read, which
/// looks like a deletion; a break found while the checkpoint moved is walked again from the
/// new checkpoint (three walks at most: a batch takes well under a walk's time). Events
/// numbered during the walk sit above the head it read: `beyond_head` only when the head,
/// read again, is still below them.
pub async fn verify_chain(
    store: &dyn RecordStore,
    workspace_id: Uuid,
    keys: ProofKeys,
    anchor: Option<Anchor>,
) -> Result<Option<ChainReport>, StoreError> {
    let mut walks = 0;
    let source = StoreSource {
        store,
        workspace_id,
    };
    loop {
        // Checkpoints first: retention commits each with its signed head, so every
        // checkpoint read has its head among the signed heads read next (read the other way
        // round, a batch committing in between shows a checkpoint with no signed head).
        // Signed heads before the head: each was signed at or below the head of its time,
        // and a head only grows, so one above the head read next is a cut, never a
        // signature that landed in between.
        let checkpoints = store.checkpoints(workspace_id).await?;
        let signed_heads = store.signed_heads(workspace_id, 0, i64::MAX).await?;
        let Some(head) = store.audit_head(workspace_id).await? else {
            return Ok(None);
        };
        let checkpoint_seq = checkpoints.last().map_or(0, |c| c.last_seq);
        let proofs = Proofs {
            workspace_id,
            head: Some(head.clone()),
            start: None,
            checkpoints,
            signed_heads,
            keys: keys.clone(),
            anchor: anchor.clone(),
        };
        let mut report = verify_against(&source, &proofs).await?;
        if report.broken.is_none()
            && let Some(above) = store
                .chained_events(workspace_id, head.seq, 1)
                .await?
                .first()
        {
            let seq = above.event.sequence.unwrap_or_default();
            let now = store.audit_head(workspace_id).await?;
            if now.is_none_or(|h| h.seq < seq) {
                report.broken = Some(ChainBreak::at(ChainProblem::BeyondHead, seq));
            }
        }
        walks += 1;
        let moved = || async {
            let now = store.latest_checkpoint(workspace_id).await?;
            Ok::<_, StoreError>(now.map_or(0, |c| c.last_seq) != checkpoint_seq)
        };
        if report.broken.is_none() || walks == 3 || !moved().await? {
            return Ok(Some(report));
        }
    }
}

mod admin;
pub mod export;
mod proofs;
pub use admin::PurgeReport;
pub use export::{ExportFormat, ExportRequest};
pub use proofs::{ExportProofs, RetentionSealer};
