//! `cpctl tokens list` and `cpctl tokens show`: which tokens, and their last use.

use control_plane::domain::Span;
use control_plane::service::{Services, TokenListing};
use control_plane::storage::TokenFilter;
use uuid::Uuid;

use crate::cli::OutputFormat;
use crate::output;

/// `tokens list`: the filtering is the store's (`TokenListing`), not this command's.
pub async fn list(
    services: &Services,
    out: OutputFormat,
    user_id: Option<Uuid>,
    workspace_id: Option<Uuid>,
    expiring_within: Option<Span>,
    unused_for: Option<Span>,
) -> anyhow::Result<()> {
    let listing = TokenListing {
        user_id,
        workspace_id,
        expiring_within,
        unused_for,
    };
    output::list(out, &services.list_tokens_where(&listing).await?);
    Ok(())
}

/// `tokens show`: one token; in a table, its last use's user agent on a line of its own.
pub async fn show(services: &Services, out: OutputFormat, id: Uuid) -> anyhow::Result<()> {
    let filter = TokenFilter {
        token_id: Some(id),
        ..TokenFilter::default()
    };
    let token = services.list_tokens(&filter).await?.into_iter().next();
    let token = token.ok_or_else(|| anyhow::anyhow!("no such token"))?;
    output::show(out, &token);
    if out == OutputFormat::Table
        && let Some(agent) = token.last_use.as_ref().and_then(|u| u.user_agent.as_ref())
    {
        println!("last user agent: {agent}");
    }
    Ok(())
}
