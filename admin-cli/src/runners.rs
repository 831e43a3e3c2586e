//! `cpctl runners`: registering runners, their keys, delivery URLs and webhook secrets over the
//! admin API (the rules, the egress rule for URLs included, are the server's); signing a report
//! as a runner and serving the example runner stay local (the runner's key, no server call).

use anyhow::Context;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use clap::Subcommand;
use serde_json::{Value, json};
use uuid::Uuid;

use control_plane::domain::{RunnerSecret, parse_whpk, sign_request};

use crate::cli::OutputFormat;
use crate::output::{self, Cell, Column};
use crate::remote::Client;

#[derive(Debug, Subcommand)]
pub enum RunnersCommand {
    /// Register a runner in a pool. Prints its webhook secret (`whsec_…`) once: the runner
    /// verifies its dispatches with it. Without --public-key, the server also generates an
    /// Ed25519 pair and the private key is printed once (it is not stored).
    Register {
        /// The organisation; default: the calling token's.
        #[arg(long)]
        org: Option<Uuid>,
        #[arg(long)]
        pool: Uuid,
        #[arg(long, default_value = "runner")]
        name: String,
        /// Base64 of a 32-byte Ed25519 public key.
        #[arg(long)]
        public_key: Option<String>,
        /// Where the runner receives commands: https, or plain http to a host the server's
        /// --delivery-http-hosts lists (loopback with its CP_DEV). Without it the runner
        /// receives nothing.
        #[arg(long)]
        url: Option<String>,
    },
    /// Change where a runner receives commands (its failures so far are forgotten), or rotate
    /// its webhook secret.
    Update {
        /// The organisation; default: the calling token's.
        #[arg(long)]
        org: Option<Uuid>,
        #[arg(long)]
        runner: Uuid,
        /// The new delivery URL (the server's egress rule decides which are allowed).
        #[arg(long, required_unless_present_any = ["clear_url", "rotate_secret"])]
        url: Option<String>,
        /// Stop delivering to this runner.
        #[arg(long, conflicts_with = "url")]
        clear_url: bool,
        /// Issue a new webhook secret, printed once. Dispatches are signed with both the new
        /// and the old secret until the overlap ends, so the runner can switch in between.
        #[arg(long)]
        rotate_secret: bool,
        /// How long the old secret keeps signing after a rotation (0 to 720 hours).
        #[arg(long, default_value_t = 24, requires = "rotate_secret")]
        overlap_hours: u64,
    },
    /// A pool's runners: URL, state (enabled, held by its breaker, disabled, removed), failures
    /// in a row, last success and failure, keys.
    List {
        /// The organisation; default: the calling token's.
        #[arg(long)]
        org: Option<Uuid>,
        #[arg(long)]
        pool: Uuid,
    },
    /// Stop choosing a runner for deliveries (reason `admin`), until `runners enable`.
    Disable {
        /// The organisation; default: the calling token's.
        #[arg(long)]
        org: Option<Uuid>,
        runner: Uuid,
    },
    /// Choose a disabled runner again, its failures forgotten.
    Enable {
        /// The organisation; default: the calling token's.
        #[arg(long)]
        org: Option<Uuid>,
        runner: Uuid,
    },
    /// Remove a runner for good: its keys are revoked (its signed reports are refused), and its
    /// pending deliveries go to another runner of the pool (or wait for one).
    Remove {
        /// The organisation; default: the calling token's.
        #[arg(long)]
        org: Option<Uuid>,
        runner: Uuid,
    },
    /// A runner's keys: add one for rotation, revoke an old one.
    #[command(subcommand)]
    Keys(KeysCommand),
    /// Print the headers (or a curl command) of a signed delivery status report.
    Sign {
        #[arg(long)]
        runner: Uuid,
        #[arg(long)]
        key: Uuid,
        /// Base64 private key, as `runners register` printed it (or CP_RUNNER_PRIVATE_KEY).
        #[arg(long, env = "CP_RUNNER_PRIVATE_KEY", hide_env_values = true)]
        private_key: String,
        #[arg(long)]
        delivery: Uuid,
        /// The exact JSON body to send, such as '{"status":"received"}'.
        #[arg(long)]
        body: String,
        /// Base URL of the server, for the printed curl command.
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        url: String,
    },
    /// Run an example runner: receive signed command dispatches (Standard Webhooks) on
    /// `POST /`, verify them with the control plane's published keys, and report received,
    /// running and succeeded, echoing the command line instead of running it.
    Serve {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:9000")]
        listen: String,
        /// Base URL of the control plane: its keys and the status route.
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        control_plane: String,
        /// The runner's id, as `runners register` printed it.
        #[arg(long)]
        runner: Uuid,
        /// The id of the runner key that signs the reports.
        #[arg(long)]
        key: Uuid,
        /// Base64 private key, as `runners register` printed it (or CP_RUNNER_PRIVATE_KEY).
        #[arg(long, env = "CP_RUNNER_PRIVATE_KEY", hide_env_values = true)]
        private_key: String,
        /// The runner's webhook secret (`whsec_…`, as `runners register` printed it): dispatches
        /// verify with it, and the control plane's key set is not fetched.
        #[arg(long, env = "CP_RUNNER_WEBHOOK_SECRET", hide_env_values = true)]
        webhook_secret: Option<String>,
        /// A control-plane key (`whpk_…`, from `cpctl webhooks keys`) to trust for `v1a`
        /// signatures instead of fetching the key set; repeat it during a key rotation.
        #[arg(long)]
        control_plane_key: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    Add {
        /// The organisation; default: the calling token's.
        #[arg(long)]
        org: Option<Uuid>,
        #[arg(long)]
        runner: Uuid,
        #[arg(long)]
        public_key: Option<String>,
    },
    Revoke {
        /// The organisation; default: the calling token's.
        #[arg(long)]
        org: Option<Uuid>,
        #[arg(long)]
        runner: Uuid,
        #[arg(long)]
        key: Uuid,
    },
}

impl RunnersCommand {
    /// `sign` and `serve`: the runner's side, answered without a server or a store.
    pub fn is_local(&self) -> bool {
        matches!(self, Self::Sign { .. } | Self::Serve { .. })
    }

    /// The `--org` of a verb over HTTP.
    fn org(&self) -> Option<Uuid> {
        match self {
            Self::Register { org, .. }
            | Self::Update { org, .. }
            | Self::List { org, .. }
            | Self::Disable { org, .. }
            | Self::Enable { org, .. }
            | Self::Remove { org, .. }
            | Self::Keys(KeysCommand::Add { org, .. } | KeysCommand::Revoke { org, .. }) => *org,
            Self::Sign { .. } | Self::Serve { .. } => None,
        }
    }
}

const RUNNER: &[Column] = &[
    ("ID", "id", Cell::Text),
    ("NAME", "name", Cell::Text),
    ("URL", "deliveryUrl", Cell::Text),
    ("STATE", "shownState", Cell::Text),
    ("FAILURES", "failuresInARow", Cell::Text),
    ("LAST SUCCESS", "lastSuccessAt", Cell::Text),
    ("LAST FAILURE", "lastFailureAt", Cell::Text),
    ("KEYS", "shownKeys", Cell::Text),
];

fn decode_key(raw: &str, what: &str) -> anyhow::Result<Vec<u8>> {
    STANDARD
        .decode(raw.trim())
        .with_context(|| format!("{what} must be base64"))
}

/// `--public-key` checked here (base64) so a typo is named by its flag; the server checks the
/// rest (a 32-byte Ed25519 key).
fn public_key_field(raw: Option<String>) -> anyhow::Result<Value> {
    let Some(raw) = raw else {
        return Ok(json!({}));
    };
    decode_key(&raw, "--public-key")?;
    Ok(json!({ "publicKey": raw.trim() }))
}

/// A key as the API answered it; a generated private key is shown this once.
fn print_key(key: &Value, with_runner: bool) {
    let text = |field: &str| key[field].as_str().unwrap_or("-").to_owned();
    if with_runner {
        println!("runner:      {}", text("runnerId"));
    }
    println!("key:         {}", text("keyId"));
    if let Some(private) = key["privateKey"].as_str() {
        println!("private key: {private}");
        println!("(shown once; the server keeps only the public key)");
    }
}

/// The registration: the runner, its key and its webhook secret, once.
fn print_registered(out: OutputFormat, registration: &Value) {
    match out {
        OutputFormat::Json => println!("{registration}"),
        OutputFormat::Table => {
            print_key(registration, true);
            let secret = registration["webhookSecret"].as_str().unwrap_or("-");
            println!("webhook secret: {secret}");
            println!("(shown once; the runner verifies its dispatches with it)");
        }
    }
}

fn print_update(out: OutputFormat, shown: &Value) {
    match out {
        OutputFormat::Json => println!("{shown}"),
        OutputFormat::Table => {
            if let Some(url) = shown.get("deliveryUrl") {
                println!("{}", url.as_str().unwrap_or("(no delivery URL)"));
            }
            if let Some(secret) = shown["webhookSecret"].as_str() {
                println!("webhook secret: {secret}");
                match shown["previousSecretRetiresAt"].as_str() {
                    Some(at) => println!("(shown once; the previous secret signs until {at})"),
                    None => println!("(shown once)"),
                }
            }
        }
    }
}

/// A runner of `runners list` with what its table shows: the state with the reason a
/// disabled runner has, and its live keys among all.
fn shown_runner(runner: &Value) -> Value {
    let mut shown = runner.clone();
    let state = runner["state"].as_str().unwrap_or("-");
    shown["shownState"] = match runner["disabledReason"].as_str() {
        Some(reason) if state != "removed" => json!(format!("disabled ({reason})")),
        _ => json!(state),
    };
    let keys = runner["keys"].as_array().cloned().unwrap_or_default();
    let live = keys.iter().filter(|k| k["revokedAt"].is_null()).count();
    shown["shownKeys"] = json!(format!("{live} live / {}", keys.len()));
    shown
}

/// `disable`, `enable` or `remove` as the API answered it: the object, or one line.
fn print_change(out: OutputFormat, answer: &Value) {
    let runner = answer["runnerId"].as_str().unwrap_or("-");
    match out {
        OutputFormat::Json => println!("{answer}"),
        OutputFormat::Table if answer["state"] == "removed" => println!(
            "runner {runner} removed: {} keys revoked, {} deliveries moved to the pool's other runners",
            answer["keysRevoked"], answer["deliveriesMoved"]
        ),
        OutputFormat::Table => println!(
            "runner {runner} {}{}",
            if answer["changed"] == true {
                ""
            } else {
                "was already "
            },
            answer["state"].as_str().unwrap_or_default()
        ),
    }
}

/// The verbs over HTTP (`sign` and `serve` are answered before, locally).
pub async fn run(
    client: &Client,
    out: OutputFormat,
    command: RunnersCommand,
) -> anyhow::Result<()> {
    let base = format!(
        "/v1/organisations/{}",
        client.organisation(command.org()).await?
    );
    let runner_path = |runner: Uuid| format!("{base}/runners/{runner}");
    match command {
        RunnersCommand::Register {
            pool,
            name,
            public_key,
            url,
            ..
        } => {
            let mut body = public_key_field(public_key)?;
            body["name"] = json!(name);
            if let Some(url) = url {
                body["url"] = json!(url);
            }
            let path = format!("{base}/runner-pools/{pool}/runners");
            let answer = client.post(&path, body).await?;
            print_registered(out, &answer["registration"]);
        }
        RunnersCommand::Update {
            runner,
            url,
            clear_url,
            rotate_secret,
            overlap_hours,
            ..
        } => {
            let mut shown = json!({ "runnerId": runner });
            if url.is_some() || clear_url {
                let body = match url {
                    Some(url) => json!({ "url": url }),
                    None => json!({}),
                };
                let path = format!("{}/delivery-url", runner_path(runner));
                let answer = client.change(reqwest::Method::PUT, &path, body).await?;
                shown["deliveryUrl"] = answer["deliveryUrl"].clone();
            }
            if rotate_secret {
                let path = format!("{}/webhook-secret/rotate", runner_path(runner));
                let answer = client
                    .post(&path, json!({ "overlapHours": overlap_hours }))
                    .await?;
                shown["webhookSecret"] = answer["webhookSecret"].clone();
                shown["previousSecretRetiresAt"] = answer["previousSecretRetiresAt"].clone();
            }
            print_update(out, &shown);
        }
        RunnersCommand::List { pool, .. } => {
            let path = format!("{base}/runner-pools/{pool}/runners");
            let all = client.get_all(&path, &[]).await?;
            match out {
                OutputFormat::Json => output::rows(out, RUNNER, &all),
                OutputFormat::Table => {
                    let shown: Vec<Value> = all.iter().map(shown_runner).collect();
                    output::rows(out, RUNNER, &shown);
                }
            }
        }
        RunnersCommand::Disable { runner, .. } => {
            let path = format!("{}/disable", runner_path(runner));
            print_change(out, &client.post(&path, json!({})).await?);
        }
        RunnersCommand::Enable { runner, .. } => {
            let path = format!("{}/enable", runner_path(runner));
            print_change(out, &client.post(&path, json!({})).await?);
        }
        RunnersCommand::Remove { runner, .. } => {
            let answer = client
                .change(reqwest::Method::DELETE, &runner_path(runner), json!({}))
                .await?;
            print_change(out, &answer);
        }
        RunnersCommand::Keys(KeysCommand::Add {
            runner, public_key, ..
        }) => {
            let path = format!("{}/keys", runner_path(runner));
            let key = client.post(&path, public_key_field(public_key)?).await?;
            match out {
                OutputFormat::Json => println!("{key}"),
                OutputFormat::Table => print_key(&key, false),
            }
        }
        RunnersCommand::Keys(KeysCommand::Revoke { runner, key, .. }) => {
            let path = format!("{}/keys/{key}", runner_path(runner));
            let answer = client
                .change(reqwest::Method::DELETE, &path, json!({}))
                .await?;
            match out {
                OutputFormat::Json => println!("{answer}"),
                OutputFormat::Table => println!("revoked"),
            }
        }
        RunnersCommand::Sign { .. } | RunnersCommand::Serve { .. } => {
            unreachable!("answered locally, in commands.rs")
        }
    }
    Ok(())
}

fn private_key_of(raw: &str) -> anyhow::Result<[u8; 32]> {
    decode_key(raw, "--private-key")?
        .try_into()
        .map_err(|_| anyhow::anyhow!("--private-key must be 32 bytes"))
}

/// `cpctl runners serve`: needs no records store, only the runner's key and the server's URL.
pub async fn serve(command: RunnersCommand) -> anyhow::Result<()> {
    let RunnersCommand::Serve {
        listen,
        control_plane,
        runner,
        key,
        private_key,
        webhook_secret,
        control_plane_key,
    } = command
    else {
        return Ok(());
    };
    let webhook_secret = webhook_secret
        .map(|s| RunnerSecret::parse(&s).map_err(|e| anyhow::anyhow!("--webhook-secret: {e}")))
        .transpose()?;
    let pinned_keys = control_plane_key
        .iter()
        .map(|k| parse_whpk(k).map_err(|e| anyhow::anyhow!("--control-plane-key: {e}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let config = cpctl::runner::RunnerConfig {
        listen,
        control_plane,
        runner_id: runner,
        key_id: key,
        private_key: private_key_of(&private_key)?,
        webhook_secret,
        pinned_keys,
        dedup_capacity: cpctl::runner::DEFAULT_DEDUP_CAPACITY,
    };
    let server = cpctl::runner::RunnerServer::bind(config).await?;
    server.run_until_stopped().await?;
    Ok(())
}

/// `cpctl runners sign`: needs no records store, only the key.
pub fn sign(out: OutputFormat, command: &RunnersCommand) -> anyhow::Result<()> {
    let RunnersCommand::Sign {
        runner,
        key,
        private_key,
        delivery,
        body,
        url,
    } = command
    else {
        return Ok(());
    };
    let private = private_key_of(private_key)?;
    let path = format!("/v1/runner/webhook-deliveries/{delivery}/status");
    let nonce = Uuid::new_v4().simple().to_string();
    let headers = sign_request(
        &private,
        *runner,
        *key,
        "POST",
        &path,
        body.as_bytes(),
        chrono::Utc::now().timestamp(),
        &nonce,
    );
    match out {
        OutputFormat::Json => {
            let map: serde_json::Map<String, Value> = headers
                .pairs()
                .iter()
                .map(|(k, v)| ((*k).to_owned(), json!(v)))
                .collect();
            println!(
                "{}",
                json!({ "method": "POST", "path": path, "headers": map })
            );
        }
        OutputFormat::Table => {
            let mut line = format!(
                "curl -sS -X POST '{}{path}' -H 'content-type: application/json'",
                url.trim_end_matches('/')
            );
            for (name, value) in headers.pairs() {
                line.push_str(&format!(" -H '{name}: {value}'"));
            }
            line.push_str(&format!(" --data-raw '{}'", body.replace('\'', "'\\''")));
            println!("{line}");
        }
    }
    Ok(())
}
