//! Table and JSON rendering of command results.

use control_plane::domain::Timestamp;
use serde_json::{Value, json};

use control_plane::service::IssuedCredential;
use control_plane::storage::{DisagreementRecord, PolicyRecord};

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

/// How a column shows a JSON field: as text (`-` for null), as the count of an array, or as
/// text with `never` for null (a last use).
#[derive(Clone, Copy)]
pub enum Cell {
    Text,
    Count,
    Never,
}

/// A column of a table of API objects: its header, the field it shows and how.
pub type Column = (&'static str, &'static str, Cell);

/// API objects (the admin verbs' answers): the array in JSON, a table otherwise.
pub fn rows(format: OutputFormat, columns: &[Column], items: &[Value]) {
    match format {
        OutputFormat::Json => println!("{}", Value::Array(items.to_vec())),
        OutputFormat::Table => {
            let headers: Vec<&str> = columns.iter().map(|(h, _, _)| *h).collect();
            let cells: Vec<Vec<String>> = items
                .iter()
                .map(|item| {
                    columns
                        .iter()
                        .map(|(_, field, cell)| match (&item[*field], cell) {
                            (Value::Array(a), Cell::Count) => a.len().to_string(),
                            (Value::Null, Cell::Never) => "never".to_owned(),
                            (Value::Null, _) => "-".to_owned(),
                            (Value::String(s), _) => s.clone(),
                            (other, _) => other.to_string(),
                        })
                        .collect()
                })
                .collect();
            table(&headers, &cells);
        }
    }
}

/// A created API object: its id alone in a table (easy to capture in a script), the object in
/// JSON.
pub fn created_value(format: OutputFormat, item: &Value) {
    match format {
        OutputFormat::Json => println!("{item}"),
        OutputFormat::Table => println!("{}", item["id"].as_str().unwrap_or("-")),
    }
}

/// An issued credential as the API answered it; the secret is shown this once.
pub fn credential_value(format: OutputFormat, c: &Value) {
    match format {
        OutputFormat::Json => println!("{c}"),
        OutputFormat::Table => {
            let text = |key: &str| c[key].as_str().unwrap_or("-").to_owned();
            credential_lines(
                &text("id"),
                &text("prefix"),
                &text("expiresAt"),
                &text("token"),
            );
        }
    }
}

fn credential_lines(id: &str, prefix: &str, expires: &str, token: &str) {
    println!("id:       {id}");
    println!("prefix:   {prefix}");
    println!("expires:  {expires}");
    println!("token:    {token}");
    eprintln!("The token is shown only now; store it safely.");
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
        OutputFormat::Table => credential_lines(
            &c.record.id.to_string(),
            &c.prefix,
            &Timestamp::new(c.record.expires_at).to_string(),
            c.secret.expose(),
        ),
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
            "instances": self.instances.as_str(),
        })
    }
    fn headers() -> &'static [&'static str] {
        &["POLICY", "KIND", "DIGEST", "SIZE", "INSTANCES", "CREATED"]
    }
    fn row(&self) -> Vec<String> {
        vec![
            format!("{}@{}", self.name, self.version),
            self.kind.clone(),
            self.digest[..16.min(self.digest.len())].to_owned(),
            self.size.to_string(),
            self.instances.to_string(),
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
