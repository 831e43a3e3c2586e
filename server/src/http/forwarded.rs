//! The client's address: the TCP peer, unless the peer is a proxy the operator trusts
//! (`--trusted-proxies`); then the nearest address in `X-Forwarded-For` that no trusted proxy
//! wrote, read from the right, since every proxy appends the peer it saw and only the entries a
//! trusted proxy appended can be believed. Nothing is trusted by default (docs/decisions.md,
//! "The client address behind a load balancer").

use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;

pub const FORWARDED_FOR: &str = "x-forwarded-for";

/// The proxies whose `X-Forwarded-For` names the client; none by default.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    /// Comma-separated addresses and CIDR blocks (`10.0.0.0/8, 192.0.2.7, fd00::/8`), or
    /// `none`.
    pub fn parse(raw: &str) -> Result<Self, String> {
        if raw.trim().eq_ignore_ascii_case("none") {
            return Ok(Self::default());
        }
        raw.split(',')
            .map(str::trim)
            .map(|item| {
                item.parse::<IpNet>()
                    .map(|net| net.trunc())
                    .or_else(|_| item.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| {
                        format!("expected IP addresses or CIDR blocks (or `none`), got `{item}`")
                    })
            })
            .collect::<Result<_, _>>()
            .map(Self)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// A block of every address (`0.0.0.0/0`, `::/0`): then any client that reaches the server
    /// directly can name its own address.
    pub fn trusts_any_address(&self) -> bool {
        self.0.iter().any(|net| net.prefix_len() == 0)
    }

    fn trusts(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0.iter().any(|net| net.contains(&ip))
    }

    /// The client of a request from `peer` whose `X-Forwarded-For` field lines, in order, are
    /// `lines`. A trusted hop that wrote something other than an address is the client itself:
    /// nothing left of it can be vouched for.
    pub fn client<'a>(
        &self,
        peer: IpAddr,
        lines: impl DoubleEndedIterator<Item = &'a str>,
    ) -> IpAddr {
        let mut client = peer;
        if !self.trusts(client) {
            return client;
        }
        for entry in lines.rev().flat_map(|line| line.rsplit(',')) {
            let Some(hop) = parse_hop(entry) else {
                return client;
            };
            client = hop;
            if !self.trusts(client) {
                break;
            }
        }
        client
    }
}

/// One entry: an address, with a port (`192.0.2.1:4711`, `[2001:db8::1]:4711`) or brackets as
/// some proxies write it.
fn parse_hop(entry: &str) -> Option<IpAddr> {
    let entry = entry.trim();
    entry
        .parse::<IpAddr>()
        .or_else(|_| entry.parse::<SocketAddr>().map(|s| s.ip()))
        .or_else(|_| {
            entry
                .strip_prefix('[')
                .and_then(|e| e.strip_suffix(']'))
                .unwrap_or(entry)
                .parse::<IpAddr>()
        })
        .ok()
        .map(|ip| ip.to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn client(trusted: &str, peer: &str, lines: &[&str]) -> String {
        TrustedProxies::parse(trusted)
            .unwrap()
            .client(ip(peer), lines.iter().copied())
            .to_string()
    }

    #[test]
    fn nothing_is_trusted_by_default() {
        let none = TrustedProxies::parse("none").unwrap();
        assert!(none.is_empty());
        assert_eq!(none, TrustedProxies::default());
        assert_eq!(client("none", "10.0.0.1", &["203.0.113.9"]), "10.0.0.1");
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_forwards() {
        assert_eq!(
            client("10.0.0.0/8", "198.51.100.4", &["203.0.113.9"]),
            "198.51.100.4"
        );
    }

    #[test]
    fn the_client_is_the_rightmost_address_no_trusted_proxy_wrote() {
        // The caller wrote the first two entries itself; the balancer appended the third.
        let lines = ["6.6.6.6, 10.0.0.9", "203.0.113.9"];
        assert_eq!(client("10.0.0.0/8", "10.0.0.1", &lines), "203.0.113.9");
        // Two proxies in a row: the inner hop is trusted and skipped.
        let lines = ["203.0.113.9, 10.0.0.7"];
        assert_eq!(client("10.0.0.0/8", "10.0.0.1", &lines), "203.0.113.9");
    }

    #[test]
    fn a_trusted_peer_without_the_header_is_the_client() {
        assert_eq!(client("10.0.0.1", "10.0.0.1", &[]), "10.0.0.1");
    }

    #[test]
    fn every_hop_trusted_makes_the_leftmost_the_client() {
        assert_eq!(
            client("10.0.0.0/8", "10.0.0.1", &["10.0.0.3, 10.0.0.2"]),
            "10.0.0.3"
        );
    }

    #[test]
    fn an_entry_that_is_no_address_stops_at_the_hop_that_wrote_it() {
        assert_eq!(
            client("10.0.0.0/8", "10.0.0.1", &["203.0.113.9, unknown"]),
            "10.0.0.1"
        );
        assert_eq!(
            client(
                "10.0.0.0/8",
                "10.0.0.1",
                &["203.0.113.9, garbage, 10.0.0.2"]
            ),
            "10.0.0.2"
        );
    }

    #[test]
    fn ports_brackets_and_mapped_addresses_are_read() {
        assert_eq!(
            client("10.0.0.1", "10.0.0.1", &["203.0.113.9:4711"]),
            "203.0.113.9"
        );
        assert_eq!(
            client("10.0.0.1", "10.0.0.1", &["[2001:db8::1]:4711"]),
            "2001:db8::1"
        );
        assert_eq!(
            client("10.0.0.1", "10.0.0.1", &["[2001:db8::1]"]),
            "2001:db8::1"
        );
        // A balancer listening on IPv6 sees an IPv4 peer as a mapped address.
        assert_eq!(
            client("10.0.0.0/8", "::ffff:10.0.0.1", &["::ffff:203.0.113.9"]),
            "203.0.113.9"
        );
    }

    #[test]
    fn a_list_of_addresses_and_blocks_is_parsed_and_anything_else_refused() {
        let trusted = TrustedProxies::parse(" 10.1.2.3/8, 192.0.2.7 ,fd00::/8").unwrap();
        assert!(trusted.trusts(ip("10.200.0.1")));
        assert!(trusted.trusts(ip("192.0.2.7")));
        assert!(!trusted.trusts(ip("192.0.2.8")));
        assert!(trusted.trusts(ip("fd00::1")));
        for bad in ["", "10.0.0.0/33", "proxy.example", "10.0.0.1,,10.0.0.2"] {
            assert!(TrustedProxies::parse(bad).is_err(), "{bad:?}");
        }
        assert!(!trusted.trusts_any_address());
        for wide in ["0.0.0.0/0", "10.0.0.1, ::/0"] {
            assert!(TrustedProxies::parse(wide).unwrap().trusts_any_address());
        }
    }
}
