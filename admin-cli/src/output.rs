//! Table and JSON rendering of command results.

use control_plane::domain::Timestamp;
use serde_json::{Value, json};

use control_plane::service::IssuedCredential;
use control_plane::storage::{
    DisagreementRecord, Environment, Organisation, PolicyRecord, TokenRecord, User, Workspace,
};

use crate::cli::OutputFormat;

/// Something `cpctl` can print: as JSON, or as table rows under headers.
pub trait Render {
    fn json(&self) -> Value;
    fn headers() -> &'static [&'static str];
    fn row(&self) -> Vec<String>;
}

pub fn list<T: Render>(format: OutputFormat, items: &[T]) {
    match format {
        OutputFormat::Json => {
            println!("{}", Value::Array(items.iter().map(Render::json).collect()))
        }
        OutputFormat::Table => {
            let rows: Vec<Vec<String>> = items.iter().map(Render::row).collect();
            table(T::headers(), &rows);
        }
    }
}

/// One record: the object in JSON, a one-row table otherwise.
pub fn show<T: Render>(format: OutputFormat, item: &T) {
    match format {
        OutputFormat::Json => println!("{}", item.json()),
        OutputFormat::Table => table(T::headers(), &[item.row()]),
    }
}

/// A created record: its id alone in table mode (easy to capture in a script), the record in JSON.
pub fn created<T: Render>(format: OutputFormat, item: &T, id: impl std::fmt::Display) {
    match format {
        OutputFormat::Json => println!("{}", item.json()),
        OutputFormat::Table => println!("{id}"),
    }
}

fn table(headers: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        println!("{}", padded.join("  ").trim_end());
    };
    line(headers.iter().map(|h| h.to_string()).collect());
    for row in rows {
        line(row.clone());
    }
}

impl Render for Organisation {
    fn json(&self) -> Value {
        json!({ "id": self.id, "name": self.name, "createdAt": Timestamp::new(self.created_at) })
    }
    fn headers() -> &'static [&'static str] {
        &["ID", "NAME", "CREATED"]
    }
    fn row(&self) -> Vec<String> {
        vec![
            self.id.to_string(),
            self.name.clone(),
            Timestamp::new(self.created_at).to_string(),
        ]
    }
}

impl Render for Workspace {
    fn json(&self) -> Value {
        json!({ "id": self.id, "organisationId": self.organisation_id, "name": self.name, "createdAt": Timestamp::new(self.created_at) })
    }
    fn headers() -> &'static [&'static str] {
        &["ID", "ORGANISATION", "NAME", "CREATED"]
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

impl Render for Environment {
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

impl Render for User {
    fn json(&self) -> Value {
        json!({ "id": self.id, "organisationId": self.organisation_id, "email": self.email,
                "role": self.role.as_str(), "createdAt": Timestamp::new(self.created_at),
                "disabled": self.disabled.is_some(),
                "disabledAt": self.disabled.as_ref().map(|d| Timestamp::new(d.at)),
                "disabledReason": self.disabled.as_ref().and_then(|d| d.reason.clone()) })
    }
    fn headers() -> &'static [&'static str] {
        &["ID", "ORGANISATION", "EMAIL", "ROLE", "CREATED", "DISABLED"]
    }
    fn row(&self) -> Vec<String> {
        vec![
            self.id.to_string(),
            self.organisation_id.to_string(),
            self.email.clone(),
            self.role.as_str().to_owned(),
            Timestamp::new(self.created_at).to_string(),
            self.disabled
                .as_ref()
                .map(|d| Timestamp::new(d.at).to_string())
                .unwrap_or_else(|| "-".into()),
        ]
    }
}

impl Render for TokenRecord {
    fn json(&self) -> Value {
        json!({
            "id": self.id,
            "prefix": format!("{}{}", control_plane::domain::TOKEN_PREFIX, self.public_id),
            "name": self.name,
            "userId": self.user_id,
            "organisationId": self.organisation_id,
            "scopes": self.scopes,
            "workspaceIds": self.workspace_ids,
            "environmentIds": self.environment_ids,
            "createdAt": Timestamp::new(self.created_at),
            "expiresAt": Timestamp::new(self.expires_at),
            "revokedAt": self.revoked_at.map(Timestamp::new),
            "issuedByTokenId": self.issued_by_token_id,
            "lastUsedAt": self.last_use.as_ref().map(|u| Timestamp::new(u.at)),
            "lastUsedAddress": self.last_use.as_ref().map(|u| &u.address),
            "lastUsedUserAgent": self.last_use.as_ref().and_then(|u| u.user_agent.as_ref()),
        })
    }
    fn headers() -> &'static [&'static str] {
        &[
            "ID",
            "PREFIX",
            "NAME",
            "USER",
            "WORKSPACES",
            "EXPIRES",
            "REVOKED",
            "ISSUED BY",
            "LAST USED",
            "FROM",
        ]
    }
    fn row(&self) -> Vec<String> {
        vec![
            self.id.to_string(),
            format!("{}{}", control_plane::domain::TOKEN_PREFIX, self.public_id),
            self.name.clone(),
            self.user_id.to_string(),
            self.workspace_ids.len().to_string(),
            Timestamp::new(self.expires_at).to_string(),
            self.revoked_at
                .map(|t| Timestamp::new(t).to_string())
                .unwrap_or_else(|| "-".into()),
            self.issued_by_token_id
                .map(|t| t.to_string())
                .unwrap_or_else(|| "-".into()),
            self.last_use
                .as_ref()
                .map(|u| Timestamp::new(u.at).to_string())
                .unwrap_or_else(|| "never".into()),
            self.last_use
                .as_ref()
                .map(|u| u.address.clone())
                .unwrap_or_else(|| "-".into()),
        ]
    }
}

/// The IssuedCredential of the v1 contract, field for field.
pub fn credential_json(c: &IssuedCredential) -> Value {
    json!({
        "id": c.record.id,
        "name": c.record.name,
        "prefix": c.prefix,
        "scopes": c.record.scopes,
        "organisationId": c.record.organisation_id,
        "workspaceIds": c.record.workspace_ids,
        "environmentIds": c.record.environment_ids,
        "createdAt": Timestamp::new(c.record.created_at),
        "expiresAt": Timestamp::new(c.record.expires_at),
        "token": c.secret.expose(),
    })
}

pub fn credential(format: OutputFormat, c: &IssuedCredential) {
    match format {
        OutputFormat::Json => println!("{}", credential_json(c)),
        OutputFormat::Table => {
            println!("id:       {}", c.record.id);
            println!("prefix:   {}", c.prefix);
            println!("expires:  {}", Timestamp::new(c.record.expires_at));
            println!("token:    {}", c.secret.expose());
            eprintln!("The token is shown only now; store it safely.");
        }
    }
}

impl Render for PolicyRecord {
    fn json(&self) -> Value {
        json!({
            "id": self.id,
            "name": self.name,
            "kind": self.kind,
            "version": self.version,
            "reference": format!("{}@{}", self.name, self.version),
            "digest": self.digest,
            "sizeBytes": self.size,
            "createdAt": Timestamp::new(self.created_at),
        })
    }
    fn headers() -> &'static [&'static str] {
        &["POLICY", "KIND", "DIGEST", "SIZE", "CREATED"]
    }
    fn row(&self) -> Vec<String> {
        vec![
            format!("{}@{}", self.name, self.version),
            self.kind.clone(),
            self.digest[..16.min(self.digest.len())].to_owned(),
            self.size.to_string(),
            Timestamp::new(self.created_at).to_string(),
        ]
    }
}

impl Render for DisagreementRecord {
    fn json(&self) -> Value {
        json!({
            "shadowDigest": self.shadow_digest,
            "operation": self.operation,
            "principalId": self.principal_id,
            "active": self.active_decision,
            "shadow": self.shadow_decision,
            "occurredAt": Timestamp::new(self.occurred_at),
        })
    }
    fn headers() -> &'static [&'static str] {
        &["WHEN", "OPERATION", "PRINCIPAL", "ACTIVE", "SHADOW"]
    }
    fn row(&self) -> Vec<String> {
        vec![
            Timestamp::new(self.occurred_at).to_string(),
            self.operation.clone(),
            self.principal_id.clone(),
            self.active_decision.clone(),
            self.shadow_decision.clone(),
        ]
    }
}
