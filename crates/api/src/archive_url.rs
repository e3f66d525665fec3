//! Snapshot archives named by URL, as the command line takes them (`--archive`):
//! `lodestore://host:port,host:port?factor=2` for archive nodes (`ArchiveNodes`; the factor
//! defaults to two, or one with a single node) and, with the `s3` feature,
//! `s3://bucket/prefix?endpoint=http://host:port&region=name` for S3-compatible object
//! storage (`S3Archive`; keys from `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`), and
//! `file://PATH` for a local archive in a folder of one's choosing (`FileArchive`), and, with
//! the `p2p` feature, `p2p://ID@host:port,.../namespace?replicas=N` for a DHT of archive
//! peers (`P2pArchive`). The local archive beside the store is the default and needs no URL.

use lodestore_core::{Error, Result};
use lodestore_net::archive::nodes::NODES_MAX;
use lodestore_net::archive::ArchiveNodes;
use lodestore_net::auth::Credentials;
use lodestore_snapshots::{Archive, FileArchive, FILE_SCHEME};
use std::sync::Arc;

/// The URL scheme of archive nodes.
pub const NODES_SCHEME: &str = "lodestore://";

/// The archive `url` names, reached with `credentials` (the nodes' token and TLS).
pub fn archive_from_url(url: &str, credentials: Credentials) -> Result<Arc<dyn Archive>> {
    if url.starts_with(S3_SCHEME) {
        return s3_archive(url);
    }
    if url.starts_with(P2P_SCHEME) {
        return p2p_archive(url, &credentials);
    }
    if url.starts_with(FILE_SCHEME) {
        let fs = Arc::new(lodestore_storage::RealFileSystem);
        return Ok(Arc::new(FileArchive::from_url(fs, url)?));
    }
    let (addresses, factor) = parse_nodes_url(url)?;
    Ok(Arc::new(ArchiveNodes::new(
        &addresses,
        factor,
        credentials,
    )?))
}

/// The URL scheme of archives on S3-compatible object storage.
pub const S3_SCHEME: &str = "s3://";

#[cfg(feature = "s3")]
fn s3_archive(url: &str) -> Result<Arc<dyn Archive>> {
    Ok(Arc::new(lodestore_archive_s3::S3Archive::open(url)?))
}

#[cfg(not(feature = "s3"))]
fn s3_archive(url: &str) -> Result<Arc<dyn Archive>> {
    Err(Error::Unsupported(format!(
        "archive URL {url:?}: this build has no S3 archives (the lodestore crate's `s3` \
         feature)"
    )))
}

/// The URL scheme of archives on a DHT of archive peers.
pub const P2P_SCHEME: &str = "p2p://";

/// A DHT archive; with a token in `credentials`, a private DHT whose peers hold the same.
#[cfg(feature = "p2p")]
fn p2p_archive(url: &str, credentials: &Credentials) -> Result<Arc<dyn Archive>> {
    let token = credentials.token.as_ref().map(|t| t.secret_bytes());
    Ok(Arc::new(lodestore_archive_p2p::P2pArchive::open_private(
        url, token,
    )?))
}

#[cfg(not(feature = "p2p"))]
fn p2p_archive(url: &str, _credentials: &Credentials) -> Result<Arc<dyn Archive>> {
    Err(Error::Unsupported(format!(
        "archive URL {url:?}: this build has no peer-to-peer archives (the lodestore crate's \
         `p2p` feature)"
    )))
}

/// The nodes and the replication factor of a `lodestore://` URL.
fn parse_nodes_url(url: &str) -> Result<(Vec<String>, usize)> {
    let bad = |why: String| Error::InvalidArgument(format!("archive URL {url:?}: {why}"));
    let Some(rest) = url.strip_prefix(NODES_SCHEME) else {
        return Err(bad(format!(
            "not an archive URL; archive nodes are {NODES_SCHEME}host:port,..., object \
             storage {S3_SCHEME}bucket/prefix?endpoint=..., a DHT \
             {P2P_SCHEME}ID@host:port,.../namespace, a folder {FILE_SCHEME}PATH"
        )));
    };
    let (nodes, query) = match rest.split_once('?') {
        Some((nodes, query)) => (nodes, Some(query)),
        None => (rest, None),
    };
    let addresses: Vec<String> = nodes.split(',').map(str::to_string).collect();
    if let Some(empty) = addresses.iter().find(|a| a.is_empty() || !a.contains(':')) {
        return Err(bad(format!("{empty:?} is not host:port")));
    }
    if addresses.len() > NODES_MAX {
        return Err(bad(format!(
            "{} nodes; at most {NODES_MAX}",
            addresses.len()
        )));
    }
    let mut factor = addresses.len().min(2);
    if let Some(query) = query {
        for pair in query.split('&') {
            match pair.split_once('=') {
                Some(("factor", value)) => {
                    factor = value
                        .parse()
                        .map_err(|_| bad(format!("factor {value:?} is not a whole number")))?;
                }
                _ => return Err(bad(format!("{pair:?}: the only setting is factor=N"))),
            }
        }
    }
    Ok((addresses, factor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_nodes_and_a_factor_and_bad_ones_say_why() {
        let (nodes, factor) = parse_nodes_url("lodestore://a:1,b:2,c:3").unwrap();
        assert_eq!((nodes.len(), factor), (3, 2));
        assert_eq!(parse_nodes_url("lodestore://a:1").unwrap().1, 1);
        assert_eq!(
            parse_nodes_url("lodestore://a:1,b:2,c:3?factor=3")
                .unwrap()
                .1,
            3
        );
        for (url, says) in [
            ("http://a:1", "not an archive URL"),
            ("lodestore://", "is not host:port"),
            ("lodestore://a:1,,b:2", "is not host:port"),
            ("lodestore://a:1?factor=x", "not a whole number"),
            ("lodestore://a:1?copies=2", "the only setting"),
        ] {
            let err = parse_nodes_url(url).unwrap_err();
            assert!(err.to_string().contains(says), "{url}: {err}");
        }
        // A DHT URL is parsed by the DHT archive, which names what is wrong with it.
        let dht = archive_from_url("p2p://peer", Credentials::default())
            .err()
            .unwrap();
        let says = if cfg!(feature = "p2p") {
            "ID@host:port"
        } else {
            "no peer-to-peer"
        };
        assert!(dht.to_string().contains(says), "{dht}");
        // A factor the nodes cannot meet is the archive's to refuse.
        assert!(archive_from_url("lodestore://a:1?factor=2", Credentials::default()).is_err());
    }
}
