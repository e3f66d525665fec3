//! `p2p://ID@host:port,ID@host:port/namespace?replicas=N`: where a DHT archive is. The peers
//! listed are where a reader joins the DHT (any that answer will do; the DHT tells it the
//! rest); their ids are the peers' public keys, so a reader talks only to the peers it named
//! or was led to by them, each authenticated by its key. The namespace keeps the pages of one
//! store apart from another's in a shared DHT; `replicas` is how many peers hold each page.

use libp2p::{Multiaddr, PeerId};
use lodestore_core::{Error, Result};
use std::net::SocketAddr;

/// The URL scheme of DHT archives.
pub const P2P_SCHEME: &str = "p2p://";
/// Most peers a URL may list.
pub const MAX_URL_PEERS: usize = 64;
/// Most replicas of a page.
pub const MAX_REPLICAS: usize = 16;

/// A peer: its id and where it listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerAddr {
    pub id: PeerId,
    pub addr: SocketAddr,
}

impl PeerAddr {
    /// `ID@host:port`.
    pub fn parse(text: &str) -> std::result::Result<PeerAddr, String> {
        let (id, addr) = text
            .split_once('@')
            .ok_or_else(|| format!("peer {text:?}: want ID@host:port"))?;
        let id = id
            .parse()
            .map_err(|e| format!("peer {text:?}: id {id:?}: {e}"))?;
        let addr = addr
            .parse()
            .map_err(|e| format!("peer {text:?}: address {addr:?}: {e}"))?;
        Ok(PeerAddr { id, addr })
    }

    pub fn multiaddr(&self) -> Multiaddr {
        tcp_multiaddr(self.addr)
    }
}

impl std::fmt::Display for PeerAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.id, self.addr)
    }
}

/// `/ip4/A/tcp/P` (or `/ip6/...`) for a socket address.
pub fn tcp_multiaddr(addr: SocketAddr) -> Multiaddr {
    let ip = match addr.ip() {
        std::net::IpAddr::V4(ip) => libp2p::multiaddr::Protocol::Ip4(ip),
        std::net::IpAddr::V6(ip) => libp2p::multiaddr::Protocol::Ip6(ip),
    };
    Multiaddr::empty()
        .with(ip)
        .with(libp2p::multiaddr::Protocol::Tcp(addr.port()))
}

/// A parsed DHT archive URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct P2pUrl {
    pub peers: Vec<PeerAddr>,
    pub namespace: String,
    pub replicas: usize,
}

impl P2pUrl {
    pub fn parse(url: &str) -> Result<P2pUrl> {
        let bad = |why: String| Error::InvalidArgument(format!("archive URL {url:?}: {why}"));
        let rest = url.strip_prefix(P2P_SCHEME).ok_or_else(|| {
            bad(format!(
                "not a DHT URL ({P2P_SCHEME}ID@host:port,.../namespace?replicas=N)"
            ))
        })?;
        let (rest, query) = match rest.split_once('?') {
            Some((rest, query)) => (rest, Some(query)),
            None => (rest, None),
        };
        let (peers, namespace) = rest.split_once('/').unwrap_or((rest, "lodestore"));
        let peers = peers
            .split(',')
            .filter(|p| !p.is_empty())
            .map(PeerAddr::parse)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(bad)?;
        if peers.is_empty() || peers.len() > MAX_URL_PEERS {
            return Err(bad(format!("name 1 to {MAX_URL_PEERS} peers")));
        }
        let namespace_ok = (1..=64).contains(&namespace.len())
            && namespace
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !namespace_ok {
            return Err(bad(format!(
                "namespace {namespace:?}: 1 to 64 letters, digits, '-', '_' or '.'"
            )));
        }
        // As archive nodes: two copies, or one when a single peer is named.
        let mut replicas = peers.len().min(2);
        for pair in query.into_iter().flat_map(|q| q.split('&')) {
            match pair.split_once('=') {
                Some(("replicas", n)) => {
                    replicas = n
                        .parse()
                        .ok()
                        .filter(|n| (1..=MAX_REPLICAS).contains(n))
                        .ok_or_else(|| {
                            bad(format!("replicas {n:?}: a number from 1 to {MAX_REPLICAS}"))
                        })?;
                }
                _ => return Err(bad(format!("unknown parameter {pair:?} (replicas=N)"))),
            }
        }
        Ok(P2pUrl {
            peers,
            namespace: namespace.into(),
            replicas,
        })
    }

    /// The URL written back, normalised.
    pub fn location(&self) -> String {
        let peers: Vec<String> = self.peers.iter().map(|p| p.to_string()).collect();
        format!(
            "{P2P_SCHEME}{}/{}?replicas={}",
            peers.join(","),
            self.namespace,
            self.replicas
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id() -> PeerId {
        PeerId::random()
    }

    #[test]
    fn urls_parse_and_print_back() {
        let (a, b) = (id(), id());
        let text = format!("p2p://{a}@127.0.0.1:4001,{b}@127.0.0.1:4002/shop?replicas=3");
        let url = P2pUrl::parse(&text).unwrap();
        assert_eq!(url.peers.len(), 2);
        assert_eq!(url.peers[1].id, b);
        assert_eq!((url.namespace.as_str(), url.replicas), ("shop", 3));
        assert_eq!(url.location(), text);
        let one = P2pUrl::parse(&format!("p2p://{a}@127.0.0.1:4001")).unwrap();
        assert_eq!((one.namespace.as_str(), one.replicas), ("lodestore", 1));
    }

    #[test]
    fn bad_urls_are_refused_by_name() {
        let a = id();
        for (text, says) in [
            ("s3://x".to_string(), "not a DHT URL"),
            ("p2p:///ns".into(), "peers"),
            (format!("p2p://{a}@nowhere/ns"), "address"),
            ("p2p://notanid@127.0.0.1:1/ns".into(), "id"),
            (format!("p2p://{a}@127.0.0.1:1/a/b"), "namespace"),
            (format!("p2p://{a}@127.0.0.1:1/ns?replicas=0"), "replicas"),
            (
                format!("p2p://{a}@127.0.0.1:1/ns?key=x"),
                "unknown parameter",
            ),
        ] {
            let e = P2pUrl::parse(&text).unwrap_err().to_string();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
