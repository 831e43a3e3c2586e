//! `cpctl runners`: registering runners, their keys and webhook secrets, signing a report as a
//! runner, and serving the example runner.

use anyhow::Context;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use clap::Subcommand;
use serde_json::{Value, json};
use uuid::Uuid;

use std::time::Duration;

use control_plane::domain::{CorrelationId, RunnerSecret, parse_whpk, sign_request};
use control_plane::service::{RegisteredRunner, Services};

use crate::cli::OutputFormat;

#[derive(Debug, Subcommand)]
pub enum RunnersCommand {
    /// Register a runner in a pool. Prints its webhook secret (`whsec_…`) once: the runner
    /// verifies its dispatches with it. Without --public-key, also generates an Ed25519 pair and
    /// prints the private key once (it is not stored).
    Register {
        #[arg(long)]
        pool: Uuid,
        #[arg(long, default_value = "runner")]
        name: String,
        /// Base64 of a 32-byte Ed25519 public key.
        #[arg(long)]
        public_key: Option<String>,
        /// Where the runner receives commands: https, or plain http to a host listed in
        /// --delivery-http-hosts / CP_DELIVERY_HTTP_HOSTS (none by default; loopback with
        /// CP_DEV). Without it the runner receives nothing.
        #[arg(long)]
        url: Option<String>,
    },
    /// Change where a runner receives commands (its failures so far are forgotten), or rotate
    /// its webhook secret.
    Update {
        #[arg(long)]
        runner: Uuid,
        /// The new delivery URL.
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
        #[arg(long)]
        pool: Uuid,
    },
    /// Stop choosing a runner for deliveries (reason `admin`), until `runners enable`.
    Disable { runner: Uuid },
    /// Choose a disabled runner again, its failures forgotten.
    Enable { runner: Uuid },
    /// Remove a runner for good: its keys are revoked (its signed reports are refused), and its
    /// pending deliveries go to another runner of the pool (or wait for one).
    Remove { runner: Uuid },
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
        #[arg(long)]
        runner: Uuid,
        #[arg(long)]
        public_key: Option<String>,
    },
    Revoke {
        #[arg(long)]
        runner: Uuid,
        #[arg(long)]
        key: Uuid,
    },
}

fn decode_key(raw: &str, what: &str) -> anyhow::Result<Vec<u8>> {
    STANDARD
        .decode(raw.trim())
        .with_context(|| format!("{what} must be base64"))
}

fn print_key(out: OutputFormat, runner: Option<Uuid>, key_id: Uuid, private: Option<[u8; 32]>) {
    let private = private.map(|k| STANDARD.encode(k));
    match out {
        OutputFormat::Json => {
            let mut v = json!({ "keyId": key_id, "privateKey": private });
            if let Some(runner) = runner {
                v["runnerId"] = json!(runner);
            }
            println!("{v}");
        }
        OutputFormat::Table => {
            if let Some(runner) = runner {
                println!("runner:      {runner}");
            }
            println!("key:         {key_id}");
            if let Some(private) = private {
                println!("private key: {private}");
                println!("(shown once; the server keeps only the public key)");
            }
        }
    }
}

/// The registered runner: its key (as `keys add` prints one) and its webhook secret, once.
fn print_registered(out: OutputFormat, done: &RegisteredRunner) {
    let secret = done.webhook_secret.whsec();
    match out {
        OutputFormat::Json => {
            let private = done.private_key.map(|k| STANDARD.encode(k));
            println!(
                "{}",
                json!({
                    "runnerId": done.runner.id,
                    "keyId": done.key_id,
                    "privateKey": private,
                    "webhookSecret": secret,
                })
            );
        }
        OutputFormat::Table => {
            print_key(out, Some(done.runner.id), done.key_id, done.private_key);
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

pub async fn runners(
    services: &Services,
    out: OutputFormat,
    cid: &CorrelationId,
    command: RunnersCommand,
) -> anyhow::Result<()> {
    match command {
        RunnersCommand::List { pool } => crate::fleet::list_runners(services, out, pool).await?,
        RunnersCommand::Disable { runner } => {
            crate::fleet::change_runner(services, out, cid, runner, "disable").await?
        }
        RunnersCommand::Enable { runner } => {
            crate::fleet::change_runner(services, out, cid, runner, "enable").await?
        }
        RunnersCommand::Remove { runner } => {
            crate::fleet::change_runner(services, out, cid, runner, "remove").await?
        }
        RunnersCommand::Register {
            pool,
            name,
            public_key,
            url,
        } => {
            let public = public_key
                .map(|k| decode_key(&k, "--public-key"))
                .transpose()?;
            let done = services
                .register_runner(pool, &name, public.as_deref(), url.as_deref(), cid)
                .await?;
            print_registered(out, &done);
        }
        RunnersCommand::Update {
            runner,
            url,
            clear_url,
            rotate_secret,
            overlap_hours,
        } => {
            let mut shown = json!({ "runnerId": runner });
            if url.is_some() || clear_url {
                let runner = services.set_runner_url(runner, url.as_deref(), cid).await?;
                shown["deliveryUrl"] = json!(runner.delivery_url);
            }
            if rotate_secret {
                let overlap = Duration::from_secs(overlap_hours.saturating_mul(3600));
                let rotated = services.rotate_runner_secret(runner, overlap, cid).await?;
                shown["webhookSecret"] = json!(rotated.secret.whsec());
                shown["previousSecretRetiresAt"] = json!(rotated.previous_retires_at);
            }
            print_update(out, &shown);
        }
        RunnersCommand::Keys(KeysCommand::Add { runner, public_key }) => {
            let public = public_key
                .map(|k| decode_key(&k, "--public-key"))
                .transpose()?;
            let (key_id, private) = services
                .add_runner_key(runner, public.as_deref(), cid)
                .await?;
            print_key(out, None, key_id, private);
        }
        RunnersCommand::Keys(KeysCommand::Revoke { runner, key }) => {
            services.revoke_runner_key(runner, key, cid).await?;
            match out {
                OutputFormat::Json => println!("{}", json!({ "revoked": true, "keyId": key })),
                OutputFormat::Table => println!("revoked"),
            }
        }
        RunnersCommand::Sign { .. } => sign(out, &command)?,
        RunnersCommand::Serve { .. } => serve(command).await?,
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
