//! Real S3 protocol servers on loopback, started as processes for tests and benchmarks:
//! `s3s-fs` (a Rust server keeping objects as files; `cargo install s3s-fs --features
//! binary`) and `moto` (a Python one; `pip install 'moto[server]'`). `scripts/test-servers.sh`
//! installs both; `scripts/test.sh` does that, then runs the tests requiring them.

use lodestore_core::{Error, Result};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Longest a server may take to start listening (moto imports a great deal of Python).
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Set (to anything) to make a missing server a test failure rather than a skip.
pub const REQUIRE_ENV: &str = "LODESTORE_REQUIRE_S3_SERVERS";
/// The keys the servers are started with (loopback only; they guard nothing).
pub const ACCESS_KEY: &str = "lodestore-test";
pub const SECRET_KEY: &str = "lodestore-test-secret";

/// Which server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ServerKind {
    S3sFs,
    Moto,
}

impl ServerKind {
    pub const ALL: [ServerKind; 2] = [ServerKind::S3sFs, ServerKind::Moto];

    pub fn name(self) -> &'static str {
        match self {
            ServerKind::S3sFs => "s3s-fs",
            ServerKind::Moto => "moto",
        }
    }

    /// Whether the server is installed here.
    pub fn installed(self) -> bool {
        self.command().is_some()
    }

    /// The command that runs this server, if it is installed.
    fn command(self) -> Option<Command> {
        match self {
            ServerKind::S3sFs => {
                let from_env = std::env::var_os("LODESTORE_S3S_FS").map(PathBuf::from);
                let cargo_home = std::env::var_os("CARGO_HOME")
                    .map(PathBuf::from)
                    .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")));
                let candidates = from_env
                    .into_iter()
                    .chain(cargo_home.map(|h| h.join("bin/s3s-fs")))
                    .chain(Some(PathBuf::from("s3s-fs")));
                candidates
                    .into_iter()
                    .find(|path| runs(Command::new(path).arg("--version")))
                    .map(Command::new)
            }
            ServerKind::Moto => {
                let python = std::env::var_os("LODESTORE_PYTHON").unwrap_or("python3".into());
                runs(Command::new(&python).args(["-c", "import moto.server"])).then(|| {
                    let mut command = Command::new(python);
                    command.args(["-m", "moto.server"]);
                    command
                })
            }
        }
    }
}

fn runs(command: &mut Command) -> bool {
    command
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A server process on loopback, killed when dropped.
pub struct S3Server {
    kind: ServerKind,
    child: Child,
    port: u16,
    /// s3s-fs's root directory (buckets are its folders).
    _root: Option<tempfile::TempDir>,
}

impl S3Server {
    /// Starts `kind` on a free loopback port; `Ok(None)` when it is not installed (a skip,
    /// unless `REQUIRE_ENV` is set, when it is an error saying how to install it).
    pub fn start(kind: ServerKind) -> Result<Option<S3Server>> {
        let Some(mut command) = kind.command() else {
            let how = "scripts/test-servers.sh installs it";
            if std::env::var_os(REQUIRE_ENV).is_some() {
                return Err(Error::Unsupported(format!(
                    "the {} S3 server is not installed ({how}; {REQUIRE_ENV} is set)",
                    kind.name()
                )));
            }
            eprintln!(
                "skipped: the {} S3 server is not installed ({how})",
                kind.name()
            );
            return Ok(None);
        };
        let port = free_port()?;
        let root = match kind {
            ServerKind::S3sFs => Some(
                tempfile::tempdir().map_err(|e| Error::io("a temporary directory", "create", e))?,
            ),
            ServerKind::Moto => None,
        };
        let child = spawn(kind, &mut command, port, root.as_ref().map(|r| r.path()))?;
        let mut server = S3Server {
            kind,
            child,
            port,
            _root: root,
        };
        server.wait_listening()?;
        Ok(Some(server))
    }

    fn wait_listening(&mut self) -> Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).is_ok() {
                return Ok(());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(Error::Unsupported(format!(
                    "the {} S3 server exited at its start ({status})",
                    self.kind.name()
                )));
            }
            if Instant::now() > deadline {
                return Err(Error::Unsupported(format!(
                    "the {} S3 server did not listen on port {} within {} s",
                    self.kind.name(),
                    self.port,
                    START_TIMEOUT.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn kind(&self) -> ServerKind {
        self.kind
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The archive URL of `prefix` in `bucket` on this server.
    pub fn url(&self, bucket: &str, prefix: &str) -> String {
        format!("s3://{bucket}/{prefix}?endpoint={}", self.endpoint())
    }

    /// Creates `bucket` (object_store cannot: buckets are an administrator's business).
    pub fn create_bucket(&self, bucket: &str) -> Result<()> {
        match self.kind {
            ServerKind::S3sFs => {
                let root = self._root.as_ref().expect("s3s-fs has a root");
                std::fs::create_dir_all(root.path().join(bucket))
                    .map_err(|e| Error::io(root.path().join(bucket), "create the bucket", e))
            }
            // moto takes an unsigned CreateBucket.
            ServerKind::Moto => {
                let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port))
                    .map_err(|e| Error::io(self.endpoint(), "connect", e))?;
                stream
                    .set_read_timeout(Some(Duration::from_secs(10)))
                    .map_err(|e| Error::io(self.endpoint(), "set a timeout", e))?;
                let request = format!(
                    "PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\n\
                     Connection: close\r\n\r\n",
                    self.port
                );
                stream
                    .write_all(request.as_bytes())
                    .map_err(|e| Error::io(self.endpoint(), "send CreateBucket", e))?;
                let mut reply = String::new();
                let _ = stream.take(64 * 1024).read_to_string(&mut reply);
                if reply.starts_with("HTTP/1.1 200") {
                    Ok(())
                } else {
                    Err(Error::Remote(format!(
                        "moto refused to create bucket {bucket}: {}",
                        reply.lines().next().unwrap_or("no answer")
                    )))
                }
            }
        }
    }

    /// Starts the server again on the same port, over the same files for s3s-fs (moto keeps
    /// its objects in memory: they are gone), as a machine back from a crash would.
    pub fn restart(&mut self) -> Result<()> {
        self.kill();
        let mut command = self.kind.command().ok_or_else(|| {
            Error::Unsupported(format!("the {} S3 server is gone", self.kind.name()))
        })?;
        let root = self._root.as_ref().map(|r| r.path().to_path_buf());
        self.child = spawn(self.kind, &mut command, self.port, root.as_deref())?;
        self.wait_listening()
    }

    /// Stops the server (as a crash would: kill -9).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts `command` (the server `kind`) on `port`, over `root` for s3s-fs.
fn spawn(kind: ServerKind, command: &mut Command, port: u16, root: Option<&Path>) -> Result<Child> {
    let port = port.to_string();
    match kind {
        ServerKind::S3sFs => {
            command.args([
                "--host",
                "127.0.0.1",
                "--port",
                &port,
                "--access-key",
                ACCESS_KEY,
                "--secret-key",
                SECRET_KEY,
            ]);
            command.arg(root.expect("s3s-fs has a root"));
        }
        ServerKind::Moto => {
            command.args(["-H", "127.0.0.1", "-p", &port]);
        }
    }
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| Error::io(kind.name(), "start the S3 server", e))
}

fn free_port() -> Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| Error::io("127.0.0.1:0", "find a free port", e))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| Error::io("127.0.0.1:0", "find a free port", e))
}
