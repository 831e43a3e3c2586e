//! cpctl as an HTTP client, with nothing in its environment but its own config folder and the
//! `CPCTL_*` variables: `login` keeps a context only for a token the server accepts, in a file
//! only its owner may read; `whoami`, `context list|use|remove`, and the overrides.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::*;

fn contexts_file(home: &Path) -> PathBuf {
    home.join("cpctl").join("contexts.json")
}

// Multi-threaded: the server answers while this thread waits for cpctl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_keeps_a_context_only_for_a_token_the_server_accepts() {
    let db = Db::new().await;
    let server = served(&db).await;
    let home = config_home();
    let login = format!("login --server {}", server.base);

    let refused = failure(&client(&home, &login, &[], "cpat_not_a_real_token\n"));
    assert!(refused.contains("unauthenticated"), "{refused}");
    assert!(refused.contains("correlation id"), "{refused}");
    assert!(
        !contexts_file(&home).exists(),
        "nothing kept for a refused token"
    );

    let done = client(&home, &login, &[], &format!("{}\n", server.token));
    assert_ok(&done);
    assert!(
        !stdout(&done).contains(&server.token),
        "the token is not printed"
    );
    let file = contexts_file(&home);
    let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&file), 0o600);
    assert_eq!(mode(file.parent().unwrap()), 0o700);

    let me = json_of(&client(&home, "whoami -o json", &[], ""));
    assert_eq!(me["userId"], server.user.as_str());
    assert_eq!(me["role"], "operator");
    let listed = json_of(&client(&home, "context list -o json", &[], ""));
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["current"], true);
    assert_eq!(listed[0]["server"], server.base.as_str());

    // A file others may read is refused, as ssh refuses a readable key.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let readable = failure(&client(&home, "whoami", &[], ""));
    assert!(readable.contains("chmod 600"), "{readable}");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();

    let name = listed[0]["name"].as_str().unwrap().to_owned();
    assert_ok(&client(&home, &format!("context remove {name}"), &[], ""));
    let gone = failure(&client(&home, "whoami", &[], ""));
    assert!(gone.contains("cpctl login"), "{gone}");
    let _ = std::fs::remove_dir_all(&home);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_environment_names_a_server_and_token_without_any_file() {
    let db = Db::new().await;
    let server = served(&db).await;
    let home = config_home();
    let both = [
        ("CPCTL_SERVER", server.base.as_str()),
        ("CPCTL_TOKEN", server.token.as_str()),
    ];
    let me = json_of(&client(&home, "whoami -o json", &both, ""));
    assert_eq!(me["userId"], server.user.as_str());
    assert!(!contexts_file(&home).exists());
    let one = failure(&client(&home, "whoami", &both[..1], ""));
    assert!(one.contains("no context"), "{one}");

    // A token the server no longer accepts: the ApiError, one line, exit non-zero.
    let junk = [
        ("CPCTL_SERVER", server.base.as_str()),
        ("CPCTL_TOKEN", "cpat_junk"),
    ];
    let refused = failure(&client(&home, "whoami", &junk, ""));
    assert!(refused.contains("unauthenticated"), "{refused}");
    let _ = std::fs::remove_dir_all(&home);
}

#[tokio::test]
async fn a_token_goes_in_clear_only_to_loopback_and_never_in_argv() {
    let home = config_home();
    let remote = failure(&client(
        &home,
        "login --server http://example.com",
        &[],
        "cpat_x\n",
    ));
    assert!(remote.contains("https"), "{remote}");
    let argv = client(
        &home,
        "login --server https://example.com --token cpat_x",
        &[],
        "",
    );
    assert_eq!(argv.status.code(), Some(2), "{}", stderr(&argv));
    assert!(!contexts_file(&home).exists());
    let _ = std::fs::remove_dir_all(&home);
}
