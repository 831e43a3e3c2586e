//! Signing heads and sealing checkpoints (the background signer, exports, retention), and the
//! `Services` entry points of verification, export and retention. The walk they rely on is
//! the parent module's.

use super::*;

/// Seals retention's checkpoints, and the head at each, with the current signing key.
pub struct RetentionSealer<'a> {
    signer: &'a WebhookSigner,
    at_ms: i64,
}

impl<'a> RetentionSealer<'a> {
    pub fn new(signer: &'a WebhookSigner, now: DateTime<Utc>) -> Self {
        Self {
            signer,
            at_ms: now.timestamp_millis(),
        }
    }
}

impl CheckpointSealer for RetentionSealer<'_> {
    fn seal_checkpoint(&self, claim: &CheckpointClaim) -> (Seal, Option<SignedHead>) {
        let seal = sign_checkpoint(self.signer, claim, self.at_ms);
        let head = claim.hash.as_deref().map(|hash| {
            sign_head(
                self.signer,
                claim.workspace_id,
                claim.last_seq,
                hash,
                self.at_ms,
            )
        });
        (seal, head)
    }
}

/// What one attempt to sign a head did.
enum SignOutcome {
    Signed,
    /// Nothing to sign, or a higher proof (another replica's signed head, a retention
    /// checkpoint) landed during the walk: the next pass starts from it.
    Passed,
    /// The chain does not walk from the previous proof to the head.
    NotVerified,
}

/// The proofs an export carries.
pub struct ExportProofs {
    pub checkpoints: Vec<AuditCheckpoint>,
    pub heads: Vec<SignedHead>,
    /// Set when no fresh head was signed because the latest signed head carries this key id,
    /// no key this signer holds (current or older configured).
    pub not_signed_kid: Option<String>,
}

/// Workspaces whose heads one signing batch looks at.
const HEADS_PER_PASS: u32 = 200;
/// Batches one signing pass runs at most (the oldest signatures first); the next pass goes on.
const HEAD_BATCHES_PER_PASS: u32 = 10;

impl Services {
    /// Signs `head` of a workspace once the chain from the last proof below it (its latest
    /// signed head or checkpoint, whichever is higher and verifies) walks to it: the signer
    /// never vouches for a chain it has not checked since its previous signature.
    /// `NotVerified` when the walk fails (the caller says so); `Passed` when the head is not
    /// hashed or a higher proof landed during the walk.
    ///
    /// Cost, per workspace whose head moved: one walk over the events since the previous
    /// signature (a minute's events from the background task), one Ed25519 signature
    /// (~20 µs) and one row of ~150 bytes: at most 1,440 rows (~200 KB) a day a workspace
    /// that is written to all day, nothing for one that is not.
    async fn sign_head_after_walk(
        &self,
        workspace_id: Uuid,
        head: &AuditHead,
        now_ms: i64,
    ) -> Result<SignOutcome, ServiceError> {
        let Some(hash) = head.hash.clone() else {
            return Ok(SignOutcome::Passed);
        };
        let keys = self.proof_keys();
        let store = self.store.as_ref();
        let mut start = (0, GENESIS_HASH.to_vec());
        if let Some(c) = store.latest_checkpoint(workspace_id).await? {
            // A seal of a key not configured (one a rotation dropped) is left to verify to
            // judge: the walk from it checks the chain all the same.
            if c.seal
                .as_ref()
                .is_some_and(|s| keys.knows(&s.kid) && !keys.verifies_checkpoint(&c.claim(), s))
            {
                return Ok(SignOutcome::NotVerified);
            }
            start = (c.last_seq, c.hash.unwrap_or_else(|| GENESIS_HASH.to_vec()));
        }
        if let Some(signed) = store.latest_signed_head(workspace_id).await?
            && signed.seq > start.0
        {
            if keys.knows(&signed.seal.kid) && !keys.verifies_head(&signed) {
                return Ok(SignOutcome::NotVerified);
            }
            start = (signed.seq, signed.hash);
        }
        if start.0 > head.seq {
            // Another replica signed a higher head, or retention cut past it, since it was read.
            return Ok(SignOutcome::Passed);
        }
        let source = StoreSource {
            store,
            workspace_id,
        };
        let start_seq = start.0;
        let walked = walk(&source, start, Some(head.seq), &BTreeMap::new()).await?;
        if walked.broken.is_some() || walked.end != (head.seq, hash.clone()) {
            // Retention removing events under the walk, or a higher head signed meanwhile, is
            // no broken chain: the next pass walks from the new proof.
            let checkpoint = store.latest_checkpoint(workspace_id).await?;
            let signed = store.latest_signed_head(workspace_id).await?;
            let moved = checkpoint.is_some_and(|c| c.last_seq > start_seq)
                || signed.is_some_and(|h| h.seq > start_seq);
            return Ok(if moved {
                SignOutcome::Passed
            } else {
                SignOutcome::NotVerified
            });
        }
        let signed = sign_head(&self.webhook_signer, workspace_id, head.seq, &hash, now_ms);
        store.insert_signed_head(&signed).await?;
        Ok(SignOutcome::Signed)
    }

    /// One pass of the background signer: signs the head of every workspace whose head moved
    /// since its latest signed head. Replicas may run it together: the first row at a
    /// (workspace, sequence) is kept, the others' inserts do nothing. Returns how many heads
    /// it signed (or found signed).
    pub async fn sign_audit_heads(&self, now: DateTime<Utc>) -> Result<u64, ServiceError> {
        let mut signed = 0;
        let mut due = Vec::new();
        for batch in 0..HEAD_BATCHES_PER_PASS {
            let page = self
                .store
                .heads_to_sign(HEADS_PER_PASS, batch * HEADS_PER_PASS)
                .await?;
            let full = page.len() == HEADS_PER_PASS as usize;
            due.extend(page);
            if !full {
                break;
            }
        }
        for (workspace_id, head) in due {
            match self
                .sign_head_after_walk(workspace_id, &head, now.timestamp_millis())
                .await?
            {
                SignOutcome::Signed => signed += 1,
                SignOutcome::Passed => tracing::debug!(
                    workspace = %workspace_id,
                    sequence = head.seq,
                    "audit head not signed this pass: a higher proof landed during the walk"
                ),
                SignOutcome::NotVerified => tracing::error!(
                    workspace = %workspace_id,
                    sequence = head.seq,
                    "not signing an audit head whose chain does not verify from the previous \
                     proof; run cpctl audit verify"
                ),
            }
        }
        Ok(signed)
    }

    /// The proofs an export carries: every checkpoint and the signed head at each, the signed
    /// heads in `from..=to`, and a
    /// head signed now at `to` (the export's last event) and at the current head, once the
    /// chain walks to them. A chain that does not verify gets no new signature: the export
    /// then carries only the proofs kept before (and its offline verify fails).
    pub async fn export_proofs(
        &self,
        workspace_id: Uuid,
        from: i64,
        to: i64,
        now: DateTime<Utc>,
        extra: Vec<ed25519_dalek::VerifyingKey>,
    ) -> Result<ExportProofs, ServiceError> {
        let Some(head) = self.store.audit_head(workspace_id).await? else {
            return Err(ServiceError::not_found("no such workspace"));
        };
        let at_ms = now.timestamp_millis();
        let latest_kid = self.foreign_head_kid(workspace_id).await?;
        if latest_kid.is_some() {
            let checkpoints = self.store.checkpoints(workspace_id).await?;
            let heads = self
                .export_heads(workspace_id, from, to, &checkpoints)
                .await?;
            return Ok(ExportProofs {
                checkpoints,
                heads,
                not_signed_kid: latest_kid,
            });
        }
        let report = self
            .verify_audit_chain_with(workspace_id, None, extra)
            .await?;
        if report.intact() {
            self.sign_head_after_walk(workspace_id, &head, at_ms)
                .await?;
            // The export's last event, and the event its chain starts after (offline verify
            // trusts a start only with a proof at it). Also at the head: another replica
            // signing a higher head during the walk makes it pass the head by.
            for seq in [to, from] {
                if seq <= 0 || seq > head.seq {
                    continue;
                }
                if !self
                    .store
                    .signed_heads(workspace_id, seq, seq)
                    .await?
                    .is_empty()
                {
                    continue;
                }
                let stored = self.store.chained_events(workspace_id, seq - 1, 1).await?;
                let hash = stored
                    .first()
                    .filter(|e| e.event.sequence == Some(seq))
                    .and_then(|e| e.hash.clone());
                if let Some(hash) = hash {
                    let signed = sign_head(&self.webhook_signer, workspace_id, seq, &hash, at_ms);
                    self.store.insert_signed_head(&signed).await?;
                }
            }
        }
        let checkpoints = self.store.checkpoints(workspace_id).await?;
        let heads = self
            .export_heads(workspace_id, from, to, &checkpoints)
            .await?;
        Ok(ExportProofs {
            checkpoints,
            heads,
            not_signed_kid: None,
        })
    }

    /// The kid of the workspace's latest signed head when it is no key this signer holds
    /// (current or an older one configured): signing then (a head, or a retention checkpoint
    /// that cannot be re-signed later) would store proofs the server may not verify (the
    /// first row at a sequence is kept: a lasting false alarm). None when none is signed yet.
    async fn foreign_head_kid(&self, workspace_id: Uuid) -> Result<Option<String>, ServiceError> {
        let held = self.webhook_signer.public_keys();
        Ok(self
            .store
            .latest_signed_head(workspace_id)
            .await?
            .map(|h| h.seal.kid)
            .filter(|kid| !held.iter().any(|k| k.kid == *kid)))
    }

    /// The heads over the exported range, and the one at each checkpoint (verify checks every
    /// checkpoint against a signed head at its sequence, also those below `from`).
    async fn export_heads(
        &self,
        workspace_id: Uuid,
        from: i64,
        to: i64,
        checkpoints: &[AuditCheckpoint],
    ) -> Result<Vec<SignedHead>, ServiceError> {
        Ok(self
            .store
            .signed_heads(workspace_id, 0, to)
            .await?
            .into_iter()
            .filter(|h| {
                h.seq >= from
                    || checkpoints
                        .iter()
                        .any(|c| c.last_seq == h.seq && c.hash.as_ref() == Some(&h.hash))
            })
            .collect())
    }

    /// The stored hash of the event at `seq` (where an export's chain starts: the event
    /// before its first), or the checkpoint's at that sequence; none when neither holds one.
    pub async fn chain_hash_at(
        &self,
        workspace_id: Uuid,
        seq: i64,
    ) -> Result<Option<Vec<u8>>, ServiceError> {
        if seq == 0 {
            return Ok(Some(GENESIS_HASH.to_vec()));
        }
        let event = self.store.chained_events(workspace_id, seq - 1, 1).await?;
        if let Some(e) = event.first().filter(|e| e.event.sequence == Some(seq)) {
            return Ok(e.hash.clone());
        }
        let checkpoints = self.store.checkpoints(workspace_id).await?;
        Ok(checkpoints
            .into_iter()
            .find(|c| c.last_seq == seq)
            .map(|c| c.hash.unwrap_or_else(|| GENESIS_HASH.to_vec())))
    }

    /// The keys audit proofs verify with: every webhook signing key configured (the current
    /// one signs; the others are kept through a rotation).
    pub fn proof_keys(&self) -> ProofKeys {
        ProofKeys::new(self.webhook_signer.public_keys().into_iter().map(|k| k.key))
    }

    /// `cpctl audit verify`: the workspace's chain, checked from its latest checkpoint
    /// against its stored head, its signed heads and checkpoints, and `anchor`.
    pub async fn verify_audit_chain(
        &self,
        workspace_id: Uuid,
        anchor: Option<Anchor>,
    ) -> Result<ChainReport, ServiceError> {
        self.verify_audit_chain_with(workspace_id, anchor, Vec::new())
            .await
    }

    /// [`Self::verify_audit_chain`] trusting also `extra` keys (verification only: old keys a
    /// rotation dropped, `cpctl audit verify --audit-keys`).
    pub async fn verify_audit_chain_with(
        &self,
        workspace_id: Uuid,
        anchor: Option<Anchor>,
        extra: Vec<ed25519_dalek::VerifyingKey>,
    ) -> Result<ChainReport, ServiceError> {
        let keys = self.proof_keys().with(extra);
        verify_chain(self.store.as_ref(), workspace_id, keys, anchor)
            .await?
            .ok_or_else(|| ServiceError::not_found("no such workspace"))
    }

    /// One page of `cpctl audit export`: events after `after` within `window`, oldest first.
    pub async fn export_audit_page(
        &self,
        workspace_id: Uuid,
        after: i64,
        window: TimeWindow,
    ) -> Result<Vec<AuditEvent>, ServiceError> {
        if after == 0 && self.store.audit_head(workspace_id).await?.is_none() {
            return Err(ServiceError::not_found("no such workspace"));
        }
        Ok(self
            .store
            .export_events(workspace_id, after, window, AUDIT_PAGE)
            .await?)
    }

    /// How long an organisation keeps its audit events (`None`: forever), written with
    /// `write` (its actor names who set it).
    pub async fn set_audit_retention(
        &self,
        organisation_id: Uuid,
        retention: Option<Span>,
        write: &WriteContext,
    ) -> Result<(), ServiceError> {
        if retention.is_some_and(Span::is_zero) {
            return Err(ServiceError::Validation(
                crate::domain::FieldError::new("retention", "must be longer than 0s, or none")
                    .into(),
            ));
        }
        let seconds = retention.map(Span::seconds);
        let event = event_by(
            write,
            organisation_id,
            None,
            "organisation.audit_retention_set",
            "organisation",
            organisation_id,
            json!({ "retentionSeconds": seconds }),
        );
        let found = self
            .store
            .set_audit_retention(write, organisation_id, seconds, &event)
            .await?;
        if !found {
            return Err(ServiceError::not_found("no such organisation"));
        }
        Ok(())
    }

    /// One retention pass (the background task's): removes every workspace's events older
    /// than its organisation's retention, in batches of [`RETENTION_BATCH`] per transaction.
    /// Returns how many events it removed.
    pub async fn purge_expired_audit(&self, now: DateTime<Utc>) -> Result<u64, ServiceError> {
        let purged = self.purge_expired(now).await;
        match purged.refused {
            Some(refused) => Err(refused),
            None => Ok(purged.removed),
        }
    }

    /// [`Self::purge_expired_audit`], counting what it removed even when it stopped early.
    pub(super) async fn purge_expired(&self, now: DateTime<Utc>) -> Purged {
        let mut purged = Purged::default();
        let workspaces = match self.store.retention_workspaces().await {
            Ok(w) => w,
            Err(e) => {
                purged.refused = Some(e.into());
                return purged;
            }
        };
        let mut foreign = None;
        for (workspace_id, seconds) in workspaces {
            // A checkpoint cannot be re-signed later: never seal one with a key the workspace's
            // heads are not signed with (the other workspaces go on).
            match self.foreign_head_kid(workspace_id).await {
                Ok(Some(kid)) => {
                    foreign.get_or_insert((workspace_id, kid));
                    continue;
                }
                Ok(None) => {}
                Err(e) => {
                    purged.refused = Some(e);
                    return purged;
                }
            }
            let cutoff = now - chrono::Duration::seconds(seconds);
            let mut here = 0;
            for _ in 0..RETENTION_BATCHES_PER_PASS {
                let sealer = RetentionSealer::new(&self.webhook_signer, now);
                let n = match self
                    .store
                    .remove_expired_events(workspace_id, cutoff, RETENTION_BATCH, now, &sealer)
                    .await
                {
                    Ok(n) => n,
                    Err(e) => {
                        purged.add(here);
                        purged.refused = Some(e.into());
                        return purged;
                    }
                };
                here += n;
                if n < u64::from(RETENTION_BATCH) {
                    break;
                }
            }
            purged.add(here);
        }
        if let Some((workspace_id, kid)) = foreign {
            purged.refused = Some(ServiceError::Conflict {
                code: "audit_key_not_held",
                message: format!(
                    "not purging workspace {workspace_id} ({} events removed elsewhere): \
                     its latest signed head carries key {kid}, which this signer does not \
                     hold (configure CP_WEBHOOK_SIGNING_KEYS as the server's)",
                    purged.removed
                ),
                details: None,
            });
        }
        purged
    }
}

/// What a retention pass did: events removed, from how many workspaces, and why it stopped
/// short (a store error, or a workspace whose heads carry a key not held).
#[derive(Debug, Default)]
pub(super) struct Purged {
    pub removed: u64,
    pub workspaces: u64,
    pub refused: Option<ServiceError>,
}

impl Purged {
    fn add(&mut self, removed: u64) {
        self.removed += removed;
        self.workspaces += u64::from(removed > 0);
    }
}
