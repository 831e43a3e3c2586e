//! A store's first start: bootstrapping a development tenant (`--dev`) or saying how to
//! bootstrap one, and the first steps printed for a new tenant (also by `cpctl bootstrap`),
//! with the addresses and commands they name.

use crate::config::{RecordsLocation, ServerConfig};
use crate::service::{Bootstrap, Services};

/// On an empty store: bootstrap a development tenant (`--dev`), returned so its first steps are
/// printed once the listener is bound (its real port known), or log the command that
/// bootstraps one.
pub(super) async fn first_start(
    config: &ServerConfig,
    services: &Services,
) -> anyhow::Result<Option<Bootstrap>> {
    if !services.list_organisations().await?.is_empty() {
        return Ok(None);
    }
    if config.dev {
        let done = services
            .bootstrap(
                crate::service::BootstrapInput {
                    organisation: "dev".into(),
                    workspace: "default".into(),
                    admin_email: "admin@localhost".into(),
                    expires_in_days: crate::domain::ExpiresInDays::default(),
                },
                &crate::domain::CorrelationId::generate(),
            )
            .await?;
        return Ok(Some(done));
    }
    tracing::warn!(
        command = %format!(
            "{}bootstrap --org ORG --workspace WORKSPACE --admin EMAIL",
            cpctl_invocation(&config.records())
        ),
        "the records store is empty: create the first organisation, workspace and admin token with this command (or restart with --dev)"
    );
    Ok(None)
}

/// `cpctl` reaching the same records store, with a trailing space. A Postgres URL may hold a
/// password: it is named, never written out.
pub fn cpctl_invocation(records: &RecordsLocation) -> String {
    match records {
        RecordsLocation::Postgres(_) => "DATABASE_URL=... cpctl ".to_owned(),
        RecordsLocation::Sqlite(path) => {
            format!("cpctl --database-url sqlite://{} ", path.display())
        }
    }
}

/// `http://HOST:PORT` for a listen address: an unspecified address (`0.0.0.0`, `::`) is
/// reached as `localhost`; anything else that is not `IP:PORT` is used as written.
pub fn base_url(listen: &str, port: Option<u16>) -> String {
    let Ok(addr) = listen.parse::<std::net::SocketAddr>() else {
        return format!("http://{listen}");
    };
    let port = port.unwrap_or(addr.port());
    match addr.ip() {
        ip if ip.is_unspecified() => format!("http://localhost:{port}"),
        std::net::IpAddr::V6(ip) => format!("http://[{ip}]:{port}"),
        std::net::IpAddr::V4(ip) => format!("http://{ip}:{port}"),
    }
}

/// What to try first with a freshly bootstrapped tenant: a ready-to-paste `curl` of its
/// activity, the documentation's address, how cpctl gets the token (the context `--dev` kept,
/// or `cpctl login`) and the `cpctl` line for a narrower token. It holds the token, so it is
/// printed on stdout by `--dev` and `cpctl bootstrap`, never logged.
pub fn first_steps(base_url: &str, done: &Bootstrap, kept_context: Option<&str>) -> String {
    let workspace = done.workspace.id;
    let cpctl = match kept_context {
        Some(name) => format!("cpctl's context {name} holds this token (`cpctl whoami`).\n"),
        None => format!(
            "Give cpctl this token (it reads it from standard input, never an argument):\n  \
             cpctl login --server {base_url}\n"
        ),
    };
    format!(
        "Read the workspace's activity with this token:\n  \
         curl -s {base_url}/v1/workspaces/{workspace}/activity -H 'Authorization: Bearer {token}'\n\
         API documentation: {base_url}/docs\n\
         Web console (sign in with this token): {base_url}/console\n\
         {cpctl}\
         A token that may only read activity, for a script or a dashboard:\n  \
         cpctl tokens issue --user {user} --name activity-reader --scope activity:read \
         --workspace {workspace}\n",
        token = done.credential.secret.expose(),
        user = done.user.id,
    )
}

/// Keeps the `--dev` token as cpctl's context `dev`, current unless another context is (a
/// developer's context for a real server is not switched away from behind their back).
/// Returns the context's name, or `None` when it could not be kept (said on stderr, without
/// the token).
pub(super) fn keep_dev_context(base_url: &str, done: &Bootstrap) -> Option<&'static str> {
    use super::cpctl_contexts::{Context, Contexts};
    const NAME: &str = "dev";
    let kept = Contexts::path().and_then(|path| {
        let mut contexts = Contexts::load(&path)?;
        contexts.contexts.insert(
            NAME.to_owned(),
            Context {
                server: base_url.to_owned(),
                token: done.credential.secret.expose().to_owned(),
                user_id: Some(done.user.id.to_string()),
                organisation_id: Some(done.organisation.id.to_string()),
                role: Some(done.user.role.as_str().to_owned()),
            },
        );
        let current = contexts
            .current
            .get_or_insert_with(|| NAME.to_owned())
            .clone();
        contexts.save(&path)?;
        Ok((path, current))
    });
    match kept {
        Ok((path, current)) if current == NAME => {
            eprintln!("cpctl context {NAME} kept in {} (current)", path.display());
            Some(NAME)
        }
        Ok((path, current)) => {
            eprintln!(
                "cpctl context {NAME} kept in {}; the current context stays {current} \
                 (`cpctl context use {NAME}` switches)",
                path.display()
            );
            Some(NAME)
        }
        Err(e) => {
            eprintln!("cpctl context {NAME} not kept: {e:#}");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::base_url;

    #[test]
    fn the_printed_url_is_one_a_client_can_reach() {
        assert_eq!(base_url("0.0.0.0:8080", None), "http://localhost:8080");
        assert_eq!(base_url("[::]:8080", Some(41000)), "http://localhost:41000");
        assert_eq!(
            base_url("127.0.0.1:0", Some(41000)),
            "http://127.0.0.1:41000"
        );
        assert_eq!(base_url("[::1]:8080", None), "http://[::1]:8080");
        assert_eq!(base_url("api.internal:80", None), "http://api.internal:80");
    }
}
