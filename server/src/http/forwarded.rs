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
                    .map(unmapped)
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

    /// Whether the blocks together hold every IPv4 address or every IPv6 address, however they
    /// are split (`0.0.0.0/1, 128.0.0.0/1`) or overlap: then any client that reaches the server
    /// directly can name its own address. The IPv4-mapped block `::ffff:0:0/96` counts as held
    /// for IPv6, since a peer there is read as its IPv4 address.
    pub fn trusts_any_address(&self) -> bool {
        let mut v4 = Vec::new();
        let mut v6 = vec![(u128::from(MAPPED.network()), u128::from(MAPPED.broadcast()))];
        for net in &self.0 {
            match net {
                IpNet::V4(n) => v4.push((
                    u128::from(u32::from(n.network())),
                    u128::from(u32::from(n.broadcast())),
                )),
                IpNet::V6(n) => v6.push((u128::from(n.network()), u128::from(n.broadcast()))),
            }
        }
        covers(v4, u128::from(u32::MAX)) || covers(v6, u128::MAX)
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

/// The blocks as parsed (IPv4-mapped ones as IPv4), comma-separated: what a log line names.
impl std::fmt::Display for TrustedProxies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, net) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{net}")?;
        }
        Ok(())
    }
}

/// Where IPv6 writes IPv4 addresses (`::ffff:a.b.c.d`).
const MAPPED: ipnet::Ipv6Net =
    ipnet::Ipv6Net::new_assert(std::net::Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0), 96);

/// A block inside `::ffff:0:0/96` as the IPv4 block it names: peers are compared in their
/// canonical form, so `::ffff:10.0.0.0/104` must trust `10.0.0.0/8`, not nothing.
fn unmapped(net: IpNet) -> IpNet {
    match net {
        IpNet::V6(n) if n.prefix_len() >= 96 && MAPPED.contains(&n.network()) => {
            match (n.network().to_ipv4_mapped(), n.prefix_len() - 96) {
                (Some(ip), prefix) => ipnet::Ipv4Net::new(ip, prefix).map_or(net, IpNet::V4),
                (None, _) => net,
            }
        }
        other => other,
    }
}

/// Whether the inclusive ranges together hold every value from 0 to `max`: sorted by start,
/// merged, with no gap left.
fn covers(mut ranges: Vec<(u128, u128)>, max: u128) -> bool {
    ranges.sort_unstable();
    // The first value not yet covered; `None` once `max` itself is.
    let mut next = Some(0u128);
    for (start, end) in ranges {
        let Some(want) = next else { break };
        if start > want {
            return false;
        }
        if end >= want {
            next = if end >= max { None } else { Some(end + 1) };
        }
    }
    next.is_none()
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

    fn trusts_any(raw: &str) -> bool {
        TrustedProxies::parse(raw).unwrap().trusts_any_address()
    }

    #[test]
    fn every_address_is_recognised_however_the_blocks_split_it() {
        for wide in [
            "0.0.0.0/1, 128.0.0.0/1",
            "128.0.0.0/1,0.0.0.0/1",
            "0.0.0.0/2, 64.0.0.0/2, 128.0.0.0/2, 192.0.0.0/2",
            // Overlapping, out of order, nested.
            "192.0.0.0/2, 0.0.0.0/1, 10.0.0.0/8, 128.0.0.0/2, 255.255.255.255",
            "0.0.0.0/1, 127.0.0.0/8, 128.0.0.0/1",
            "::/1, 8000::/1",
            "8000::/1, ::/2, 4000::/2, 2001:db8::/32",
            // IPv4 written as IPv4-mapped IPv6 blocks.
            "::ffff:0.0.0.0/97, ::ffff:128.0.0.0/97",
            "::ffff:0:0/96",
            "::ffff:0.0.0.0/97, 128.0.0.0/1",
            // Every IPv6 address but the mapped block: its peers are read as IPv4.
            "::/1, 8000::/1, 10.0.0.1",
        ] {
            assert!(trusts_any(wide), "{wide}");
        }
        // Every IPv6 address but the mapped block, in 96 blocks.
        assert!(trusts_any(&all_but("::ffff:0:0/96")));
    }

    /// The blocks that hold every address of `net`'s family except those of `net`: at each
    /// prefix length up to `net`'s, the sibling of the block on `net`'s path.
    fn all_but(net: &str) -> String {
        let net: IpNet = net.parse().unwrap();
        let (bits, addr): (u32, u128) = match net {
            IpNet::V4(n) => (32, u128::from(u32::from(n.network()))),
            IpNet::V6(n) => (128, u128::from(n.network())),
        };
        (1..=u32::from(net.prefix_len()))
            .map(|len| {
                let flipped = addr ^ (1u128 << (bits - len));
                let kept = flipped & !((1u128 << (bits - len)) - 1);
                let kept = if bits == 32 {
                    std::net::Ipv4Addr::from(kept as u32).to_string()
                } else {
                    std::net::Ipv6Addr::from(kept).to_string()
                };
                format!("{kept}/{len}")
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    #[test]
    fn a_set_that_misses_one_address_is_not_every_address() {
        for narrow in [
            "0.0.0.0/1",
            "0.0.0.0/1, 128.0.0.0/2",
            // A gap in the middle.
            "0.0.0.0/2, 128.0.0.0/1, 64.0.0.0/3, 96.0.0.0/4, 112.0.0.0/5, 121.0.0.0/8, \
             122.0.0.0/7, 124.0.0.0/6",
            "::/1",
            // Every IPv4-mapped address is not every IPv6 one, nor every IPv6 address every
            // IPv4 one.
            "::ffff:0.0.0.0/97, ::/1",
            "10.0.0.0/8, fd00::/8",
        ] {
            assert!(!trusts_any(narrow), "{narrow}");
        }
        for missing in [
            "255.255.255.255/32",
            "0.0.0.0/32",
            "10.20.30.40/32",
            "2001:db8::1/128",
        ] {
            let set = all_but(missing);
            assert!(!trusts_any(&set), "{set}");
            // The one address added back: every address again.
            let whole = format!("{set},{}", missing.split('/').next().unwrap());
            assert!(trusts_any(&whole), "{whole}");
        }
    }

    #[test]
    fn a_mapped_block_trusts_the_ipv4_peers_it_names() {
        let trusted = TrustedProxies::parse("::ffff:10.0.0.0/104, ::ffff:192.0.2.7").unwrap();
        assert_eq!(
            trusted,
            TrustedProxies::parse("10.0.0.0/8, 192.0.2.7").unwrap()
        );
        assert!(trusted.trusts(ip("10.1.2.3")));
        assert!(trusted.trusts(ip("::ffff:10.1.2.3")));
        assert!(!trusted.trusts(ip("11.0.0.1")));
    }
}
