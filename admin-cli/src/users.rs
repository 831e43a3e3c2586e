//! `cpctl users disable | enable | set-role | show` (offboarding, roles) and `cpctl tokens rotate`: each parses its
//! arguments and calls one service method (`service/offboarding.rs`, `service/rotation.rs`).

use serde_json::json;
use uuid::Uuid;

use control_plane::domain::{CorrelationId, Span, Timestamp};
use control_plane::service::{Services, UserChange};

use crate::cli::{OutputFormat, UsersCommand};
use crate::output;

pub async fn users(
    services: &Services,
    out: OutputFormat,
    cid: &CorrelationId,
    command: UsersCommand,
) -> anyhow::Result<()> {
    match command {
        UsersCommand::Disable { user, reason } => {
            let change = services.disable_user(user, reason, cid).await?;
            changed(out, &change, "disabled");
        }
        UsersCommand::Enable { user } => {
            let change = services.enable_user(user, cid).await?;
            changed(out, &change, "enabled");
        }
        UsersCommand::SetRole { user, role } => {
            let change = services.set_user_role(user, role, cid).await?;
            changed(out, &change, &format!("set to {role}"));
        }
        UsersCommand::Show { user } => {
            let overview = services.user_overview(user).await?;
            match out {
                OutputFormat::Json => println!(
                    "{}",
                    json!({
                        "user": output::Render::json(&overview.user),
                        "tokens": overview.tokens.iter().map(output::Render::json).collect::<Vec<_>>(),
                    })
                ),
                OutputFormat::Table => {
                    let u = &overview.user;
                    println!("id:           {}", u.id);
                    println!("organisation: {}", u.organisation_id);
                    println!("email:        {}", u.email);
                    println!("role:         {}", u.role);
                    println!("created:      {}", Timestamp::new(u.created_at));
                    match &u.disabled {
                        None => println!("disabled:     no"),
                        Some(d) => {
                            println!("disabled:     since {}", Timestamp::new(d.at));
                            println!("reason:       {}", d.reason.as_deref().unwrap_or("-"));
                        }
                    }
                    println!();
                    output::list(out, &overview.tokens);
                }
            }
        }
        UsersCommand::Create { .. } | UsersCommand::List { .. } => {
            unreachable!("handled in commands.rs")
        }
    }
    Ok(())
}

fn changed(out: OutputFormat, change: &UserChange, verb: &str) {
    match out {
        OutputFormat::Json => {
            let mut user = output::Render::json(&change.user);
            user["changed"] = json!(change.changed);
            println!("{user}");
        }
        OutputFormat::Table if change.changed => println!("user {} {verb}", change.user.id),
        OutputFormat::Table => println!("user {} was already {verb}", change.user.id),
    }
}

pub async fn rotate(
    services: &Services,
    out: OutputFormat,
    cid: &CorrelationId,
    token: Uuid,
    grace: Option<Span>,
) -> anyhow::Result<()> {
    let grace = grace.unwrap_or_else(|| Span::from_seconds(0).expect("0s is a span"));
    let rotated = services.rotate_token(token, grace, cid).await?;
    let until = Timestamp::new(rotated.previous_valid_until);
    match out {
        OutputFormat::Json => {
            let mut body = output::credential_json(&rotated.credential);
            body["previousValidUntil"] = json!(until);
            println!("{body}");
        }
        OutputFormat::Table => {
            output::credential(out, &rotated.credential);
            if grace.is_zero() {
                println!("previous: stopped working at {until}");
            } else {
                println!("previous: works until {until} ({grace} grace)");
            }
        }
    }
    Ok(())
}
