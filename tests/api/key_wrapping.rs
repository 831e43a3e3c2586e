//! Keys at rest: every key the server generates is stored wrapped with the key-encryption key,
//! which lives outside the records store, so a copy of the store alone opens nothing; a process
//! with another key-encryption key is refused at start, naming the fix; a key an earlier
//! version kept in the clear is wrapped in place and keeps working. A second process is opened
//! as `cpctl` opens one (the embedded store admits one server).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use control_plane::domain::KeyEncryptionKey;
use control_plane::startup::open_services;

use crate::support::{
    Call, create_database, routes, spawn_with_config, sql_all, sql_exec, test_config,
};

const GENERATED: [&str; 4] = [
    "token_hash_key",
    "idempotency_record_key",
    "webhook_signing_key",
    "runner_secret_key",
];

fn kek_text() -> String {
    KeyEncryptionKey::generate().1
}

#[tokio::test]
async fn generated_keys_are_stored_wrapped_and_another_kek_is_refused() {
    let (name, url) = create_database().await;
    let mut config = test_config(&url);
    config.key_encryption_key = Some(kek_text());
    let app = spawn_with_config(name, config.clone()).await;
    let tenant = app.bootstrap().await;

    let stored: Vec<(String, String)> = sql_all!(
        &mut app.db().await,
        (String, String),
        "SELECT key, value FROM settings ORDER BY key"
    )
    .unwrap();
    for key in GENERATED {
        let (_, value) = stored
            .iter()
            .find(|(k, _)| k == key)
            .unwrap_or_else(|| panic!("{key} is stored: {stored:?}"));
        assert!(value.starts_with("wrapped-v1:"), "{key} is wrapped");
    }

    // The same store with another key-encryption key: refused, naming the fix.
    let mut stranger = config.clone();
    stranger.key_encryption_key = Some(kek_text());
    let err = open_services(&stranger)
        .await
        .err()
        .expect("another key-encryption key is refused");
    let err = format!("{err:#}");
    assert!(
        err.contains("another key-encryption key") && err.contains("CP_KEY_ENCRYPTION_KEY"),
        "{err}"
    );

    // With the right one, a second process reads the same keys: the token still works.
    let services = open_services(&config).await.expect("the same kek opens");
    let path = routes::activity(tenant.workspace_id);
    app.get(&path, &tenant.token).ok_response().await;
    assert_eq!(
        services.webhook_signer().public_keys()[0].kid,
        app.services.webhook_signer().public_keys()[0].kid
    );
}

#[tokio::test]
async fn a_key_kept_in_the_clear_by_an_earlier_version_is_wrapped_in_place() {
    let (name, url) = create_database().await;
    let mut config = test_config(&url);
    config.key_encryption_key = Some(kek_text());
    let app = spawn_with_config(name, config.clone()).await;
    // As an earlier version left it: the webhook seed in the clear.
    let seed = [42u8; 32];
    sql_exec!(
        &mut app.db().await,
        "UPDATE settings SET value = $1 WHERE key = 'webhook_signing_key'",
        STANDARD.encode(seed)
    )
    .unwrap();
    let upgraded = open_services(&config).await.expect("start over it");
    let expected = control_plane::domain::WebhookSigner::from_seeds(&[seed.to_vec()]).unwrap();
    assert_eq!(
        upgraded.webhook_signer().public_keys()[0].kid,
        expected.public_keys()[0].kid,
        "the key in the clear is the key in use"
    );
    let stored: Vec<(String,)> = sql_all!(
        &mut app.db().await,
        (String,),
        "SELECT value FROM settings WHERE key = 'webhook_signing_key'"
    )
    .unwrap();
    assert!(stored[0].0.starts_with("wrapped-v1:"), "wrapped in place");
    assert!(!stored[0].0.contains(&STANDARD.encode(seed)));
}

#[cfg(unix)]
#[tokio::test]
async fn without_a_configured_kek_one_is_kept_owner_only_beside_the_store() {
    use std::os::unix::fs::PermissionsExt;

    let dir = std::env::temp_dir().join(format!("cp-kek-{}", uuid::Uuid::new_v4().simple()));
    let (name, url) = create_database().await;
    let mut config = test_config(&url);
    config.key_encryption_key = None;
    config.key_encryption_key_file = Some(dir.join("keys").join("control-plane.kek"));
    let app = spawn_with_config(name, config.clone()).await;
    let path = config.key_file();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{}", path.display());
    let folder = std::fs::metadata(path.parent().unwrap()).unwrap();
    assert_eq!(folder.permissions().mode() & 0o777, 0o700);
    let text = std::fs::read_to_string(&path).unwrap();
    KeyEncryptionKey::from_base64(&text).expect("a key");

    // Loosened: refused at the next start, with the fix.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    let err = format!("{:#}", open_services(&config).await.err().expect("refused"));
    assert!(err.contains("chmod go-rwx"), "{err}");
    assert!(!err.contains(text.trim()), "the error holds no key");
    drop(app);
    let _ = std::fs::remove_dir_all(&dir);
}
