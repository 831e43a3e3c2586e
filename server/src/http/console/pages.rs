//! Each page and each change: which operations it calls and how their answers are laid out.
//! Ids from a form or a query are parsed before they reach a path; the API decides the rest.

use std::collections::HashMap;

use poem::Request;
use poem::http::{Method, StatusCode};
use serde_json::Value;
use uuid::Uuid;

use super::client::{ApiClient, Call, Failure};
use super::session::Session;
use super::text;
use super::views::{
    Cell, Choice, Content, Field, FieldKind, Form as FormView, Row, Section, Table,
};
use crate::domain::Scope;

/// A page's or a form's query parameters.
pub struct Query(Vec<(String, String)>);

impl Query {
    pub fn of(req: &Request) -> Self {
        Self(serde_urlencoded::from_str(req.uri().query().unwrap_or_default()).unwrap_or_default())
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn uuid(&self, name: &str) -> Option<Uuid> {
        self.get(name).and_then(|v| Uuid::parse_str(v).ok())
    }
}

/// A submitted form.
pub struct Form(Vec<(String, String)>);

impl Form {
    pub fn new(pairs: Vec<(String, String)>) -> Self {
        Self(pairs)
    }

    /// The field's value; empty when absent.
    pub fn get(&self, name: &str) -> &str {
        self.0
            .iter()
            .find(|(n, _)| n == name)
            .map_or("", |(_, v)| v.as_str())
    }

    pub(super) fn all(&self, name: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .collect()
    }

    pub(super) fn field_uuid(&self, name: &str) -> Result<Uuid, Failure> {
        Uuid::parse_str(self.get(name)).map_err(|_| invalid(name, "must be an id"))
    }
}

pub(super) fn invalid(field: &str, reason: &str) -> Failure {
    Failure {
        status: StatusCode::BAD_REQUEST,
        code: "validation_failed".into(),
        message: format!("{field}: {reason}"),
        correlation_id: String::new(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageKind {
    Tokens,
    Users,
    Runners,
    Deliveries,
    Delivery,
    Policies,
    Audit,
}

impl PageKind {
    pub const NAV: [PageKind; 6] = [
        PageKind::Tokens,
        PageKind::Users,
        PageKind::Runners,
        PageKind::Deliveries,
        PageKind::Policies,
        PageKind::Audit,
    ];

    pub fn at(path: &str) -> Option<Self> {
        Some(match path {
            "/console/tokens" => Self::Tokens,
            "/console/users" => Self::Users,
            "/console/runners" => Self::Runners,
            "/console/deliveries" => Self::Deliveries,
            "/console/delivery" => Self::Delivery,
            "/console/policies" => Self::Policies,
            "/console/audit" => Self::Audit,
            _ => return None,
        })
    }

    pub fn path(self) -> &'static str {
        match self {
            Self::Tokens => "/console/tokens",
            Self::Users => "/console/users",
            Self::Runners => "/console/runners",
            Self::Deliveries => "/console/deliveries",
            Self::Delivery => "/console/delivery",
            Self::Policies => "/console/policies",
            Self::Audit => "/console/audit",
        }
    }

    pub fn title(self) -> &'static str {
        match self {
            Self::Tokens => "Tokens",
            Self::Users => "Users",
            Self::Runners => "Runners",
            Self::Deliveries => "Deliveries",
            Self::Delivery => "Delivery",
            Self::Policies => "Policies",
            Self::Audit => "Audit log",
        }
    }
}

/// The signed-in caller of one request, and the API as them.
pub struct Ctx<'a> {
    client: &'a ApiClient,
    req: &'a Request,
    pub session: Session,
    caller: Value,
    pub here: PageKind,
    query: Query,
    organisations: Vec<(String, String)>,
    organisation: String,
}

impl<'a> Ctx<'a> {
    pub fn new(
        client: &'a ApiClient,
        req: &'a Request,
        session: Session,
        caller: Value,
        here: PageKind,
    ) -> Self {
        let organisation = text(&caller["organisationId"]);
        Self {
            client,
            req,
            session,
            caller,
            here,
            query: Query::of(req),
            organisations: Vec::new(),
            organisation,
        }
    }

    pub fn is_operator(&self) -> bool {
        self.caller["role"] == "operator"
    }

    fn is_member(&self) -> bool {
        self.caller["role"] == "member"
    }

    /// The organisations an operator may choose from; the chosen one (`org`) if listed.
    pub fn set_organisations(&mut self, page: &Value) {
        self.organisations = items(page)
            .iter()
            .map(|o| (text(&o["id"]), text(&o["name"])))
            .collect();
        if let Some(chosen) = self.query.uuid("org").map(|u| u.to_string())
            && self.organisations.iter().any(|(id, _)| *id == chosen)
        {
            self.organisation = chosen;
        }
    }

    pub fn organisations(&self) -> &[(String, String)] {
        &self.organisations
    }

    pub fn organisation(&self) -> &str {
        &self.organisation
    }

    pub fn who(&self) -> String {
        format!(
            "signed in as {} ({}), token {}",
            text(&self.caller["userId"]),
            text(&self.caller["role"]),
            text(&self.caller["tokenId"])
        )
    }

    pub async fn get(&self, path: String) -> Result<Value, Failure> {
        self.client
            .call(self.req, self.session.token(), Call::get(path))
            .await
            .into_result()
    }

    pub(super) async fn send(
        &self,
        method: Method,
        path: String,
        body: Value,
        key: &str,
    ) -> Result<Value, Failure> {
        self.client
            .call(
                self.req,
                self.session.token(),
                Call::send(method, path, body, key),
            )
            .await
            .into_result()
    }

    pub(super) fn org_path(&self, rest: &str) -> String {
        format!("/v1/organisations/{}{rest}", self.organisation)
    }

    /// `?org=…` and the given parameters, for links and redirects within the console.
    pub(super) fn link(&self, page: &str, params: &[(&str, &str)]) -> String {
        let mut pairs = vec![("org", self.organisation.as_str())];
        pairs.extend(params.iter().filter(|(_, v)| !v.is_empty()));
        format!(
            "{page}?{}",
            serde_urlencoded::to_string(pairs).unwrap_or_default()
        )
    }
}

/// A row's cells: these fields of `value`, as text.
fn row_cells(value: &Value, keys: &[&str]) -> Vec<Cell> {
    keys.iter().map(|k| Cell::from(text(&value[*k]))).collect()
}

fn items(page: &Value) -> &[Value] {
    page["items"].as_array().map_or(&[], Vec::as_slice)
}

/// `limit` and the page's `cursor`, as the API's query.
fn paged(ctx: &Ctx<'_>, limit: u32, mut params: Vec<(&str, String)>) -> String {
    params.push(("limit", limit.to_string()));
    if let Some(cursor) = ctx.query.get("cursor") {
        params.push(("cursor", cursor.to_owned()));
    }
    serde_urlencoded::to_string(params).unwrap_or_default()
}

/// The next page's link, when the API gave a cursor.
fn next_link(ctx: &Ctx<'_>, page: &Value, here: &str, keep: &[(&str, &str)]) -> Option<String> {
    let cursor = page["nextCursor"].as_str()?;
    let mut params = keep.to_vec();
    params.push(("cursor", cursor));
    Some(ctx.link(here, &params))
}

pub async fn build(ctx: &Ctx<'_>, kind: PageKind) -> Result<Content, Failure> {
    match kind {
        PageKind::Tokens => tokens(ctx).await,
        PageKind::Users => users(ctx).await,
        PageKind::Runners => runners(ctx).await,
        PageKind::Deliveries => deliveries(ctx).await,
        PageKind::Delivery => delivery(ctx).await,
        PageKind::Policies => policies(ctx).await,
        PageKind::Audit => audit(ctx).await,
    }
}

fn back(ctx: &Ctx<'_>, form: FormView) -> FormView {
    form.hidden("org", ctx.organisation())
}

async fn tokens(ctx: &Ctx<'_>) -> Result<Content, Failure> {
    if ctx.is_member() {
        return own_tokens(ctx).await;
    }
    let view = ctx.query.get("view").unwrap_or("all");
    let mut filter = Vec::new();
    match view {
        "stale" => filter.push(("unusedForSeconds", (30 * 86_400).to_string())),
        "expiring" => filter.push(("expiringWithinSeconds", (7 * 86_400).to_string())),
        _ => {}
    }
    let page = ctx
        .get(format!(
            "{}?{}",
            ctx.org_path("/tokens"),
            paged(ctx, 50, filter)
        ))
        .await?;
    let users = ctx
        .get(format!("{}?limit=100", ctx.org_path("/users")))
        .await?;
    let workspaces = ctx
        .get(format!("{}?limit=100", ctx.org_path("/workspaces")))
        .await?;
    let email: HashMap<String, String> = items(&users)
        .iter()
        .map(|u| (text(&u["id"]), text(&u["email"])))
        .collect();

    let mut issue = Section::new("Issue a token");
    let scopes = Scope::ALL
        .iter()
        .map(|s| Choice::new(s.as_str(), s.as_str(), false))
        .collect();
    issue.forms.push(
        back(ctx, FormView::post("/console/tokens/issue", "Issue token"))
            .field(
                Field::new("issue-user", "User", "user").kind(FieldKind::Select(
                    items(&users)
                        .iter()
                        .map(|u| Choice::new(text(&u["id"]), text(&u["email"]), false))
                        .collect(),
                )),
            )
            .field(Field::new("issue-name", "Name", "name").required())
            .field(
                Field::new("issue-scopes", "Scopes", "scopes").kind(FieldKind::Checkboxes(scopes)),
            )
            .field(
                Field::new("issue-workspaces", "Workspaces", "workspaces").kind(
                    FieldKind::Checkboxes(
                        items(&workspaces)
                            .iter()
                            .map(|w| Choice::new(text(&w["id"]), text(&w["name"]), false))
                            .collect(),
                    ),
                ),
            )
            .field(
                Field::new("issue-days", "Expires in days", "days")
                    .kind(FieldKind::Number)
                    .value("30"),
            ),
    );

    let mut list = Section::new("Tokens");
    list.forms
        .push(back(ctx, FormView::get("/console/tokens", "Filter")).field(
            Field::new("view", "Show", "view").kind(FieldKind::Select(vec![
                Choice::new("all", "all tokens", view == "all"),
                Choice::new("stale", "stale: unused for 30 days", view == "stale"),
                Choice::new("expiring", "expiring within 7 days", view == "expiring"),
            ])),
        ));
    let mut table = Table::new(
        vec![
            "Name",
            "Prefix",
            "User",
            "Scopes",
            "Created",
            "Last used",
            "Expires",
            "Revoked",
        ],
        true,
    );
    for token in items(&page) {
        let id = text(&token["id"]);
        let name = text(&token["name"]);
        let user = text(&token["userId"]);
        let mut actions = Vec::new();
        if token["revokedAt"].is_null() {
            actions.push(
                back(
                    ctx,
                    FormView::post("/console/tokens/revoke", "Revoke")
                        .inline()
                        .danger(),
                )
                .label(format!("Revoke {name}"))
                .hidden("token", id.clone())
                .field(Field::new(format!("reason-{id}"), "Reason", "reason").required()),
            );
            actions.push(
                back(
                    ctx,
                    FormView::post("/console/tokens/rotate", "Rotate").inline(),
                )
                .label(format!("Rotate {name}"))
                .hidden("token", id.clone())
                .field(
                    Field::new(format!("grace-{id}"), "Grace seconds", "grace")
                        .kind(FieldKind::Number)
                        .value("3600"),
                ),
            );
        }
        table.rows.push(Row {
            cells: vec![
                name.into(),
                text(&token["prefix"]).into(),
                email.get(&user).cloned().unwrap_or(user).into(),
                text(&token["scopes"]).into(),
                text(&token["createdAt"]).into(),
                text(&token["lastUsedAt"]).into(),
                text(&token["expiresAt"]).into(),
                text(&token["revokedAt"]).into(),
            ],
            actions,
        });
    }
    table.next = next_link(ctx, &page, "/console/tokens", &[("view", view)]);
    list.table = Some(table);
    Ok(Content::of(vec![issue, list]))
}

/// A member's own tokens (self-service): `listOwnTokens`, a personal token issued with
/// `issuePersonalAccessToken`, and `revokeOwnToken`.
async fn own_tokens(ctx: &Ctx<'_>) -> Result<Content, Failure> {
    let page = ctx
        .get(format!("/v1/me/tokens?{}", paged(ctx, 50, vec![])))
        .await?;
    let mut issue = Section::new("Issue a personal token");
    let granted = |key: &str| -> Vec<String> {
        ctx.caller[key]
            .as_array()
            .map(|a| a.iter().map(text).collect())
            .unwrap_or_default()
    };
    let scopes = granted("scopes")
        .into_iter()
        .map(|s| Choice::new(s.clone(), s, false))
        .collect();
    let workspaces = granted("workspaceIds")
        .into_iter()
        .map(|w| Choice::new(w.clone(), w, false))
        .collect();
    issue.forms.push(
        FormView::post("/console/tokens/issue-own", "Issue token")
            .field(Field::new("own-name", "Name", "name").required())
            .field(Field::new("own-scopes", "Scopes", "scopes").kind(FieldKind::Checkboxes(scopes)))
            .field(
                Field::new("own-workspaces", "Workspaces", "workspaces")
                    .kind(FieldKind::Checkboxes(workspaces)),
            )
            .field(
                Field::new("own-days", "Expires in days", "days")
                    .kind(FieldKind::Number)
                    .value("30"),
            ),
    );
    let mut list = Section::new("Your tokens");
    let mut table = Table::new(
        vec![
            "Name",
            "Prefix",
            "Scopes",
            "Created",
            "Last used",
            "Expires",
            "Revoked",
        ],
        true,
    );
    let signed_in = text(&ctx.caller["tokenId"]);
    for token in items(&page) {
        let id = text(&token["id"]);
        let mut name = text(&token["name"]);
        if id == signed_in {
            name.push_str(" (this session's)");
        }
        let mut actions = Vec::new();
        if token["revokedAt"].is_null() {
            actions.push(
                FormView::post("/console/tokens/revoke-own", "Revoke")
                    .inline()
                    .danger()
                    .label(format!("Revoke {name}"))
                    .hidden("token", id.clone())
                    .field(Field::new(format!("reason-{id}"), "Reason", "reason").required()),
            );
        }
        let mut cells: Vec<Cell> = vec![name.into()];
        cells.extend(row_cells(
            token,
            &[
                "prefix",
                "scopes",
                "createdAt",
                "lastUsedAt",
                "expiresAt",
                "revokedAt",
            ],
        ));
        table.rows.push(Row { cells, actions });
    }
    table.next = next_link(ctx, &page, "/console/tokens", &[]);
    list.table = Some(table);
    Ok(Content::of(vec![issue, list]))
}

async fn users(ctx: &Ctx<'_>) -> Result<Content, Failure> {
    let page = ctx
        .get(format!(
            "{}?{}",
            ctx.org_path("/users"),
            paged(ctx, 50, vec![])
        ))
        .await?;
    let mut section = Section::new("Users");
    let mut table = Table::new(vec!["Email", "Role", "Created", "Disabled"], true);
    for user in items(&page) {
        let id = text(&user["id"]);
        let email = text(&user["email"]);
        let role = text(&user["role"]);
        let toggle = if user["disabledAt"].is_null() {
            back(
                ctx,
                FormView::post("/console/users/disable", "Disable")
                    .inline()
                    .danger(),
            )
            .label(format!("Disable {email}"))
            .hidden("user", id.clone())
            .field(Field::new(format!("why-{id}"), "Reason", "reason"))
        } else {
            back(
                ctx,
                FormView::post("/console/users/enable", "Enable").inline(),
            )
            .label(format!("Enable {email}"))
            .hidden("user", id.clone())
        };
        let roles = ["member", "admin", "operator"]
            .iter()
            .map(|r| Choice::new(*r, *r, *r == role))
            .collect();
        let set_role = back(
            ctx,
            FormView::post("/console/users/role", "Set role").inline(),
        )
        .label(format!("Role of {email}"))
        .hidden("user", id.clone())
        .field(Field::new(format!("role-{id}"), "Role", "role").kind(FieldKind::Select(roles)));
        table.rows.push(Row {
            cells: vec![
                email.into(),
                role.into(),
                text(&user["createdAt"]).into(),
                text(&user["disabledAt"]).into(),
            ],
            actions: vec![toggle, set_role],
        });
    }
    table.next = next_link(ctx, &page, "/console/users", &[]);
    section.table = Some(table);
    Ok(Content::of(vec![section]))
}

/// The workspace and runner pool a fleet page shows: the query's, or the first.
async fn fleet_choice(
    ctx: &Ctx<'_>,
    here: &str,
) -> Result<(Section, Option<String>, Option<String>), Failure> {
    let workspaces = ctx
        .get(format!("{}?limit=100", ctx.org_path("/workspaces")))
        .await?;
    let ws = ctx
        .query
        .uuid("ws")
        .map(|u| u.to_string())
        .or_else(|| items(&workspaces).first().map(|w| text(&w["id"])));
    let mut pools = Value::Null;
    if let Some(ws) = &ws {
        pools = ctx
            .get(format!(
                "{}?limit=100",
                ctx.org_path(&format!("/workspaces/{ws}/runner-pools"))
            ))
            .await?;
    }
    let pool = ctx
        .query
        .uuid("pool")
        .map(|u| u.to_string())
        .or_else(|| items(&pools).first().map(|p| text(&p["id"])));
    let mut choose = Section::new("Runner pool");
    let choices = |list: &Value, chosen: &Option<String>| {
        items(list)
            .iter()
            .map(|i| {
                let id = text(&i["id"]);
                let selected = chosen.as_deref() == Some(id.as_str());
                Choice::new(id, text(&i["name"]), selected)
            })
            .collect()
    };
    choose.forms.push(
        back(ctx, FormView::get(here, "Show"))
            .field(
                Field::new("ws", "Workspace", "ws")
                    .kind(FieldKind::Select(choices(&workspaces, &ws))),
            )
            .field(
                Field::new("pool", "Pool", "pool").kind(FieldKind::Select(choices(&pools, &pool))),
            ),
    );
    Ok((choose, ws, pool))
}

async fn runners(ctx: &Ctx<'_>) -> Result<Content, Failure> {
    let (choose, ws, pool) = fleet_choice(ctx, "/console/runners").await?;
    let mut sections = vec![choose];
    if let Some(pool) = &pool {
        let page = ctx
            .get(format!(
                "{}?{}",
                ctx.org_path(&format!("/runner-pools/{pool}/runners")),
                paged(ctx, 50, vec![])
            ))
            .await?;
        let here = ctx.link(
            "/console/runners",
            &[("ws", ws.as_deref().unwrap_or_default()), ("pool", pool)],
        );
        let mut section = Section::new("Runners");
        let mut table = Table::new(
            vec![
                "Name",
                "State",
                "Last success",
                "Last failure",
                "Failures in a row",
                "Failing since",
                "Delivery URL",
            ],
            true,
        );
        for runner in items(&page) {
            let id = text(&runner["id"]);
            let name = text(&runner["name"]);
            let (path, button) = if runner["disabledAt"].is_null() {
                ("/console/runners/disable", "Disable")
            } else {
                ("/console/runners/enable", "Enable")
            };
            let mut toggle = back(ctx, FormView::post(path, button).inline())
                .label(format!("{button} {name}"))
                .hidden("runner", id)
                .hidden("back", here.clone());
            if button == "Disable" {
                toggle = toggle.danger();
            }
            table.rows.push(Row {
                cells: row_cells(
                    runner,
                    &[
                        "name",
                        "state",
                        "lastSuccessAt",
                        "lastFailureAt",
                        "failuresInARow",
                        "failingSince",
                        "deliveryUrl",
                    ],
                ),
                actions: vec![toggle],
            });
        }
        table.next = next_link(
            ctx,
            &page,
            "/console/runners",
            &[("ws", ws.as_deref().unwrap_or_default()), ("pool", pool)],
        );
        section.table = Some(table);
        sections.push(section);
    }
    Ok(Content {
        sections,
        ..Content::default()
    })
}

async fn deliveries(ctx: &Ctx<'_>) -> Result<Content, Failure> {
    let (mut choose, ws, pool) = fleet_choice(ctx, "/console/deliveries").await?;
    let status = ctx.query.get("status").unwrap_or_default();
    if let Some(form) = choose.forms.first_mut() {
        let statuses = ["", "pending", "delivered", "failed"]
            .iter()
            .map(|s| Choice::new(*s, if s.is_empty() { "any" } else { s }, *s == status))
            .collect();
        form.fields
            .push(Field::new("status", "Status", "status").kind(FieldKind::Select(statuses)));
    }
    let mut sections = vec![choose];
    if let Some(pool) = &pool {
        let mut filter = Vec::new();
        if !status.is_empty() {
            filter.push(("status", status.to_owned()));
        }
        let page = ctx
            .get(format!(
                "{}?{}",
                ctx.org_path(&format!("/runner-pools/{pool}/deliveries")),
                paged(ctx, 50, filter)
            ))
            .await?;
        let mut section = Section::new("Deliveries");
        let mut table = Table::new(
            vec![
                "Delivery",
                "Status",
                "Attempts",
                "Created",
                "Updated",
                "Detail",
                "Resent as",
            ],
            true,
        );
        for delivery in items(&page) {
            let id = text(&delivery["id"]);
            let mut actions = Vec::new();
            if delivery["status"] != "delivered" {
                actions.push(
                    back(
                        ctx,
                        FormView::post("/console/deliveries/resend", "Resend").inline(),
                    )
                    .label(format!("Resend {id}"))
                    .hidden("delivery", id.clone()),
                );
            }
            let mut cells = vec![Cell {
                href: Some(ctx.link("/console/delivery", &[("id", &id)])),
                text: id,
            }];
            cells.extend(row_cells(
                delivery,
                &[
                    "status",
                    "attempts",
                    "createdAt",
                    "updatedAt",
                    "detail",
                    "resentAs",
                ],
            ));
            table.rows.push(Row { cells, actions });
        }
        table.next = next_link(
            ctx,
            &page,
            "/console/deliveries",
            &[
                ("ws", ws.as_deref().unwrap_or_default()),
                ("pool", pool),
                ("status", status),
            ],
        );
        section.table = Some(table);
        sections.push(section);
    }
    Ok(Content {
        sections,
        ..Content::default()
    })
}

async fn delivery(ctx: &Ctx<'_>) -> Result<Content, Failure> {
    let id = ctx
        .query
        .uuid("id")
        .ok_or_else(|| invalid("id", "must be a delivery id"))?;
    let found = ctx.get(ctx.org_path(&format!("/deliveries/{id}"))).await?;
    let delivery = &found["delivery"];
    let mut summary = Section::new(format!("Delivery {id}"));
    for (term, key) in [
        ("Status", "status"),
        ("Command", "commandId"),
        ("Command status", "commandStatus"),
        ("Next attempt", "nextAttemptAt"),
        ("Detail", "detail"),
    ] {
        summary.facts.push((term.into(), text(&delivery[key])));
    }
    summary.forms.push(
        back(
            ctx,
            FormView::post("/console/deliveries/resend", "Resend this delivery"),
        )
        .hidden("delivery", id.to_string()),
    );
    let mut attempts = Section::new("Attempts");
    let mut table = Table::new(
        vec![
            "#",
            "Runner",
            "URL",
            "Started",
            "Finished",
            "Status code",
            "Latency ms",
            "Error",
        ],
        false,
    );
    for attempt in delivery["attempts"]
        .as_array()
        .map_or(&[][..], Vec::as_slice)
    {
        table.rows.push(Row {
            cells: row_cells(
                attempt,
                &[
                    "number",
                    "runnerId",
                    "url",
                    "startedAt",
                    "finishedAt",
                    "statusCode",
                    "latencyMs",
                    "error",
                ],
            ),
            actions: vec![],
        });
    }
    attempts.table = Some(table);
    Ok(Content::of(vec![summary, attempts]))
}

async fn policies(ctx: &Ctx<'_>) -> Result<Content, Failure> {
    let page = ctx
        .get(format!("/v1/policies?{}", paged(ctx, 50, vec![])))
        .await?;
    let mut active = Section::new("Active");
    for kind in ["authorizer", "moderator", "shadow"] {
        let policy = &page["active"][kind];
        let shown = if policy.is_null() {
            "the built-in default".to_owned()
        } else {
            text(&policy["reference"])
        };
        active.facts.push((kind.into(), shown));
    }
    for kind in ["authorizer", "moderator"] {
        active.forms.push(
            FormView::post(
                "/console/policies/rollback",
                format!("Roll back the {kind}"),
            )
            .inline()
            .hidden("kind", kind),
        );
    }
    let mut versions = Section::new("Versions");
    let mut table = Table::new(
        vec![
            "Reference",
            "Kind",
            "Instances",
            "Size",
            "Created",
            "Digest",
        ],
        true,
    );
    for policy in items(&page) {
        let reference = text(&policy["reference"]);
        table.rows.push(Row {
            cells: row_cells(
                policy,
                &[
                    "reference",
                    "kind",
                    "instances",
                    "sizeBytes",
                    "createdAt",
                    "digest",
                ],
            ),
            actions: vec![
                FormView::post("/console/policies/activate", "Activate")
                    .inline()
                    .label(format!("Activate {reference}"))
                    .hidden("name", text(&policy["name"]))
                    .hidden("version", text(&policy["version"]))
                    .field(
                        Field::new(format!("force-{reference}"), "even over budget", "force")
                            .kind(FieldKind::Checkbox),
                    ),
            ],
        });
    }
    table.next = next_link(ctx, &page, "/console/policies", &[]);
    versions.table = Some(table);
    let decisions = ctx.get("/v1/policies/decisions?limit=20".into()).await?;
    let mut recent = Section::new("Recent decisions");
    let mut table = Table::new(
        vec![
            "When",
            "Operation",
            "Outcome",
            "Policy",
            "Latency µs",
            "Reason",
            "Correlation id",
        ],
        false,
    );
    for decision in items(&decisions) {
        table.rows.push(Row {
            cells: row_cells(
                decision,
                &[
                    "occurredAt",
                    "operation",
                    "outcome",
                    "policy",
                    "latencyMicros",
                    "reason",
                    "correlationId",
                ],
            ),
            actions: vec![],
        });
    }
    recent.table = Some(table);
    Ok(Content::of(vec![active, versions, recent]))
}

async fn audit(ctx: &Ctx<'_>) -> Result<Content, Failure> {
    let workspaces = ctx
        .get(format!("{}?limit=100", ctx.org_path("/workspaces")))
        .await?;
    let ws = ctx
        .query
        .uuid("ws")
        .map(|u| u.to_string())
        .or_else(|| items(&workspaces).first().map(|w| text(&w["id"])));
    let types = ctx.query.get("types").unwrap_or_default();
    let mut choose = Section::new("Workspace");
    choose.forms.push(
        back(ctx, FormView::get("/console/audit", "Show"))
            .field(
                Field::new("ws", "Workspace", "ws").kind(FieldKind::Select(
                    items(&workspaces)
                        .iter()
                        .map(|w| {
                            let id = text(&w["id"]);
                            let selected = ws.as_deref() == Some(id.as_str());
                            Choice::new(id, text(&w["name"]), selected)
                        })
                        .collect(),
                )),
            )
            .field(
                Field::new(
                    "types",
                    "Event types (comma-separated, * ends a prefix)",
                    "types",
                )
                .value(types),
            ),
    );
    let Some(ws) = ws else {
        return Ok(Content {
            sections: vec![choose],
            notice: Some("This organisation has no workspace yet.".into()),
            ..Content::default()
        });
    };
    let found = ctx
        .get(ctx.org_path(&format!("/workspaces/{ws}/audit/verification")))
        .await?;
    let verification = &found["verification"];
    let mut verified = Section::new("Verification");
    let intact = if verification["intact"] == true {
        "intact"
    } else {
        "BROKEN"
    };
    verified.facts.push(("Result".into(), intact.into()));
    for (term, key) in [
        ("Events verified", "verified"),
        ("Head sequence", "headSequence"),
        ("Head hash", "headHash"),
        ("Latest signed head", "signedHeadSequence"),
        ("Signed heads matched", "signedHeadsMatched"),
    ] {
        verified.facts.push((term.into(), text(&verification[key])));
    }
    if !verification["broken"].is_null() {
        verified
            .facts
            .push(("Break".into(), text(&verification["broken"]["description"])));
    }
    let mut live = Section::new("Live events");
    live.table = Some(Table::new(
        vec!["Sequence", "Occurred", "Type", "Actor", "Correlation id"],
        false,
    ));
    live.live = true;
    let mut stream = vec![("ws", ws.as_str())];
    if !types.is_empty() {
        stream.push(("types", types));
    }
    Ok(Content {
        sections: vec![choose, verified, live],
        live: Some(format!(
            "/console/audit/stream?{}",
            serde_urlencoded::to_string(stream).unwrap_or_default()
        )),
        notice: Some("New events appear below as they are written.".into()),
        ..Content::default()
    })
}
