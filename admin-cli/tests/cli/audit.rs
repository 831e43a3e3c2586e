//! `cpctl audit` over HTTP: verify on the server (exit status, `-o json`, the break it names
//! when an event is changed, deleted or reordered directly in the store), export (the server's
//! stream: ndjson in sequence order, CSV's shape), retention and a purge after which verify
//! still passes, and one-line errors for bad input.

use super::*;

/// A served store with a few more workspace events (environments); returns the server, the
/// workspace and the organisation.
async fn log(db: &Db) -> (Served, String, String) {
    let s = served(db).await;
    let (ws, org) = (s.workspace.clone(), s.org.clone());
    for n in 0..4 {
        assert_ok(&s.run(&format!("environments create --workspace {ws} env-{n}")));
    }
    (s, ws, org)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_passes_then_names_a_changed_event_with_a_failing_status() {
    let db = Db::new().await;
    let (s, ws, _) = log(&db).await;
    let report = json_of(&s.run(&format!("audit verify --workspace {ws} -o json")));
    assert_eq!(report["intact"], true, "{report}");
    assert_eq!(report["verified"], report["headSequence"]);
    let table = s.run(&format!("audit verify --workspace {ws}"));
    assert_ok(&table);
    assert!(stdout(&table).starts_with("ok: "), "{}", stdout(&table));

    db.exec(r#"UPDATE audit_events SET data = '{"name": "forged"}' WHERE seq = 3"#)
        .await;
    let out = s.run(&format!("audit verify --workspace {ws} -o json"));
    let err = failure(&out);
    assert!(err.contains("changed at sequence 3"), "{err}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["intact"], false);
    assert_eq!(report["broken"]["problem"], "changed");
    assert_eq!(report["broken"]["sequence"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_names_a_deleted_event_with_a_failing_status() {
    let db = Db::new().await;
    let (s, ws, _) = log(&db).await;
    db.exec("DELETE FROM audit_events WHERE seq = 4").await;
    let out = s.run(&format!("audit verify --workspace {ws} -o json"));
    let err = failure(&out);
    assert!(err.contains("deleted at sequence 4"), "{err}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["intact"], false);
    assert_eq!(report["broken"]["problem"], "deleted");
    assert_eq!(report["broken"]["sequence"], 4);
    assert_eq!(report["verified"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_names_reordered_events_and_where_one_went() {
    let db = Db::new().await;
    let (s, ws, _) = log(&db).await;
    // Swap 3 and 4 through a free number: the (workspace, seq) index is checked row by row.
    for swap in [
        "UPDATE audit_events SET seq = -1 WHERE seq = 3",
        "UPDATE audit_events SET seq = 3 WHERE seq = 4",
        "UPDATE audit_events SET seq = 4 WHERE seq = -1",
    ] {
        db.exec(swap).await;
    }
    let out = s.run(&format!("audit verify --workspace {ws} -o json"));
    let err = failure(&out);
    assert!(err.contains("reordered at sequence 3"), "{err}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["intact"], false);
    assert_eq!(report["broken"]["problem"], "reordered");
    assert_eq!(report["broken"]["sequence"], 3);
    assert_eq!(report["broken"]["foundAt"], 4);
    let table = s.run(&format!("audit verify --workspace {ws}"));
    assert!(!table.status.success());
    assert!(
        stdout(&table).starts_with("broken: event reordered at sequence 3 (now at sequence 4)"),
        "{}",
        stdout(&table)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_writes_every_event_in_order_as_ndjson_and_csv() {
    let db = Db::new().await;
    let (s, ws, _) = log(&db).await;
    let out = s.run(&format!("audit export --workspace {ws} --format ndjson"));
    assert_ok(&out);
    let all: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // The first line names the export; the proofs follow the events.
    assert_eq!(all[0]["auditExport"]["workspaceId"], ws.as_str());
    let lines: Vec<Value> = all
        .iter()
        .filter(|l| l.get("id").is_some())
        .cloned()
        .collect();
    assert!(all.last().unwrap().get("signedHead").is_some(), "{all:?}");
    let seqs: Vec<i64> = lines
        .iter()
        .map(|l| l["sequence"].as_i64().unwrap())
        .collect();
    assert_eq!(seqs, (1..=lines.len() as i64).collect::<Vec<_>>());
    assert!(lines.len() >= 6, "{lines:?}");
    assert_eq!(lines[0]["type"], "workspace.created");
    // What came over HTTP verifies offline with the server's published keys.
    let file = write_temp("export.ndjson", stdout(&out).as_bytes());
    let jwks = reqwest::get(format!("{}/.well-known/jwks.json", s.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let jwks_file = write_temp("jwks.json", jwks.as_bytes());
    let offline = client(
        &s.home,
        &format!(
            "audit verify --export {} --jwks {} -o json",
            file.display(),
            jwks_file.display()
        ),
        &[],
        "",
    );
    assert_ok(&offline);
    let report = json_of(&offline);
    assert_eq!(report["intact"], true, "{report}");
    assert_eq!(report["headSequence"], lines.last().unwrap()["sequence"]);
    let _ = std::fs::remove_file(file);
    let _ = std::fs::remove_file(jwks_file);
    assert!(is_api_time(lines[0]["occurredAt"].as_str().unwrap()));

    let csv = stdout(&s.run(&format!("audit export --workspace {ws} --format csv")));
    let rows: Vec<&str> = csv.lines().filter(|r| !r.starts_with(',')).collect();
    assert!(
        csv.lines().any(|r| r.contains(",audit.signed_head,")),
        "{csv}"
    );
    assert_eq!(
        rows[0],
        "id,sequence,type,actor_kind,actor_id,target_kind,target_id,correlation_id,occurred_at,data,actor_token_id"
    );
    assert_eq!(rows.len(), lines.len() + 1);
    // `data` is a quoted JSON string, followed by the acting token (empty when none).
    let last = rows[2];
    let data_at = last.find(",\"{").expect("a quoted JSON data column");
    let data_end = last.rfind("}\",").expect("the data column's end");
    let data = last[data_at + 2..=data_end].replace("\"\"", "\"");
    let data: Value = serde_json::from_str(&data).unwrap();
    assert_eq!(data, lines[1]["data"]);

    // A long export says how far it got on stderr, never on stdout.
    let long = s.run(&format!("audit export --workspace {ws} --progress-every 2"));
    assert_ok(&long);
    assert_eq!(stdout(&long).lines().count(), all.len());
    let progress = String::from_utf8_lossy(&long.stderr).into_owned();
    assert!(
        progress.contains("exported 2 events (up to sequence 2)")
            && progress.contains("exported 4 events (up to sequence 4)")
            && progress.contains(&format!("exported {} events in all", lines.len())),
        "{progress}"
    );

    // A window that ends before everything: nothing.
    let none = s.run(&format!(
        "audit export --workspace {ws} --until 2000-01-01T00:00:00Z"
    ));
    assert_ok(&none);
    assert_eq!(stdout(&none), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_retention_and_a_purge_the_chain_still_verifies() {
    let db = Db::new().await;
    let (s, ws, org) = log(&db).await;
    // A week keeps everything; then, a second later, a retention of 1s removes every event.
    let set = json_of(&s.run(&format!("audit retention {org} 7d -o json")));
    assert_eq!(set["retention"], "1w");
    assert_eq!(set["retentionSeconds"], 604_800);
    let purged = json_of(&s.run("audit purge -o json"));
    assert_eq!(purged["removed"], 0);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert_ok(&s.run(&format!("audit retention {org} 1s")));
    let purged = json_of(&s.run("audit purge -o json"));
    assert!(purged["removed"].as_i64().unwrap() >= 6, "{purged}");
    assert_ok(&s.run(&format!("environments create --workspace {ws} after")));
    let report = json_of(&s.run(&format!("audit verify --workspace {ws} -o json")));
    assert_eq!(report["intact"], true, "{report}");
    assert_eq!(report["verified"], 1);
    assert_eq!(report["checkpointSequence"], purged["removed"]);
    let off = json_of(&s.run(&format!("audit retention {org} none -o json")));
    assert!(off["retention"].is_null());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_one_line_errors() {
    let db = Db::new().await;
    let (s, ws, org) = log(&db).await;
    for (line, says) in [
        ("audit verify --workspace nope".to_owned(), "invalid value"),
        (
            format!("audit verify --workspace {}", uuid::Uuid::new_v4()),
            "no such workspace",
        ),
        (
            format!("audit export --workspace {ws} --since yesterday"),
            "not an RFC 3339 time",
        ),
        (format!("audit retention {org} 90x"), "not a length of time"),
        (format!("audit retention {org} 0d"), "longer than 0s"),
        (
            format!("audit retention {} 90d", uuid::Uuid::new_v4()),
            "no such organisation",
        ),
    ] {
        let err = failure(&s.run(&line));
        assert!(err.contains(says), "{line}: {err}");
    }
}
