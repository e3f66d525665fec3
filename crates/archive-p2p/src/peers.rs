//! A DHT of archive peers on loopback, each a process of its own, for tests and benchmarks:
//! started one after another (each joining through the first), killed with SIGKILL, restarted
//! on the same folder and port.

use crate::peer::{read_addr_file, ADDR_FILE};
use crate::url::{PeerAddr, P2P_SCHEME};
use lodestore_core::{Error, Result};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Longest a peer may take to start listening.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);
/// Most peers one set starts.
pub const MAX_PEERS: usize = 64;

/// How to run a peer: a program and the arguments before the peer's own (the CLI's
/// `lodestore archive-peer`, or the `lodestore-archive-peer` program).
#[derive(Clone, Debug)]
pub struct PeerCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
}

impl PeerCommand {
    /// The `lodestore-archive-peer` program: `LODESTORE_ARCHIVE_PEER` if set, else beside the
    /// running program or one folder up (a test binary sits in `deps/` of the target folder
    /// cargo builds the program into), else on the `PATH`.
    pub fn find() -> Result<PeerCommand> {
        const NAME: &str = "lodestore-archive-peer";
        let from_env = std::env::var_os("LODESTORE_ARCHIVE_PEER").map(PathBuf::from);
        let exe = std::env::current_exe().ok();
        let beside = exe.iter().flat_map(|exe| {
            let dir = exe.parent().map(Path::to_path_buf);
            let up = dir.as_ref().and_then(|d| d.parent()).map(Path::to_path_buf);
            [dir, up].into_iter().flatten().map(|d| d.join(NAME))
        });
        let found = from_env
            .into_iter()
            .chain(beside)
            .find(|path| path.is_file())
            .or_else(|| {
                let status = Command::new(NAME)
                    .arg("--version")
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
                status
                    .is_ok_and(|s| s.success())
                    .then(|| PathBuf::from(NAME))
            });
        let program = found.ok_or_else(|| {
            Error::Unsupported(format!(
                "the {NAME} program was not found (cargo build -p lodestore-archive-p2p builds \
                 it; LODESTORE_ARCHIVE_PEER names it)"
            ))
        })?;
        Ok(PeerCommand {
            program,
            args: Vec::new(),
        })
    }
}

struct Running {
    dir: PathBuf,
    addr: PeerAddr,
    child: Option<Child>,
}

/// Peers as processes, killed when dropped.
pub struct PeerSet {
    command: PeerCommand,
    replicas: usize,
    /// The private DHT's token file, if it is one.
    token_file: Option<PathBuf>,
    peers: Vec<Running>,
    _root: tempfile::TempDir,
}

impl PeerSet {
    /// Starts `count` peers of an open DHT in folders of a temporary directory.
    pub fn start(command: PeerCommand, count: usize, replicas: usize) -> Result<PeerSet> {
        Self::start_private(command, count, replicas, None)
    }

    /// The same for a private DHT whose token is in `token_file` (`None`: an open one).
    pub fn start_private(
        command: PeerCommand,
        count: usize,
        replicas: usize,
        token_file: Option<PathBuf>,
    ) -> Result<PeerSet> {
        assert!((1..=MAX_PEERS).contains(&count), "1 to {MAX_PEERS} peers");
        let root =
            tempfile::tempdir().map_err(|e| Error::io("a temporary directory", "create", e))?;
        let mut set = PeerSet {
            command,
            replicas,
            token_file,
            peers: Vec::with_capacity(count),
            _root: root,
        };
        for i in 0..count {
            let dir = set._root.path().join(format!("peer-{i:02}"));
            let join: Vec<PeerAddr> = set
                .peers
                .first()
                .map(|p| p.addr.clone())
                .into_iter()
                .collect();
            let (child, addr) = set.spawn(&dir, "127.0.0.1:0", &join)?;
            set.peers.push(Running {
                dir,
                addr,
                child: Some(child),
            });
        }
        Ok(set)
    }

    fn spawn(&self, dir: &Path, listen: &str, join: &[PeerAddr]) -> Result<(Child, PeerAddr)> {
        let _ = std::fs::remove_file(dir.join(ADDR_FILE));
        let mut command = Command::new(&self.command.program);
        command
            .args(&self.command.args)
            .arg(dir)
            .args(["--listen", listen, "--replicas", &self.replicas.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        for peer in join {
            command.arg("--peer").arg(peer.to_string());
        }
        if let Some(token_file) = &self.token_file {
            command.arg("--token-file").arg(token_file);
        }
        let mut child = command
            .spawn()
            .map_err(|e| Error::io(&self.command.program, "start an archive peer", e))?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(addr) = read_addr_file(dir) {
                return Ok((child, addr));
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(Error::Connection {
                    peer: dir.display().to_string(),
                    reason: format!("the archive peer exited ({status}) before listening"),
                });
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return Err(Error::Connection {
                    peer: dir.display().to_string(),
                    reason: format!("the archive peer did not listen within {START_TIMEOUT:?}"),
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    pub fn len(&self) -> usize {
        self.peers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }

    /// The URL of an archive in `namespace` on these peers, naming `through` of them.
    pub fn url(&self, namespace: &str, through: usize) -> String {
        let named: Vec<String> = self
            .peers
            .iter()
            .take(through.max(1))
            .map(|p| p.addr.to_string())
            .collect();
        format!(
            "{P2P_SCHEME}{}/{namespace}?replicas={}",
            named.join(","),
            self.replicas
        )
    }

    /// Kills peer `i` with SIGKILL (no chance to tidy up) and waits for it to be gone.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.peers[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts peer `i` again, on its folder and port (the same peer to the others).
    pub fn restart(&mut self, i: usize) -> Result<()> {
        self.kill(i);
        let listen = self.peers[i].addr.addr.to_string();
        let join: Vec<PeerAddr> = self
            .peers
            .iter()
            .enumerate()
            .filter(|&(j, p)| j != i && p.child.is_some())
            .map(|(_, p)| p.addr.clone())
            .take(3)
            .collect();
        let dir = self.peers[i].dir.clone();
        let (child, addr) = self.spawn(&dir, &listen, &join)?;
        assert_eq!(addr.id, self.peers[i].addr.id, "a peer keeps its key");
        self.peers[i].child = Some(child);
        Ok(())
    }

    /// The files of the peers holding the record under `key`.
    pub fn record_files(&self, key: &[u8]) -> Vec<PathBuf> {
        let name = hex::encode(key);
        self.peers
            .iter()
            .map(|p| p.dir.join("records").join(&name))
            .filter(|path| path.exists())
            .collect()
    }

    /// The peer whose folder holds `file`.
    pub fn index_of_dir(&self, file: &Path) -> Option<usize> {
        self.peers.iter().position(|p| file.starts_with(&p.dir))
    }

    /// Bytes of page records held by each peer's folder.
    pub fn bytes_held(&self) -> Vec<u64> {
        self.peers
            .iter()
            .map(|p| {
                std::fs::read_dir(p.dir.join("records"))
                    .into_iter()
                    .flatten()
                    .flatten()
                    .filter_map(|e| e.metadata().ok())
                    .map(|m| m.len())
                    .sum()
            })
            .collect()
    }
}

impl Drop for PeerSet {
    fn drop(&mut self) {
        for i in 0..self.peers.len() {
            self.kill(i);
        }
    }
}
