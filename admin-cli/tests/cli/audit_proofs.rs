//! `cpctl audit verify` against a patient attacker holding the database: a cut tail with the
//! head pointer left stale, a rewound head pointer, a forged checkpoint at the head, an edited
//! event, a forged signed head, an anchor the log no longer extends, and a tampered export
//! verified offline. Verify, export, retention and purge go to a server on the test's store;
//! each edit is direct SQL on that store (Postgres or SQLite, as the run chooses) between two
//! calls, and each must make verify exit non-zero. The server signs heads (its background
//! signer at start-up, and exports), with its own webhook signing keys: a key rotation is the
//! server restarted on the same store with other keys.

use super::*;

/// Two webhook signing keys (base64 Ed25519 seeds) for the rotation tests.
const OLD: &str = "DAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAw=";
const NEW: &str = "FRUVFRUVFRUVFRUVFRUVFRUVFRUVFRUVFRUVFRUVFRU=";

/// A served store with `pools` more workspace events; returns the server and the workspace.
async fn log(db: &Db, pools: usize) -> (Served, String) {
    let s = served(db).await;
    let ws = s.workspace.clone();
    add_pools(&s, &ws, "pool", pools);
    (s, ws)
}

/// [`log`] on a server that signs with `keys` (`CP_WEBHOOK_SIGNING_KEYS`).
async fn log_signed_with(db: &Db, keys: &str, pools: usize) -> (Served, String) {
    let s = served_with(db, |c| c.webhook_signing_keys = Some(keys.to_owned())).await;
    let ws = s.workspace.clone();
    add_pools(&s, &ws, "pool", pools);
    (s, ws)
}

/// `s` restarted on `db` signing with `keys`, once its start-up passes ran (see [`settle`]).
async fn restart_signing_with(s: Served, db: &Db, keys: &str) -> Served {
    let s = s
        .restart(db, |c| c.webhook_signing_keys = Some(keys.to_owned()))
        .await;
    settle();
    s
}

/// A server signs the heads that moved and runs a retention pass as it starts, then every
/// half minute or minute: what a test does next (move the head, set a retention) waits for
/// those first passes, or they would sign or purge in its stead.
fn settle() {
    std::thread::sleep(std::time::Duration::from_millis(300));
}

/// How many heads above `seq` are signed.
async fn signed_above(db: &Db, seq: i64) -> i64 {
    let (n,) = sql_one!(
        &mut db.conn().await,
        (i64,),
        "SELECT count(*) FROM audit_signed_heads WHERE seq > $1",
        seq,
    );
    n
}

fn add_pools(s: &Served, ws: &str, prefix: &str, n: usize) {
    for n in 0..n {
        assert_ok(&s.run(&format!("pools create --workspace {ws} {prefix}-{n}")));
    }
}

fn verify_json(s: &Served, ws: &str) -> Value {
    json_of(&s.run(&format!("audit verify --workspace {ws} -o json")))
}

/// Verify fails; returns its one-line error and its JSON report.
fn verify_fails(s: &Served, line: &str) -> (String, Value) {
    let out = s.run(line);
    let err = failure(&out);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (err, report)
}

/// An export signs the head: afterwards a signed head stands at the head's sequence.
fn export(s: &Served, ws: &str) -> String {
    let out = s.run(&format!("audit export --workspace {ws}"));
    assert_ok(&out);
    stdout(&out)
}

/// The server's current signing key, public.
fn public_key(s: &Served) -> String {
    let keys = json_of(&s.run("webhooks keys -o json"));
    keys[0]["publicKey"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_prints_the_head_hash_and_a_cut_tail_with_a_stale_head_fails() {
    let db = Db::new().await;
    let (s, ws) = log(&db, 6).await;
    let report = verify_json(&s, &ws);
    assert_eq!(report["intact"], true, "{report}");
    let head = report["headSequence"].as_i64().unwrap();
    let hash = report["headHash"].as_str().unwrap();
    assert_eq!(hash.len(), 64, "{report}");
    let table = stdout(&s.run(&format!("audit verify --workspace {ws}")));
    assert!(table.contains(&format!("head {head}:{hash}")), "{table}");

    // The newest three events deleted, the head pointer left as it was.
    let cut = format!("DELETE FROM audit_events WHERE seq > {}", head - 3);
    db.exec(&cut).await;
    let (err, report) = verify_fails(&s, &format!("audit verify --workspace {ws} -o json"));
    assert_eq!(report["intact"], false, "{report}");
    assert!(err.contains(&format!("at sequence {}", head - 2)), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewound_head_pointer_fails() {
    let db = Db::new().await;
    let (s, ws) = log(&db, 6).await;
    let head = verify_json(&s, &ws)["headSequence"].as_i64().unwrap();
    // The pointer moved back three events (with the hash of the event it now names); the
    // events after it are still there.
    db.exec(&format!(
        "UPDATE workspaces SET audit_seq = {0},
             audit_hash = (SELECT hash FROM audit_events WHERE seq = {0})",
        head - 3
    ))
    .await;
    let (err, report) = verify_fails(&s, &format!("audit verify --workspace {ws} -o json"));
    assert_eq!(report["broken"]["problem"], "beyond_head", "{report}");
    assert!(
        err.contains(&format!("beyond_head at sequence {}", head - 2)),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_tail_below_a_signed_head_fails_even_with_the_head_pointer_moved_back() {
    let db = Db::new().await;
    let (s, ws) = log(&db, 6).await;
    let head = verify_json(&s, &ws)["headSequence"].as_i64().unwrap();
    export(&s, &ws); // signs the head
    db.exec(&format!(
        "DELETE FROM audit_events WHERE seq > {}",
        head - 3
    ))
    .await;
    db.exec(&format!(
        "UPDATE workspaces SET audit_seq = {0},
             audit_hash = (SELECT hash FROM audit_events WHERE seq = {0})",
        head - 3
    ))
    .await;
    let (err, report) = verify_fails(&s, &format!("audit verify --workspace {ws} -o json"));
    assert_eq!(report["broken"]["problem"], "cut_tail", "{report}");
    assert_eq!(report["signedHeadSequence"], head, "{report}");
    assert!(
        err.contains(&format!("cut_tail at sequence {head}")),
        "{err}"
    );
    let table = s.run(&format!("audit verify --workspace {ws}"));
    assert!(!table.status.success());
    assert!(stdout(&table).contains("tail cut"), "{}", stdout(&table));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_event_behind_a_forged_checkpoint_at_the_head_fails() {
    let db = Db::new().await;
    let (s, ws) = log(&db, 6).await;
    db.exec(r#"UPDATE audit_events SET data = '{"name": "forged"}' WHERE seq = 5"#)
        .await;
    // A checkpoint at the head, with the head's hash: the walk would start after it.
    db.exec(
        "INSERT INTO audit_checkpoints (workspace_id, last_seq, hash, removed, created_at)
         SELECT id, audit_seq, audit_hash, 0, created_at FROM workspaces",
    )
    .await;
    let (err, report) = verify_fails(&s, &format!("audit verify --workspace {ws} -o json"));
    assert_eq!(report["broken"]["problem"], "forged_checkpoint", "{report}");
    assert!(err.contains("forged_checkpoint"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hashless_checkpoint_forged_at_the_head_fails() {
    let db = Db::new().await;
    let (s, ws) = log(&db, 6).await;
    // Shaped like the ones migration 0014/0015 wrote: no hash, nothing removed.
    db.exec(
        "INSERT INTO audit_checkpoints (workspace_id, last_seq, hash, removed, created_at)
         SELECT id, audit_seq, NULL, 0, created_at FROM workspaces",
    )
    .await;
    let (_, report) = verify_fails(&s, &format!("audit verify --workspace {ws} -o json"));
    assert_eq!(report["intact"], false, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edited_event_fails() {
    let db = Db::new().await;
    let (s, ws) = log(&db, 6).await;
    export(&s, &ws);
    db.exec(r#"UPDATE audit_events SET data = '{"name": "forged"}' WHERE seq = 5"#)
        .await;
    let (err, report) = verify_fails(&s, &format!("audit verify --workspace {ws} -o json"));
    assert_eq!(report["broken"]["problem"], "changed", "{report}");
    assert!(err.contains("changed at sequence 5"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_signed_head_fails() {
    let db = Db::new().await;
    let (s, ws) = log(&db, 6).await;
    export(&s, &ws);
    assert_eq!(verify_json(&s, &ws)["intact"], true);
    // Its hash changed (the signature no longer covers it).
    db.exec("UPDATE audit_signed_heads SET hash = (SELECT hash FROM audit_events WHERE seq = 1)")
        .await;
    let (err, report) = verify_fails(&s, &format!("audit verify --workspace {ws} -o json"));
    assert_eq!(
        report["broken"]["problem"], "forged_signed_head",
        "{report}"
    );
    assert!(err.contains("forged_signed_head"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anchor_the_log_no_longer_extends_fails() {
    let db = Db::new().await;
    let (s, ws) = log(&db, 3).await;
    let earlier = verify_json(&s, &ws);
    let (seq_a, hash_a) = (
        earlier["headSequence"].as_i64().unwrap(),
        earlier["headHash"].as_str().unwrap().to_owned(),
    );
    for n in 0..2 {
        assert_ok(&s.run(&format!("pools create --workspace {ws} more-{n}")));
    }
    let later = verify_json(&s, &ws);
    let (seq_b, hash_b) = (
        later["headSequence"].as_i64().unwrap(),
        later["headHash"].as_str().unwrap().to_owned(),
    );
    // Both heads are extended by the log as it is.
    for anchor in [format!("{seq_a}:{hash_a}"), format!("{seq_b}:{hash_b}")] {
        let ok = json_of(&s.run(&format!(
            "audit verify --workspace {ws} --anchor {anchor} -o json"
        )));
        assert_eq!(ok["anchorExtended"], true, "{ok}");
    }
    // The tail cut back to the earlier head, pointer and all: self-consistent, and with no
    // signed head above it (no export; the server's signer ran at its start, its next pass
    // is half a minute away) only the anchor sees it.
    db.exec(&format!("DELETE FROM audit_events WHERE seq > {seq_a}"))
        .await;
    db.exec(&format!(
        "UPDATE workspaces SET audit_seq = {seq_a},
             audit_hash = (SELECT hash FROM audit_events WHERE seq = {seq_a})"
    ))
    .await;
    assert_eq!(verify_json(&s, &ws)["intact"], true);
    let (err, report) = verify_fails(
        &s,
        &format!("audit verify --workspace {ws} --anchor {seq_b}:{hash_b} -o json"),
    );
    assert_eq!(
        report["broken"]["problem"], "anchor_not_extended",
        "{report}"
    );
    assert!(err.contains("anchor_not_extended"), "{err}");
    // An anchor whose hash the log does not have at that sequence.
    let wrong = "ab".repeat(32);
    let (_, report) = verify_fails(
        &s,
        &format!("audit verify --workspace {ws} --anchor {seq_a}:{wrong} -o json"),
    );
    assert_eq!(
        report["broken"]["problem"], "anchor_not_extended",
        "{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_verifies_offline_and_a_tampered_one_does_not() {
    let db = Db::new().await;
    let (s, ws) = log(&db, 6).await;
    let text = export(&s, &ws);
    let key = public_key(&s);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with(r#"{"auditExport":"#), "{}", lines[0]);
    assert!(
        lines.iter().any(|l| l.starts_with(r#"{"signedHead":"#)),
        "{text}"
    );
    let check = |body: &str| {
        let file = write_temp("export.ndjson", body.as_bytes());
        let out = offline(
            &s,
            &[
                "audit",
                "verify",
                "--export",
                file.to_str().unwrap(),
                "--public-key",
                &key,
                "-o",
                "json",
            ],
        );
        let _ = std::fs::remove_file(file);
        out
    };
    let good = json_of(&check(&text));
    assert_eq!(good["intact"], true, "{good}");
    let online = verify_json(&s, &ws);
    assert_eq!(good["headSequence"], online["headSequence"]);
    assert_eq!(good["headHash"], online["headHash"]);

    // An event's data changed.
    let edited = text.replacen(r#""pool-2""#, r#""pool-x""#, 1);
    assert_ne!(edited, text);
    let out = check(&edited);
    assert!(
        failure(&out).contains("signed_head_mismatch"),
        "{}",
        stderr(&out)
    );
    // The last event dropped.
    let last_event = lines
        .iter()
        .rposition(|l| l.starts_with(r#"{"id":"#))
        .unwrap();
    let cut: Vec<&str> = lines
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != last_event)
        .map(|(_, l)| *l)
        .collect();
    let out = check(&cut.join("\n"));
    assert!(failure(&out).contains("cut_tail"), "{}", stderr(&out));
    // The signed heads dropped: the tail is unproven.
    let unsigned: Vec<&str> = lines
        .iter()
        .filter(|l| !l.starts_with(r#"{"signedHead":"#))
        .copied()
        .collect();
    let out = check(&unsigned.join("\n"));
    assert!(failure(&out).contains("unsigned_tail"), "{}", stderr(&out));
    // Another key: the signed heads' key is not trusted here.
    let other = "whpk_".to_owned()
        + &base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            ed25519_dalek::SigningKey::from_bytes(&[9; 32])
                .verifying_key()
                .as_bytes(),
        );
    let file = write_temp("export.ndjson", text.as_bytes());
    let out = offline(
        &s,
        &[
            "audit",
            "verify",
            "--export",
            file.to_str().unwrap(),
            "--public-key",
            &other,
        ],
    );
    let _ = std::fs::remove_file(file);
    assert!(failure(&out).contains("unknown_key"), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retention_checkpoint_is_signed_and_a_forged_one_fails() {
    let db = Db::new().await;
    let s = served(&db).await;
    let (ws, org) = (s.workspace.clone(), s.org.clone());
    for n in 0..3 {
        assert_ok(&s.run(&format!("pools create --workspace {ws} pool-{n}")));
    }
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert_ok(&s.run(&format!("audit retention {org} 1s")));
    let purged = json_of(&s.run("audit purge -o json"));
    assert!(purged["removed"].as_i64().unwrap() >= 4, "{purged}");
    assert_ok(&s.run(&format!("pools create --workspace {ws} after")));
    let report = verify_json(&s, &ws);
    assert_eq!(report["intact"], true, "{report}");
    assert!(
        report["signedHeadSequence"].as_i64().unwrap() >= 4,
        "{report}"
    );
    // An event put back below the checkpoint: the checkpoint says it was removed.
    let after = report["headSequence"].as_i64().unwrap();
    db.exec(&format!(
        "UPDATE audit_events SET seq = 1 WHERE seq = {after}"
    ))
    .await;
    let (_, report) = verify_fails(&s, &format!("audit verify --workspace {ws} -o json"));
    assert_eq!(
        report["broken"]["problem"], "checkpoint_events_remain",
        "{report}"
    );
    db.exec(&format!(
        "UPDATE audit_events SET seq = {after} WHERE seq = 1"
    ))
    .await;
    assert_eq!(verify_json(&s, &ws)["intact"], true);
    // The signed checkpoint's count changed: its signature no longer covers it.
    db.exec("UPDATE audit_checkpoints SET removed = removed + 1")
        .await;
    let (_, report) = verify_fails(&s, &format!("audit verify --workspace {ws} -o json"));
    assert_eq!(report["broken"]["problem"], "forged_checkpoint", "{report}");
    db.exec("UPDATE audit_checkpoints SET removed = removed - 1")
        .await;
    // The checkpoint's signed head removed: its hash is vouched for by nothing.
    db.exec("DELETE FROM audit_signed_heads").await;
    let (_, report) = verify_fails(&s, &format!("audit verify --workspace {ws} -o json"));
    assert_eq!(
        report["broken"]["problem"], "checkpoint_unsigned",
        "{report}"
    );
}

/// A database holder's rewrite behind a saved anchor A (issue 56 review, H1): every signed
/// head but the genuine one at A deleted, the checkpoints replaced by one shaped like the
/// migration's (unsigned, hashless) at A, an event at or below A edited, and the stored head
/// re-hashed from zero bytes above the checkpoint (no events above A here: the head's hash is
/// the zero bytes the chain restarts from). `--anchor A` must not pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewritten_log_behind_a_legacy_checkpoint_at_the_anchor_fails() {
    let db = Db::new().await;
    let (s, ws) = log(&db, 6).await;
    export(&s, &ws); // signs the head: A
    let report = verify_json(&s, &ws);
    let a = report["headSequence"].as_i64().unwrap();
    let hash_a = report["headHash"].as_str().unwrap().to_owned();
    assert_eq!(report["signedHeadSequence"], a, "{report}");
    db.exec(r#"UPDATE audit_events SET data = '{"name": "forged"}' WHERE seq = 5"#)
        .await;
    db.exec(&format!("DELETE FROM audit_signed_heads WHERE seq <> {a}"))
        .await;
    db.exec("DELETE FROM audit_checkpoints").await;
    db.exec(&format!(
        "INSERT INTO audit_checkpoints (workspace_id, last_seq, hash, removed, created_at)
         SELECT id, {a}, NULL, 0, created_at FROM workspaces"
    ))
    .await;
    db.exec("UPDATE workspaces SET audit_hash = NULL").await;
    let (err, report) = verify_fails(
        &s,
        &format!("audit verify --workspace {ws} --anchor {a}:{hash_a} -o json"),
    );
    assert_eq!(report["intact"], false, "{report}");
    assert_ne!(report["anchorExtended"], true, "{report}");
    assert!(err.contains("forged_checkpoint"), "{err}");
}

/// `cpctl` offline: its config folder and nothing else, no server named (no argument of these
/// tests holds a space).
fn offline(s: &Served, args: &[&str]) -> std::process::Output {
    client(&s.home, &args.join(" "), &[], "")
}

/// Offline verify of `body` with `key`.
fn offline_verify(s: &Served, body: &str, key: &str, extra: &[&str]) -> std::process::Output {
    let file = write_temp("export.ndjson", body.as_bytes());
    let mut args = vec![
        "audit",
        "verify",
        "--export",
        file.to_str().unwrap(),
        "--public-key",
        key,
        "-o",
        "json",
    ];
    args.extend_from_slice(extra);
    let out = offline(s, &args);
    let _ = std::fs::remove_file(file);
    out
}

/// Every event line of an export is walked (issue 56 review, H2): a line with a duplicate
/// sequence, one after a gap, one at or below `chainFrom`, and `chainFrom` raised to a
/// sequence no proof in the export vouches for each fail offline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_line_the_walk_would_not_reach_fails_offline() {
    let db = Db::new().await;
    let (s, ws) = log(&db, 3).await;
    let earlier = verify_json(&s, &ws);
    let a = earlier["headSequence"].as_i64().unwrap();
    let hash_a = earlier["headHash"].as_str().unwrap().to_owned();
    for n in 0..3 {
        assert_ok(&s.run(&format!("pools create --workspace {ws} more-{n}")));
    }
    let text = export(&s, &ws);
    let key = public_key(&s);
    let good = json_of(&offline_verify(&s, &text, &key, &[]));
    assert_eq!(good["intact"], true, "{good}");
    let lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let is_event = |l: &str| l.starts_with(r#"{"id":"#);
    let events: Vec<&String> = lines.iter().filter(|l| is_event(l)).collect();
    let last_seq = good["headSequence"].as_i64().unwrap();
    let with_extra = |extra: String| {
        let mut v = lines.clone();
        let at = v.iter().rposition(|l| is_event(l)).unwrap() + 1;
        v.insert(at, extra);
        v.join("\n")
    };
    let edited = |line: &str, seq: i64| {
        let v: Value = serde_json::from_str(line).unwrap();
        let mut v = v;
        v["sequence"] = seq.into();
        v["data"] = serde_json::json!({ "name": "forged" });
        v.to_string()
    };
    // A line after a gap.
    let out = offline_verify(&s, &with_extra(edited(events[1], last_seq + 2)), &key, &[]);
    assert!(failure(&out).contains("deleted"), "{}", stderr(&out));
    // A line at or below chainFrom (0).
    let out = offline_verify(&s, &with_extra(edited(events[1], 0)), &key, &[]);
    assert!(failure(&out).contains("unwalked_event"), "{}", stderr(&out));
    // chainFrom raised to (A, the hash at A), the events at or below A edited.
    let raise = |keep_low: bool| {
        let mut v: Vec<String> = Vec::new();
        for l in &lines {
            if l.starts_with(r#"{"auditExport":"#) {
                let mut h: Value = serde_json::from_str(l).unwrap();
                h["auditExport"]["chainFrom"] =
                    serde_json::json!({ "sequence": a, "hash": hash_a });
                v.push(h.to_string());
            } else if is_event(l) {
                let e: Value = serde_json::from_str(l).unwrap();
                let seq = e["sequence"].as_i64().unwrap();
                if seq > a {
                    v.push(l.clone());
                } else if keep_low {
                    v.push(edited(l, seq));
                }
            } else {
                v.push(l.clone());
            }
        }
        v.join("\n")
    };
    let anchor = format!("{a}:{hash_a}");
    let out = offline_verify(&s, &raise(true), &key, &["--anchor", &anchor]);
    assert!(!out.status.success(), "{}", stdout(&out));
    let out = offline_verify(&s, &raise(false), &key, &["--anchor", &anchor]);
    assert!(failure(&out).contains("unproven_start"), "{}", stderr(&out));
    // A second line at sequence 2.
    let out = offline_verify(&s, &with_extra(edited(events[1], 2)), &key, &[]);
    assert!(
        failure(&out).contains("duplicate_sequence"),
        "{}",
        stderr(&out)
    );
}

/// An honest export after two retention passes (two checkpoints, the lower one below the
/// export's start) verifies offline: it carries the signed head at each checkpoint (issue 56
/// review, M2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_after_two_retention_checkpoints_verifies_offline() {
    let db = Db::new().await;
    let s = served(&db).await;
    let (ws, org) = (s.workspace.clone(), s.org.clone());
    assert_ok(&s.run(&format!("audit retention {org} 1s")));
    for round in 0..2 {
        for n in 0..2 {
            assert_ok(&s.run(&format!("pools create --workspace {ws} pool-{round}-{n}")));
        }
        std::thread::sleep(std::time::Duration::from_millis(1100));
        let purged = json_of(&s.run("audit purge -o json"));
        assert!(purged["removed"].as_i64().unwrap() >= 2, "{purged}");
    }
    assert_ok(&s.run(&format!("pools create --workspace {ws} after")));
    let report = verify_json(&s, &ws);
    assert_eq!(report["intact"], true, "{report}");
    assert_eq!(report["checkpoints"], 2, "{report}");
    let text = export(&s, &ws);
    let key = public_key(&s);
    let out = offline_verify(&s, &text, &key, &[]);
    assert_ok(&out);
    let good = json_of(&out);
    assert_eq!(good["intact"], true, "{good}");
    assert_eq!(good["headHash"], report["headHash"], "{good}");
}

/// A server restarted with other keys than the one that signed the latest head (here: a new
/// key alone, that head still the old key's) does not poison the signed heads: its export
/// signs nothing fresh when the latest signed head's key is none it holds, and cpctl says the
/// tail is unproven (issue 56 review, M4). During a rotation (`NEW,OLD`) it holds the latest
/// head's key and signs (second review, 4). Each server starts while the head is signed, so
/// its start-up signing pass has nothing to sign.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_by_a_server_with_other_keys_signs_nothing() {
    let db = Db::new().await;
    let (old, ws) = log_signed_with(&db, OLD, 3).await;
    export(&old, &ws); // the old key signs the head
    let signed = verify_json(&old, &ws)["signedHeadSequence"]
        .as_i64()
        .unwrap();
    let new = restart_signing_with(old, &db, NEW).await;
    assert_ok(&new.run(&format!("pools create --workspace {ws} more")));
    let export_args = ["audit", "export", "--workspace", &ws];
    let out = new.cpctl(&export_args);
    assert_ok(&out);
    let warning = stderr(&out);
    assert!(warning.contains("no signed head at sequence"), "{warning}");
    assert!(!warning.contains("   "), "no runs of spaces: {warning}");
    assert_eq!(signed_above(&db, signed).await, 0);
    // Back on the old key, the log is intact (and its export signs the head).
    let old = restart_signing_with(new, &db, OLD).await;
    let report = verify_json(&old, &ws);
    assert_eq!(report["intact"], true, "{report}");
    let out = old.cpctl(&export_args);
    assert_ok(&out);
    assert!(stderr(&out).trim().is_empty(), "{}", stderr(&out));
    // A rotation: the new key first, the old one kept; the latest head is the old key's.
    let rotation = restart_signing_with(old, &db, &format!("{NEW},{OLD}")).await;
    assert_ok(&rotation.run(&format!("pools create --workspace {ws} rotated")));
    let head = verify_json(&rotation, &ws)["headSequence"]
        .as_i64()
        .unwrap();
    let out = rotation.cpctl(&export_args);
    assert_ok(&out);
    assert!(stderr(&out).trim().is_empty(), "{}", stderr(&out));
    let report = verify_json(&rotation, &ws);
    assert_eq!(report["intact"], true, "{report}");
    assert_eq!(report["signedHeadSequence"], head, "{report}");
}

/// A webhook key rotation that drops the old key (docs/runners.md): the heads it signed are
/// reported `unknown_key`, naming its kid, until its public key is given for verification
/// only (`--audit-keys`, or CP_AUDIT_VERIFY_KEYS), which then verifies them (issue 56 review,
/// M1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heads_signed_with_a_dropped_key_verify_with_audit_keys() {
    let db = Db::new().await;
    let (old, ws) = log_signed_with(&db, OLD, 3).await;
    export(&old, &ws);
    let keys = json_of(&old.run("webhooks keys -o json"));
    let (old_kid, old_public) = (
        keys[0]["kid"].as_str().unwrap().to_owned(),
        keys[0]["publicKey"].as_str().unwrap().to_owned(),
    );
    let new = restart_signing_with(old, &db, NEW).await;
    let verify = ["audit", "verify", "--workspace", &ws, "-o", "json"];
    let out = new.cpctl(&verify);
    let err = failure(&out);
    assert!(err.contains("unknown_key"), "{err}");
    assert!(err.contains(&old_kid), "{err}");
    let mut with_old = verify.to_vec();
    with_old.extend(["--audit-keys", &old_public]);
    let out = new.cpctl(&with_old);
    assert_ok(&out);
    assert_eq!(json_of(&out)["intact"], true);
    // The same from the environment.
    let out = new.cpctl_with(
        &new.token,
        &verify,
        &[("CP_AUDIT_VERIFY_KEYS", old_public.as_str())],
    );
    assert_ok(&out);
    assert_eq!(json_of(&out)["intact"], true);
}

/// After a rotation that dropped the old key, an export's check of the chain trusts the
/// verification-only keys the operator gives (`--audit-keys`, CP_AUDIT_VERIFY_KEYS), so the
/// server signs the tail again (second review, 5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_after_a_rotation_that_dropped_a_key_signs_with_audit_keys() {
    let db = Db::new().await;
    let (old, ws) = log_signed_with(&db, OLD, 3).await;
    let old_public = public_key(&old);
    let export_args = ["audit", "export", "--workspace", &ws];
    assert_ok(&old.cpctl(&export_args));
    // During the rotation a head is signed with the new key.
    let rotation = restart_signing_with(old, &db, &format!("{NEW},{OLD}")).await;
    assert_ok(&rotation.run(&format!("pools create --workspace {ws} rotated")));
    assert_ok(&rotation.cpctl(&export_args));
    // The old key dropped.
    let new = restart_signing_with(rotation, &db, NEW).await;
    assert_ok(&new.run(&format!("pools create --workspace {ws} dropped")));
    let out = new.cpctl(&export_args);
    assert_ok(&out);
    assert!(
        stderr(&out).contains("no signed head at sequence"),
        "{}",
        stderr(&out)
    );
    // The environment's keys are verify's: export takes them by flag only.
    let out = new.cpctl_with(
        &new.token,
        &export_args,
        &[("CP_AUDIT_VERIFY_KEYS", old_public.as_str())],
    );
    assert_ok(&out);
    assert!(
        stderr(&out).contains("no signed head at sequence"),
        "{}",
        stderr(&out)
    );
    let mut with_old = export_args.to_vec();
    with_old.extend(["--audit-keys", &old_public]);
    let out = new.cpctl(&with_old);
    assert_ok(&out);
    assert!(stderr(&out).trim().is_empty(), "{}", stderr(&out));
    let mut verify = vec!["audit", "verify", "--workspace", &ws, "-o", "json"];
    verify.extend(["--audit-keys", &old_public]);
    let report = json_of(&new.cpctl(&verify));
    assert_eq!(report["intact"], true, "{report}");
    assert_eq!(
        report["signedHeadSequence"], report["headSequence"],
        "{report}"
    );
}

/// A purge seals a checkpoint that cannot be re-signed later: a server whose key is not the
/// latest signed head's refuses (409), and removes nothing (second review, 6); one that holds
/// it (a rotation) purges. The retention is set once each server's start-up retention pass
/// ran, so the purge asked for is the one that removes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_by_a_server_without_the_heads_key_refuses() {
    let db = Db::new().await;
    let (old, ws) = log_signed_with(&db, OLD, 3).await;
    let old_public = public_key(&old);
    export(&old, &ws);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let new = restart_signing_with(old, &db, NEW).await;
    let org = new.org.clone();
    assert_ok(&new.run(&format!("audit retention {org} 1s")));
    let purge = ["audit", "purge", "-o", "json"];
    let err = failure(&new.cpctl(&purge));
    assert!(err.contains("not purging"), "{err}");
    let report = json_of(&new.run(&format!(
        "audit verify --workspace {ws} --audit-keys {old_public} -o json"
    )));
    assert_eq!(report["intact"], true, "{report}");
    assert_eq!(report["checkpointSequence"], 0, "{report}");
    assert_ok(&new.run(&format!("audit retention {org} none")));
    let rotation = restart_signing_with(new, &db, &format!("{NEW},{OLD}")).await;
    assert_ok(&rotation.run(&format!("audit retention {org} 1s")));
    let out = rotation.cpctl(&purge);
    assert_ok(&out);
    assert!(
        json_of(&out)["removed"].as_i64().unwrap() >= 4,
        "{}",
        stdout(&out)
    );
}

/// A crafted export is an error, never a panic: a `chainFrom` at i64::MAX or below 0, an
/// event line with a field the export does not write, a second header line (second review,
/// 1 and 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crafted_export_is_refused_with_an_error() {
    let db = Db::new().await;
    let (s, ws) = log(&db, 3).await;
    let text = export(&s, &ws);
    let key = public_key(&s);
    let good = json_of(&offline_verify(&s, &text, &key, &[]));
    assert_eq!(good["intact"], true, "{good}");
    let lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let with_first = |first: String| {
        let mut out = vec![first];
        out.extend(lines[1..].iter().cloned());
        out.join("\n")
    };
    for seq in [i64::MAX, i64::MAX - 1, -1] {
        let mut header: Value = serde_json::from_str(&lines[0]).unwrap();
        header["auditExport"]["chainFrom"]["sequence"] = serde_json::json!(seq);
        let out = offline_verify(&s, &with_first(header.to_string()), &key, &[]);
        assert_ne!(out.status.code(), Some(101), "{}", stderr(&out));
        assert!(failure(&out).contains("out of range"), "{}", stderr(&out));
    }
    let mut event: Value = serde_json::from_str(&lines[1]).unwrap();
    event["note"] = serde_json::json!("unsigned");
    let mut edited = lines.clone();
    edited[1] = event.to_string();
    let err = failure(&offline_verify(&s, &edited.join("\n"), &key, &[]));
    assert!(err.contains("is not an event"), "{err}");
    let mut event: Value = serde_json::from_str(&lines[1]).unwrap();
    event["actor"]["note"] = serde_json::json!("unsigned");
    edited[1] = event.to_string();
    let err = failure(&offline_verify(&s, &edited.join("\n"), &key, &[]));
    assert!(err.contains("is not an event"), "{err}");
    let mut doubled = lines.clone();
    doubled.insert(1, lines[0].clone());
    let err = failure(&offline_verify(&s, &doubled.join("\n"), &key, &[]));
    assert!(err.contains("second auditExport"), "{err}");
}

/// A `--since` export starts where export signed a head: an anchor at exactly that start
/// verifies offline (second review, 8), one with another hash there does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anchor_at_a_since_exports_signed_start_verifies_offline() {
    let db = Db::new().await;
    let (s, ws) = log(&db, 3).await;
    std::thread::sleep(std::time::Duration::from_millis(50));
    let since = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    std::thread::sleep(std::time::Duration::from_millis(50));
    for n in 0..2 {
        assert_ok(&s.run(&format!("pools create --workspace {ws} later-{n}")));
    }
    let out = s.run(&format!("audit export --workspace {ws} --since {since}"));
    assert_ok(&out);
    let text = stdout(&out);
    let header: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let from = &header["auditExport"]["chainFrom"];
    let (seq, hash) = (
        from["sequence"].as_i64().unwrap(),
        from["hash"].as_str().unwrap(),
    );
    assert!(seq > 0, "{header}");
    let key = public_key(&s);
    let anchor = format!("{seq}:{hash}");
    let good = offline_verify(&s, &text, &key, &["--anchor", &anchor]);
    assert_ok(&good);
    assert_eq!(json_of(&good)["anchorExtended"], true, "{}", stdout(&good));
    let other = format!("{seq}:{}", "ab".repeat(32));
    let out = offline_verify(&s, &text, &key, &["--anchor", &other]);
    assert!(!out.status.success(), "{}", stdout(&out));
}
