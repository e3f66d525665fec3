//! An archive peer: a DHT node that holds page records on disk (`lodestore archive-peer`, and
//! the `lodestore-archive-peer` program the tests start). Its identity (an Ed25519 key) is
//! kept in its folder, so a restarted peer is the same peer and holds the same records; once
//! listening it writes `ID@host:port` to `peer.addr` in its folder and to standard output,
//! for the URLs of readers and the `--peer` lists of other peers.

use crate::node::{self, Role};
use crate::store::CopyStore;
use crate::url::{tcp_multiaddr, PeerAddr};
use clap::Args;
use libp2p::identity::Keypair;
use lodestore_core::{Error, Result};
use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The file in a peer's folder naming it (`ID@host:port`), written once it listens.
pub const ADDR_FILE: &str = "peer.addr";
/// The file holding a peer's key.
const KEY_FILE: &str = "identity.key";
/// The folder of its records.
const RECORDS_DIR: &str = "records";

/// What `lodestore archive-peer` takes.
#[derive(Args, Clone, Debug)]
pub struct PeerArgs {
    /// The peer's folder: its key and its records (created if missing).
    pub dir: PathBuf,
    /// Where to listen (port 0: any free port; `peer.addr` then names it).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// A peer to join the DHT through, as ID@host:port (repeat for several).
    #[arg(long = "peer", value_name = "ID@HOST:PORT", value_parser = parse_peer)]
    pub peers: Vec<PeerAddr>,
    /// How many peers hold each page: this peer re-sends its records to that many of the
    /// page's closest peers, which repairs replicas lost with a peer.
    #[arg(long, default_value_t = 2)]
    pub replicas: usize,
    /// A file holding the DHT's token (at least 16 bytes): only peers and stores holding it
    /// connect (a private network; stores pass it as --archive-token-file). Required to
    /// listen on an address other than loopback.
    #[arg(long)]
    pub token_file: Option<PathBuf>,
}

fn parse_peer(text: &str) -> std::result::Result<PeerAddr, String> {
    PeerAddr::parse(text)
}

/// Runs a peer until the process is stopped.
pub fn run(args: &PeerArgs) -> Result<()> {
    if !(1..=crate::url::MAX_REPLICAS).contains(&args.replicas) {
        return Err(Error::InvalidArgument(format!(
            "--replicas {}: from 1 to {}",
            args.replicas,
            crate::url::MAX_REPLICAS
        )));
    }
    let private = match &args.token_file {
        Some(path) => {
            let token = read_token(path)?;
            Some(node::swarm_key(&token).map_err(|why| {
                Error::InvalidArgument(format!("token file {}: {why}", path.display()))
            })?)
        }
        None if !args.listen.ip().is_loopback() => {
            return Err(Error::InvalidArgument(format!(
                "--listen {}: a peer reachable from other machines needs --token-file, or \
                 anyone could read and rewrite the archive",
                args.listen
            )))
        }
        None => None,
    };
    let key = identity(&args.dir)?;
    let id = key.public().to_peer_id();
    let records = args.dir.join(RECORDS_DIR);
    let store = CopyStore::open(&records).map_err(|e| Error::io(&records, "open", e))?;
    tracing::info!(%id, records = store.len(), bytes = store.bytes(), "archive peer starting");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io(&args.dir, "start the peer's runtime", e))?;
    let dir = args.dir.clone();
    runtime.block_on(async move {
        let mut swarm = node::swarm(key, Role::Peer(store), args.replicas, private)
            .map_err(|why| Error::Unsupported(format!("archive peer: {why}")))?;
        swarm
            .listen_on(tcp_multiaddr(args.listen))
            .map_err(|e| Error::Connection {
                peer: args.listen.to_string(),
                reason: format!("listen: {e}"),
            })?;
        for peer in &args.peers {
            node::add_peer(&mut swarm, peer.id, peer.multiaddr());
        }
        node::bootstrap(&mut swarm);
        // Nobody sends commands to a peer; the sender lives as long as the loop.
        let (_commands, receiver) = tokio::sync::mpsc::unbounded_channel();
        let mut written = false;
        node::run(swarm, receiver, args.replicas, |address| {
            let Some(addr) = socket_addr(address) else {
                return;
            };
            if written {
                return;
            }
            written = true;
            let line = PeerAddr { id, addr }.to_string();
            if let Err(e) = write_addr_file(&dir, &line) {
                tracing::error!(error = %e, "could not write {ADDR_FILE}");
            }
            println!("{line}");
        })
        .await;
        Ok(())
    })
}

/// A token file's bytes, without a final line break.
fn read_token(path: &Path) -> Result<Vec<u8>> {
    let mut token = fs::read(path).map_err(|e| Error::io(path, "read the token", e))?;
    while token.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        token.pop();
    }
    Ok(token)
}

/// The socket address in `/ip4/A/tcp/P`.
fn socket_addr(address: &libp2p::Multiaddr) -> Option<SocketAddr> {
    use libp2p::multiaddr::Protocol;
    let mut parts = address.iter();
    let ip: std::net::IpAddr = match parts.next()? {
        Protocol::Ip4(ip) => ip.into(),
        Protocol::Ip6(ip) => ip.into(),
        _ => return None,
    };
    match parts.next()? {
        Protocol::Tcp(port) => Some(SocketAddr::new(ip, port)),
        _ => None,
    }
}

fn write_addr_file(dir: &Path, line: &str) -> std::io::Result<()> {
    let tmp = dir.join(format!("{ADDR_FILE}.tmp"));
    fs::write(&tmp, format!("{line}\n"))?;
    fs::rename(tmp, dir.join(ADDR_FILE))
}

/// The peer's key from its folder, made on first start.
fn identity(dir: &Path) -> Result<Keypair> {
    fs::create_dir_all(dir).map_err(|e| Error::io(dir, "create", e))?;
    let path = dir.join(KEY_FILE);
    match fs::read(&path) {
        Ok(bytes) => Keypair::from_protobuf_encoding(&bytes).map_err(|e| Error::CorruptFile {
            path: path.clone(),
            reason: format!("not a peer key: {e}"),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let key = Keypair::generate_ed25519();
            let bytes = key
                .to_protobuf_encoding()
                .map_err(|e| Error::Unsupported(format!("encode the peer key: {e}")))?;
            let tmp = path.with_extension("tmp");
            write_private(&tmp, &bytes).map_err(|e| Error::io(&tmp, "write", e))?;
            fs::rename(&tmp, &path).map_err(|e| Error::io(&path, "rename", e))?;
            Ok(key)
        }
        Err(e) => Err(Error::io(&path, "read", e)),
    }
}

/// Writes a secret readable by its owner only.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// The `ID@host:port` a peer started in `dir` wrote, once it is there.
pub fn read_addr_file(dir: &Path) -> Option<PeerAddr> {
    let text = fs::read_to_string(dir.join(ADDR_FILE)).ok()?;
    PeerAddr::parse(text.trim()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_beyond_loopback_needs_a_token() {
        let dir = tempfile::tempdir().unwrap();
        let args = PeerArgs {
            dir: dir.path().to_path_buf(),
            listen: "0.0.0.0:0".parse().unwrap(),
            peers: Vec::new(),
            replicas: 2,
            token_file: None,
        };
        let e = run(&args).unwrap_err().to_string();
        assert!(e.contains("--token-file"), "{e}");
        let short = dir.path().join("token");
        fs::write(&short, "short").unwrap();
        let e = run(&PeerArgs {
            token_file: Some(short),
            ..args
        })
        .unwrap_err()
        .to_string();
        assert!(e.contains("at least 16 bytes"), "{e}");
    }

    #[test]
    fn a_peer_keeps_its_identity_and_refuses_a_damaged_key() {
        let dir = tempfile::tempdir().unwrap();
        let first = identity(dir.path()).unwrap().public().to_peer_id();
        let again = identity(dir.path()).unwrap().public().to_peer_id();
        assert_eq!(first, again);
        fs::write(dir.path().join(KEY_FILE), b"garbage").unwrap();
        let e = identity(dir.path()).unwrap_err().to_string();
        assert!(e.contains("not a peer key"), "{e}");
    }
}
