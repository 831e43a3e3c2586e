//! Runner pools and runners (their keys, secrets and delivery URLs under the egress rule),
//! managed from the CLI. Deliveries are `fleet.rs`'s; workflows, plugins and reviews
//! `marketplace.rs`'s.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_and_runners_are_managed_from_the_cli() {
    let db = Db::new().await;
    let server = served(&db).await;
    let ws = server.workspace.clone();

    let pool = json_of(&server.run(&format!("pools create --workspace {ws} builders -o json")));
    let pool_id = pool["id"].as_str().unwrap().to_owned();
    let listed = json_of(&server.run(&format!("pools list --workspace {ws} -o json")));
    assert_eq!(listed[0]["id"], pool["id"]);
    // Without --workspace: the pools of every workspace of the caller's organisation.
    let all = json_of(&server.run("pools list -o json"));
    assert_eq!(all.as_array().unwrap().len(), 1, "{all}");
    let table = stdout(&server.run("pools list"));
    assert!(
        table.starts_with("ID") && table.contains("builders"),
        "{table}"
    );

    // Without a public key, a pair is generated and the private key printed once.
    let runner = json_of(&server.run(&format!("runners register --pool {pool_id} -o json")));
    let runner_id = runner["runnerId"].as_str().unwrap().to_owned();
    let key_id = runner["keyId"].as_str().unwrap().to_owned();
    let private = runner["privateKey"].as_str().unwrap().to_owned();
    assert_eq!(private.len(), 44, "base64 of 32 bytes");
    // Its own webhook secret, shown once.
    let secret = runner["webhookSecret"].as_str().unwrap().to_owned();
    RunnerSecret::parse(&secret).expect("a whsec_ secret");

    // Rotating prints a new secret and when the old one stops signing.
    let rotated = json_of(&server.run(&format!(
        "runners update --runner {runner_id} --rotate-secret --overlap-hours 2 -o json"
    )));
    let new_secret = rotated["webhookSecret"].as_str().unwrap();
    assert!(new_secret.starts_with("whsec_") && new_secret != secret);
    assert!(rotated["previousSecretRetiresAt"].is_string(), "{rotated}");
    let too_long = server.run(&format!(
        "runners update --runner {runner_id} --rotate-secret --overlap-hours 721"
    ));
    assert!(!too_long.status.success());
    let err = failure(&too_long);
    assert!(
        err.contains("overlapHours") && err.contains("0 to 720"),
        "{err}"
    );

    // With a public key (RFC 8032 test 1), nothing secret is printed.
    let given = json_of(&server.run(&format!("runners register --pool {pool_id} --public-key 11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo= -o json")));
    assert!(given["privateKey"].is_null());
    let bad = server.run(&format!(
        "runners register --pool {pool_id} --public-key abc"
    ));
    assert!(!bad.status.success());

    let added = json_of(&server.run(&format!("runners keys add --runner {runner_id} -o json")));
    let second = added["keyId"].as_str().unwrap().to_owned();
    assert_ne!(second, key_id);
    let revoked = server.run(&format!(
        "runners keys revoke --runner {runner_id} --key {second}"
    ));
    assert!(revoked.status.success());
    let again = server.run(&format!(
        "runners keys revoke --runner {runner_id} --key {second}"
    ));
    assert!(
        !again.status.success(),
        "a revoked key cannot be revoked twice"
    );

    // Signing needs no database, only the key.
    let signed = Command::new(env!("CARGO_BIN_EXE_cpctl"))
        .args([
            "runners",
            "sign",
            "--runner",
            &runner_id,
            "--key",
            &key_id,
            "--delivery",
            &uuid::Uuid::new_v4().to_string(),
            "--body",
            r#"{"status":"received"}"#,
        ])
        .env_clear()
        .env("CP_RUNNER_PRIVATE_KEY", &private)
        .output()
        .unwrap();
    let line = stdout(&signed);
    assert_ok(&signed);
    for header in [
        "x-sandbox-signature",
        "x-sandbox-runner-id",
        "x-sandbox-key-id",
        "x-sandbox-timestamp",
        "x-sandbox-nonce",
    ] {
        assert!(line.contains(header), "{header} missing from {line}");
    }
    assert!(
        !line.contains(&private),
        "the private key is never printed by sign"
    );
}

/// Where a runner receives commands is set from the CLI under the server's egress rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runner_delivery_urls_from_the_cli() {
    let db = Db::new().await;
    // The rule is the server's setting (cpctl has none): plain http to loopback allowed here.
    let server = served_with(&db, |config| {
        config.delivery_http_hosts = Some("127.0.0.1".into());
    })
    .await;
    let ws = server.workspace.clone();
    let pool = json_of(&server.run(&format!("pools create --workspace {ws} builders -o json")));
    let pool_id = pool["id"].as_str().unwrap().to_owned();

    // Plain http goes only to the hosts the server lists, credentials never; the refusal says
    // why, and never echoes the credentials.
    for refused in [
        "http://runner.example/hooks",
        "https://user:secret@runner.example/hooks",
    ] {
        let out = server.run(&format!(
            "runners register --pool {pool_id} --url {refused}"
        ));
        assert!(!out.status.success(), "{refused}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("url"), "{err}");
        assert!(!err.contains("secret"), "{err}");
        if refused.starts_with("http:") {
            assert!(err.contains("must be https"), "{err}");
        }
    }
    // Listed by the server, loopback is allowed.
    let runner = json_of(&server.run(&format!(
        "runners register --pool {pool_id} --url http://127.0.0.1:9/hooks -o json"
    )));
    assert_eq!(runner["deliveryUrl"], "http://127.0.0.1:9/hooks");
    let runner_id = runner["runnerId"].as_str().unwrap().to_owned();
    let updated = json_of(&server.run(&format!(
        "runners update --runner {runner_id} --url https://runner.example/hooks -o json"
    )));
    assert_eq!(updated["deliveryUrl"], "https://runner.example/hooks");
    let plain = server.run(&format!(
        "runners update --runner {runner_id} --url http://runner.example/hooks"
    ));
    assert!(!plain.status.success());
    let err = String::from_utf8_lossy(&plain.stderr);
    assert!(err.contains("must be https"), "{err}");
    // A link-local address (cloud metadata) is refused over https too, with the reason.
    let metadata = server.run(&format!(
        "runners update --runner {runner_id} --url https://169.254.169.254/latest/meta-data/"
    ));
    assert!(!metadata.status.success());
    let err = String::from_utf8_lossy(&metadata.stderr);
    assert!(err.contains("link-local"), "{err}");
    let cleared = server.run(&format!("runners update --runner {runner_id} --clear-url"));
    assert_eq!(stdout(&cleared).trim(), "(no delivery URL)");
    // cpctl has no egress setting of its own any more.
    let gone = server.run(&format!(
        "runners update --runner {runner_id} --url http://127.0.0.1:9/hooks --delivery-http-hosts 127.0.0.1"
    ));
    assert!(!gone.status.success());
}
