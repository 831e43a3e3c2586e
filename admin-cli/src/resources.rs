//! `cpctl pools|runners|workflows|plugins|reviews`: the resources the v1 API acts on (runner pools,
//! runners and their keys, workflows, plugins and their reviews).

use anyhow::Context;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use clap::Subcommand;
use control_plane::domain::Timestamp;
use serde_json::{Value, json};
use uuid::Uuid;

use control_plane::domain::{CorrelationId, RevisionState, sign_request};
use control_plane::service::{Services, UserRef};
use control_plane::storage::{
    AttemptRecord, DeliveryReport, Plugin, Review, RunnerPool, Workflow, WorkflowRevision,
};

use crate::cli::OutputFormat;
use crate::output::{self, Render};

#[derive(Debug, Subcommand)]
pub enum PoolsCommand {
    Create {
        #[arg(long)]
        workspace: Uuid,
        name: String,
    },
    List {
        #[arg(long)]
        workspace: Option<Uuid>,
    },
}

#[derive(Debug, Subcommand)]
pub enum RunnersCommand {
    /// Register a runner in a pool. Without --public-key, generates an Ed25519 pair and prints
    /// the private key once (it is not stored).
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
    /// Change where a runner receives commands (its failures so far are forgotten).
    Update {
        #[arg(long)]
        runner: Uuid,
        /// The new delivery URL.
        #[arg(long, required_unless_present = "clear_url")]
        url: Option<String>,
        /// Stop delivering to this runner.
        #[arg(long, conflicts_with = "url")]
        clear_url: bool,
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

#[derive(Debug, Subcommand)]
pub enum WorkflowsCommand {
    Create {
        #[arg(long)]
        workspace: Uuid,
        name: String,
    },
    List {
        #[arg(long)]
        workspace: Option<Uuid>,
    },
    /// Revisions of a workflow.
    #[command(subcommand)]
    Revisions(RevisionsCommand),
}

#[derive(Debug, Subcommand)]
pub enum RevisionsCommand {
    /// A new `draft` revision, numbered one past the newest.
    Create {
        #[arg(long)]
        workflow: Uuid,
    },
    /// Approve a revision that is `pending_approval`, as an administrator of its organisation
    /// (audited as `workflow_revision.approved`).
    Approve(DecideArgs),
    /// Reject a revision that is `pending_approval`, as an administrator of its organisation
    /// (audited as `workflow_revision.rejected`).
    Reject(DecideArgs),
}

#[derive(Debug, clap::Args)]
pub struct DecideArgs {
    #[arg(long)]
    pub revision: Uuid,
    /// Why (1 to 1000 characters), kept in the audit event.
    #[arg(long)]
    pub reason: String,
    /// Who decides: a user id, or the email of a user of the revision's organisation, who must
    /// be one of its administrators, and to approve, not the user who requested the approval
    /// (unless `cpctl orgs self-approval allow`). Named, not authenticated: the event records
    /// `"via": "cpctl"`.
    #[arg(long, env = "CP_ACTOR")]
    pub actor: String,
}

#[derive(Debug, Subcommand)]
pub enum PluginsCommand {
    Create {
        /// The publishing organisation.
        #[arg(long)]
        org: Uuid,
        name: String,
    },
    List,
}

#[derive(Debug, Subcommand)]
pub enum ReviewsCommand {
    List {
        #[arg(long)]
        plugin: Uuid,
    },
    /// Restores a review hidden after reports: its reports are dismissed and the moderator
    /// decides again on its content alone (audited as `review.restored`).
    Restore {
        #[arg(long)]
        review: Uuid,
        /// Why (1 to 500 characters), kept in the audit event.
        #[arg(long)]
        reason: Option<String>,
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

pub async fn pools(
    services: &Services,
    out: OutputFormat,
    cid: &CorrelationId,
    command: PoolsCommand,
) -> anyhow::Result<()> {
    match command {
        PoolsCommand::Create { workspace, name } => {
            let pool = services.create_pool(workspace, &name, cid).await?;
            output::created(out, &pool, pool.id);
        }
        PoolsCommand::List { workspace } => {
            output::list(out, &services.list_pools(workspace).await?)
        }
    }
    Ok(())
}

pub async fn runners(
    services: &Services,
    out: OutputFormat,
    cid: &CorrelationId,
    command: RunnersCommand,
) -> anyhow::Result<()> {
    match command {
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
            print_key(out, Some(done.runner.id), done.key_id, done.private_key);
        }
        RunnersCommand::Update { runner, url, .. } => {
            let runner = services.set_runner_url(runner, url.as_deref(), cid).await?;
            match out {
                OutputFormat::Json => println!(
                    "{}",
                    json!({ "runnerId": runner.id, "deliveryUrl": runner.delivery_url })
                ),
                OutputFormat::Table => println!(
                    "{}",
                    runner
                        .delivery_url
                        .as_deref()
                        .unwrap_or("(no delivery URL)")
                ),
            }
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
    } = command
    else {
        return Ok(());
    };
    let config = cpctl::runner::RunnerConfig {
        listen,
        control_plane,
        runner_id: runner,
        key_id: key,
        private_key: private_key_of(&private_key)?,
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

pub async fn workflows(
    services: &Services,
    out: OutputFormat,
    cid: &CorrelationId,
    command: WorkflowsCommand,
) -> anyhow::Result<()> {
    match command {
        WorkflowsCommand::Create { workspace, name } => {
            let workflow = services.create_workflow(workspace, &name, cid).await?;
            output::created(out, &workflow, workflow.id);
        }
        WorkflowsCommand::List { workspace } => {
            output::list(out, &services.list_workflows(workspace).await?)
        }
        WorkflowsCommand::Revisions(RevisionsCommand::Create { workflow }) => {
            let revision = services.create_revision(workflow, cid).await?;
            output::created(out, &revision, revision.id);
        }
        WorkflowsCommand::Revisions(RevisionsCommand::Approve(args)) => {
            decide(services, out, cid, RevisionState::Approved, args).await?
        }
        WorkflowsCommand::Revisions(RevisionsCommand::Reject(args)) => {
            decide(services, out, cid, RevisionState::Rejected, args).await?
        }
    }
    Ok(())
}

async fn decide(
    services: &Services,
    out: OutputFormat,
    cid: &CorrelationId,
    to: RevisionState,
    args: DecideArgs,
) -> anyhow::Result<()> {
    let actor = UserRef::parse(&args.actor)?;
    let revision = services
        .decide_revision(args.revision, to, &actor, &args.reason, cid)
        .await?;
    match out {
        OutputFormat::Json => println!("{}", revision.json()),
        OutputFormat::Table => output::list(out, std::slice::from_ref(&revision)),
    }
    Ok(())
}

pub async fn plugins(
    services: &Services,
    out: OutputFormat,
    cid: &CorrelationId,
    command: PluginsCommand,
) -> anyhow::Result<()> {
    match command {
        PluginsCommand::Create { org, name } => {
            let plugin = services.create_plugin(org, &name, cid).await?;
            output::created(out, &plugin, plugin.id);
        }
        PluginsCommand::List => output::list(out, &services.list_plugins().await?),
    }
    Ok(())
}

pub async fn reviews(
    services: &Services,
    out: OutputFormat,
    cid: &CorrelationId,
    command: ReviewsCommand,
) -> anyhow::Result<()> {
    match command {
        ReviewsCommand::List { plugin } => output::list(out, &services.list_reviews(plugin).await?),
        ReviewsCommand::Restore { review, reason } => {
            let review = services
                .restore_review(review, reason.as_deref(), cid)
                .await?;
            match out {
                OutputFormat::Json => println!("{}", review.json()),
                OutputFormat::Table => output::list(out, std::slice::from_ref(&review)),
            }
        }
    }
    Ok(())
}

impl Render for RunnerPool {
    fn json(&self) -> Value {
        json!({ "id": self.id, "workspaceId": self.workspace_id, "name": self.name,
                "createdAt": Timestamp::new(self.created_at), "deletedAt": self.deleted_at.map(Timestamp::new) })
    }
    fn headers() -> &'static [&'static str] {
        &["ID", "WORKSPACE", "NAME", "DELETED"]
    }
    fn row(&self) -> Vec<String> {
        vec![
            self.id.to_string(),
            self.workspace_id.to_string(),
            self.name.clone(),
            self.deleted_at
                .map(|t| Timestamp::new(t).to_string())
                .unwrap_or_default(),
        ]
    }
}

impl Render for Workflow {
    fn json(&self) -> Value {
        json!({ "id": self.id, "workspaceId": self.workspace_id, "name": self.name, "createdAt": Timestamp::new(self.created_at) })
    }
    fn headers() -> &'static [&'static str] {
        &["ID", "WORKSPACE", "NAME", "CREATED"]
    }
    fn row(&self) -> Vec<String> {
        vec![
            self.id.to_string(),
            self.workspace_id.to_string(),
            self.name.clone(),
            Timestamp::new(self.created_at).to_string(),
        ]
    }
}

impl Render for WorkflowRevision {
    fn json(&self) -> Value {
        json!({ "id": self.id, "workflowId": self.workflow_id, "number": self.number,
                "state": self.state.as_str(), "createdAt": Timestamp::new(self.created_at),
                "decidedBy": self.decided_by, "decidedAt": self.decided_at.map(Timestamp::new),
                "decisionReason": self.decision_reason })
    }
    fn headers() -> &'static [&'static str] {
        &["ID", "WORKFLOW", "NUMBER", "STATE"]
    }
    fn row(&self) -> Vec<String> {
        vec![
            self.id.to_string(),
            self.workflow_id.to_string(),
            self.number.to_string(),
            self.state.as_str().to_owned(),
        ]
    }
}

impl Render for Plugin {
    fn json(&self) -> Value {
        json!({ "id": self.id, "organisationId": self.organisation_id, "name": self.name, "createdAt": Timestamp::new(self.created_at) })
    }
    fn headers() -> &'static [&'static str] {
        &["ID", "PUBLISHER", "NAME", "CREATED"]
    }
    fn row(&self) -> Vec<String> {
        vec![
            self.id.to_string(),
            self.organisation_id.to_string(),
            self.name.clone(),
            Timestamp::new(self.created_at).to_string(),
        ]
    }
}

impl Render for Review {
    fn json(&self) -> Value {
        json!({ "id": self.id, "pluginId": self.plugin_id, "authorId": self.author_id,
                "rating": self.rating, "title": self.title, "status": self.status.as_str(),
                "reasons": self.reasons, "labels": self.labels, "updatedAt": Timestamp::new(self.updated_at) })
    }
    fn headers() -> &'static [&'static str] {
        &["ID", "AUTHOR", "RATING", "STATUS", "TITLE"]
    }
    fn row(&self) -> Vec<String> {
        vec![
            self.id.to_string(),
            self.author_id.to_string(),
            self.rating.to_string(),
            self.status.as_str().to_owned(),
            self.title.clone(),
        ]
    }
}

#[derive(Debug, Subcommand)]
pub enum DeliveriesCommand {
    /// A webhook delivery: its state, its command's, when the next attempt is due, and every
    /// attempt (runner, URL, status, latency, error).
    Show { id: Uuid },
}

pub async fn deliveries(
    services: &Services,
    out: OutputFormat,
    command: DeliveriesCommand,
) -> anyhow::Result<()> {
    let DeliveriesCommand::Show { id } = command;
    let report = services.delivery_report(id).await?;
    match out {
        OutputFormat::Json => println!("{}", delivery_json(&report)),
        OutputFormat::Table => {
            println!(
                "delivery {}  {}  (command {} {})",
                report.delivery_id, report.status, report.command_id, report.command_status
            );
            if let Some(detail) = &report.detail {
                println!("detail: {detail}");
            }
            match report.next_attempt_at {
                Some(at) => println!("next attempt due: {}", Timestamp::new(at)),
                None => println!("next attempt due: none"),
            }
            println!();
            output::list(out, &report.attempts);
        }
    }
    Ok(())
}

fn delivery_json(report: &DeliveryReport) -> Value {
    json!({
        "deliveryId": report.delivery_id,
        "commandId": report.command_id,
        "workspaceId": report.workspace_id,
        "poolId": report.pool_id,
        "status": report.status.as_str(),
        "commandStatus": report.command_status.as_str(),
        "detail": report.detail,
        "nextAttemptAt": report.next_attempt_at.map(Timestamp::new),
        "attempts": report.attempts.iter().map(Render::json).collect::<Vec<_>>(),
    })
}

impl Render for AttemptRecord {
    fn json(&self) -> Value {
        json!({
            "number": self.number,
            "runnerId": self.runner_id,
            "url": self.url,
            "startedAt": Timestamp::new(self.started_at),
            "finishedAt": self.finished_at.map(Timestamp::new),
            "statusCode": self.status_code,
            "latencyMs": self.latency_ms,
            "error": self.error,
        })
    }

    fn headers() -> &'static [&'static str] {
        &["#", "RUNNER", "STARTED", "STATUS", "LATENCY", "ERROR"]
    }

    fn row(&self) -> Vec<String> {
        let status = match (self.status_code, self.finished_at) {
            (Some(code), _) => code.to_string(),
            (None, Some(_)) => "-".into(),
            (None, None) if self.error.is_some() => "abandoned".into(),
            (None, None) => "in flight".into(),
        };
        vec![
            self.number.to_string(),
            self.runner_id.to_string(),
            Timestamp::new(self.started_at).to_string(),
            status,
            self.latency_ms
                .map(|ms| format!("{ms} ms"))
                .unwrap_or_default(),
            self.error.clone().unwrap_or_default(),
        ]
    }
}
