//! What the templates show: a page is the chrome, then sections of forms, facts and one
//! table each. Pages build these from API answers; the templates only lay them out.

use askama::Template;
use poem::http::StatusCode;

use super::assets::Assets;
use super::client::Failure;

pub struct NavLink {
    pub label: &'static str,
    pub href: String,
    pub current: bool,
}

#[derive(Clone)]
pub struct Choice {
    pub value: String,
    pub label: String,
    pub selected: bool,
}

impl Choice {
    pub fn new(value: impl Into<String>, label: impl Into<String>, selected: bool) -> Self {
        Self {
            value: value.into(),
            label: label.into(),
            selected,
        }
    }
}

pub struct Chrome {
    pub nav: Vec<NavLink>,
    /// An operator's choice of organisation; empty for everyone else.
    pub organisations: Vec<Choice>,
    pub here: &'static str,
    pub who: String,
    pub csrf: String,
}

pub enum FieldKind {
    Text,
    Number,
    Select(Vec<Choice>),
    Checkboxes(Vec<Choice>),
    Checkbox,
}

pub struct Field {
    pub id: String,
    pub label: String,
    pub name: &'static str,
    pub kind: FieldKind,
    pub value: String,
    pub required: bool,
}

impl Field {
    pub fn new(id: impl Into<String>, label: impl Into<String>, name: &'static str) -> Self {
        Self {
            id: id.into(),
            label: label.into(),
            name,
            kind: FieldKind::Text,
            value: String::new(),
            required: false,
        }
    }

    pub fn kind(mut self, kind: FieldKind) -> Self {
        self.kind = kind;
        self
    }

    pub fn value(mut self, value: impl Into<String>) -> Self {
        self.value = value.into();
        self
    }

    pub fn required(mut self) -> Self {
        self.required = true;
        self
    }
}

/// A form: a change (POST, with the session's CSRF value and a fresh idempotency key) or a
/// filter (GET).
pub struct Form {
    pub action: String,
    pub button: String,
    /// The accessible name of a form among many alike (a row's).
    pub label: Option<String>,
    pub get: bool,
    pub inline: bool,
    pub danger: bool,
    pub key: String,
    pub hidden: Vec<(&'static str, String)>,
    pub fields: Vec<Field>,
}

impl Form {
    pub fn post(action: impl Into<String>, button: impl Into<String>) -> Self {
        Self {
            action: action.into(),
            button: button.into(),
            label: None,
            get: false,
            inline: false,
            danger: false,
            key: uuid::Uuid::new_v4().to_string(),
            hidden: Vec::new(),
            fields: Vec::new(),
        }
    }

    pub fn get(action: impl Into<String>, button: impl Into<String>) -> Self {
        Self {
            get: true,
            inline: true,
            ..Self::post(action, button)
        }
    }

    pub fn inline(mut self) -> Self {
        self.inline = true;
        self
    }

    pub fn danger(mut self) -> Self {
        self.danger = true;
        self
    }

    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    pub fn hidden(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.hidden.push((name, value.into()));
        self
    }

    pub fn field(mut self, field: Field) -> Self {
        self.fields.push(field);
        self
    }
}

pub struct Cell {
    pub text: String,
    pub href: Option<String>,
}

impl From<String> for Cell {
    fn from(text: String) -> Self {
        Self { text, href: None }
    }
}

pub struct Row {
    pub cells: Vec<Cell>,
    pub actions: Vec<Form>,
}

pub struct Table {
    pub columns: Vec<&'static str>,
    pub rows: Vec<Row>,
    pub actions: bool,
    pub next: Option<String>,
}

impl Table {
    pub fn new(columns: Vec<&'static str>, actions: bool) -> Self {
        Self {
            columns,
            rows: Vec::new(),
            actions,
            next: None,
        }
    }
}

#[derive(Default)]
pub struct Section {
    pub heading: String,
    pub forms: Vec<Form>,
    pub facts: Vec<(String, String)>,
    pub table: Option<Table>,
    /// Its table's body is the live audit stream's.
    pub live: bool,
}

impl Section {
    pub fn new(heading: impl Into<String>) -> Self {
        Self {
            heading: heading.into(),
            ..Self::default()
        }
    }
}

pub struct Secret {
    pub label: String,
    pub value: String,
}

/// What a page handler hands back: its sections, and what else the page shows.
#[derive(Default)]
pub struct Content {
    pub sections: Vec<Section>,
    pub notice: Option<String>,
    pub secret: Option<Secret>,
    /// The audit page's stream route, which console.js reads.
    pub live: Option<String>,
}

impl Content {
    pub fn of(sections: Vec<Section>) -> Self {
        Self {
            sections,
            ..Self::default()
        }
    }
}

#[derive(Template)]
#[template(path = "console/page.html")]
pub struct Page {
    pub title: String,
    pub assets: &'static Assets,
    pub chrome: Chrome,
    pub failure: Option<Failure>,
    pub notice: Option<String>,
    pub secret: Option<Secret>,
    pub sections: Vec<Section>,
    pub live: Option<String>,
}

#[derive(Template)]
#[template(path = "console/sign_in.html")]
pub struct SignIn {
    pub title: &'static str,
    pub assets: &'static Assets,
    pub notice: Option<&'static str>,
    pub failure: Option<Failure>,
}

/// A page rendered, with its status.
pub fn html(status: StatusCode, template: &impl Template) -> poem::Response {
    match template.render() {
        Ok(body) => poem::Response::builder()
            .status(status)
            .content_type("text/html; charset=utf-8")
            .body(body),
        Err(e) => {
            tracing::error!(error = %e, "a console page did not render");
            poem::Response::builder()
                .status(StatusCode::INTERNAL_SERVER_ERROR)
                .content_type("text/html; charset=utf-8")
                .body("<!doctype html><title>Error</title><p>The page could not be rendered.</p>")
        }
    }
}
