//! Outgoing deliveries: where a runner receives them, where the control plane may send, and
//! when it tries again.

use std::fmt;
use std::time::Duration;

use rand::Rng as _;

/// A runner's delivery URL: absolute `http` or `https`, with a host, without credentials or a
/// fragment (credentials would be a secret kept in a column, printed by `cpctl` and logged with
/// every failed attempt).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryUrl(url::Url);

impl DeliveryUrl {
    pub const MAX_LEN: usize = 2048;

    pub fn parse(raw: &str) -> Result<Self, String> {
        let raw = raw.trim();
        if raw.len() > Self::MAX_LEN {
            return Err(format!("must be at most {} characters", Self::MAX_LEN));
        }
        let url = url::Url::parse(raw).map_err(|e| format!("is not an absolute URL: {e}"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err("must be an http or https URL".into());
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err("must name a host".into());
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err("must not carry credentials".into());
        }
        if url.fragment().is_some() {
            return Err("must not have a fragment".into());
        }
        Ok(Self(url))
    }

    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }

    /// Scheme, host and port: what audit events and logs name, since a path or query may carry
    /// a runner's own secret.
    pub fn origin(&self) -> String {
        self.0.origin().ascii_serialization()
    }

    pub fn is_https(&self) -> bool {
        self.0.scheme() == "https"
    }

    /// The host as written, without the brackets of an IPv6 literal.
    fn host(&self) -> String {
        let host = self.0.host_str().unwrap_or_default();
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase()
    }
}

impl fmt::Display for DeliveryUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where deliveries may go: any `https` URL, and plain `http` only to the hosts an operator
/// lists (none by default; loopback under `--dev`, for development on one machine, where the
/// traffic never leaves the host).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressPolicy {
    http_hosts: Vec<String>,
}

impl EgressPolicy {
    pub const LOOPBACK: &'static str = "localhost,127.0.0.1,::1";

    /// `hosts`: comma-separated host names or addresses; empty allows `https` only.
    pub fn new(hosts: &str) -> Self {
        Self {
            http_hosts: hosts
                .split(',')
                .map(|h| {
                    h.trim()
                        .trim_start_matches('[')
                        .trim_end_matches(']')
                        .to_ascii_lowercase()
                })
                .filter(|h| !h.is_empty())
                .collect(),
        }
    }

    /// The rule a configuration names: its explicit list when it has one (empty: https only),
    /// else loopback in development (`--dev`) and https only otherwise.
    pub fn configured(hosts: Option<&str>, dev: bool) -> Self {
        match hosts {
            Some(hosts) => Self::new(hosts),
            None if dev => Self::new(Self::LOOPBACK),
            None => Self::default(),
        }
    }

    pub fn permits(&self, url: &DeliveryUrl) -> Result<(), String> {
        let host = url.host();
        let literal = host.parse::<std::net::IpAddr>().ok();
        if literal.is_some_and(is_link_local) || METADATA_HOSTS.contains(&host.as_str()) {
            return Err(LINK_LOCAL_REFUSED.into());
        }
        if url.is_https() || self.http_hosts.contains(&host) {
            Ok(())
        } else {
            Err(format!(
                "must be https: plain http goes only to the hosts in CP_DELIVERY_HTTP_HOSTS ({})",
                if self.http_hosts.is_empty() {
                    "none: https only unless the list names hosts, or loopback under --dev"
                        .to_owned()
                } else {
                    self.http_hosts.join(", ")
                }
            ))
        }
    }
}

/// Names that reach a cloud provider's instance metadata service, whatever they resolve to.
const METADATA_HOSTS: [&str; 2] = ["metadata.google.internal", "metadata.goog"];

/// Why a link-local or metadata address is refused, at registration and at send time.
pub const LINK_LOCAL_REFUSED: &str = "must not reach a link-local or cloud metadata address \
    (169.254.0.0/16, fe80::/10: instance metadata and credentials live there)";

/// Whether `ip` is link-local: 169.254.0.0/16 (where clouds serve instance metadata and
/// credentials, 169.254.169.254) or fe80::/10, also as an IPv4-mapped IPv6 address. Refused
/// over any scheme: a runner URL must never make the control plane fetch its host's secrets.
pub fn is_link_local(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(v4) => v4.is_link_local(),
        std::net::IpAddr::V6(v6) => {
            v6.to_ipv4_mapped().is_some_and(|v4| v4.is_link_local())
                || (v6.segments()[0] & 0xffc0) == 0xfe80
        }
    }
}

/// https only.
impl Default for EgressPolicy {
    fn default() -> Self {
        Self::new("")
    }
}

/// When each attempt of a delivery is made: the first after its offset from submission, each
/// next one after its offset from the previous failure, with jitter so that deliveries failing
/// together (a runner restarting) do not come back together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetrySchedule(Vec<Duration>);

impl RetrySchedule {
    /// Svix's schedule: immediately, then 5 s, 5 min, 30 min, 2 h, 5 h and 10 h after each
    /// failure, seven attempts over about 17.5 hours. Each wait grows several-fold on the one
    /// before: exponential backoff with steps people can remember.
    pub const DEFAULT: &'static str = "0s,5s,5m,30m,2h,5h,10h";
    /// Each wait is drawn uniformly within this fraction of its nominal length.
    pub const JITTER: f64 = 0.2;
    pub const MAX_ATTEMPTS: usize = 20;

    /// Comma-separated durations such as `0s,5s,5m,2h` (units `ms`, `s`, `m`, `h`): the first,
    /// always `0s`, is the attempt at submission; each next is the wait after a failure.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let waits = raw
            .split(',')
            .map(|part| parse_duration(part.trim()))
            .collect::<Result<Vec<_>, _>>()?;
        if waits.first() != Some(&Duration::ZERO) {
            return Err("must start with 0s: the first attempt is made at submission".into());
        }
        if waits.len() > Self::MAX_ATTEMPTS {
            return Err(format!(
                "must list from 1 to {} attempts",
                Self::MAX_ATTEMPTS
            ));
        }
        Ok(Self(waits))
    }

    pub fn attempts(&self) -> usize {
        self.0.len()
    }

    /// The wait before attempt `number` (1-based) with jitter, or `None` past the last.
    pub fn wait_before(&self, number: usize) -> Option<Duration> {
        let nominal = *self.0.get(number.checked_sub(1)?)?;
        let factor = 1.0 + rand::rng().random_range(-Self::JITTER..=Self::JITTER);
        Some(nominal.mul_f64(factor))
    }
}

impl Default for RetrySchedule {
    fn default() -> Self {
        Self::parse(Self::DEFAULT).unwrap_or_else(|_| Self(vec![Duration::ZERO]))
    }
}

fn parse_duration(raw: &str) -> Result<Duration, String> {
    let invalid = || format!("{raw:?} is not a duration such as 500ms, 5s, 5m or 2h");
    let split = raw
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(invalid)?;
    let (digits, unit) = raw.split_at(split);
    let n: u64 = digits.parse().map_err(|_| invalid())?;
    let seconds = match unit {
        "ms" => return Ok(Duration::from_millis(n)),
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return Err(invalid()),
    };
    if seconds > 7 * 86_400 {
        return Err(format!("{raw:?} is longer than a week"));
    }
    Ok(Duration::from_secs(seconds))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_local_and_metadata_hosts_are_refused_over_any_scheme() {
        let open = EgressPolicy::new("169.254.169.254,metadata.google.internal,fe80::1");
        for raw in [
            "https://169.254.169.254/latest/meta-data/",
            "http://169.254.169.254/",
            "https://[fe80::1]/hooks",
            "https://[::ffff:169.254.169.254]/hooks",
            "https://metadata.google.internal/computeMetadata/v1/",
        ] {
            let url = DeliveryUrl::parse(raw).unwrap();
            assert_eq!(open.permits(&url), Err(LINK_LOCAL_REFUSED.into()), "{raw}");
        }
        let fine = DeliveryUrl::parse("https://169.255.0.1/hooks").unwrap();
        assert!(open.permits(&fine).is_ok());
    }

    #[test]
    fn urls_are_absolute_http_without_credentials() {
        assert!(DeliveryUrl::parse("https://runner.example/hooks").is_ok());
        assert!(DeliveryUrl::parse("http://127.0.0.1:9000/").is_ok());
        for bad in [
            "runner.example/hooks",
            "ftp://runner.example/",
            "https://user:pw@runner.example/",
            "https://runner.example/#x",
            "file:///etc/passwd",
        ] {
            assert!(DeliveryUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn plain_http_goes_only_to_listed_hosts() {
        let loopback = EgressPolicy::new(EgressPolicy::LOOPBACK);
        let url = |u| DeliveryUrl::parse(u).unwrap();
        assert!(loopback.permits(&url("http://127.0.0.1:9/x")).is_ok());
        assert!(loopback.permits(&url("http://[::1]:9/x")).is_ok());
        assert!(loopback.permits(&url("http://LOCALHOST:9/x")).is_ok());
        assert!(loopback.permits(&url("http://runner.example/x")).is_err());
        assert!(loopback.permits(&url("https://runner.example/x")).is_ok());
        let none = EgressPolicy::new("");
        assert!(none.permits(&url("http://127.0.0.1:9/x")).is_err());
    }

    #[test]
    fn plain_http_needs_dev_or_an_explicit_list() {
        let url = |u| DeliveryUrl::parse(u).unwrap();
        let local = url("http://127.0.0.1:9/x");
        assert!(EgressPolicy::default().permits(&local).is_err());
        assert!(
            EgressPolicy::configured(None, false)
                .permits(&local)
                .is_err()
        );
        assert!(EgressPolicy::configured(None, true).permits(&local).is_ok());
        assert!(
            EgressPolicy::configured(Some(""), true)
                .permits(&local)
                .is_err()
        );
        let listed = EgressPolicy::configured(Some("runner.internal"), false);
        assert!(listed.permits(&url("http://runner.internal/x")).is_ok());
        assert!(listed.permits(&local).is_err());
    }

    #[test]
    fn the_default_schedule_is_svix_with_bounded_jitter() {
        let schedule = RetrySchedule::default();
        assert_eq!(schedule.attempts(), 7);
        assert_eq!(schedule.wait_before(1), Some(Duration::ZERO));
        for _ in 0..100 {
            let wait = schedule.wait_before(3).unwrap();
            assert!(wait >= Duration::from_secs(240) && wait <= Duration::from_secs(360));
        }
        assert_eq!(schedule.wait_before(8), None);
        assert_eq!(schedule.wait_before(0), None);
        assert!(RetrySchedule::parse("").is_err());
        assert!(RetrySchedule::parse("5s,5s").is_err());
        assert!(RetrySchedule::parse("5x").is_err());
        assert_eq!(RetrySchedule::parse("0s,200ms").unwrap().attempts(), 2);
    }
}
