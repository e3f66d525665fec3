//! `lodestore serve`: an embedded store served to remote clients until SIGINT or SIGTERM.

use lodestore::{limits, Access, ServeLimits, ServerAuth, TlsServer, Token};
use lodestore::{Archive, Error, Options, RecoveryMethodKind, Result, Store};
use std::io::Write;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Arguments of `lodestore serve`.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Folder of the store (created if missing).
    path: PathBuf,
    /// Address to listen on, host:port (port 0 picks a free one; the chosen address is printed
    /// on the first line of standard output).
    #[arg(long, default_value = "127.0.0.1:7447")]
    listen: String,
    /// Recovery method: esm (ARIES-style logging of the changes clients ship), redo (the same
    /// log; clients ship log records only and the server applies them to its pages), wpl
    /// (whole-page logging: every shipped page is appended to the log whole), or a
    /// main-memory method of differential logging, dl1p, dl2p (XOR records, one-pass or
    /// two-pass restart) or pl2p (its physical-logging baseline), which keep every page in
    /// the server pool. Default: the store's own, esm for a new store. A store switched to
    /// another method is recovered with its old one first.
    #[arg(long)]
    method: Option<String>,
    #[command(flatten)]
    network: NetworkArgs,
    #[command(flatten)]
    archive: crate::security::ArchiveArgs,
}

/// Arguments of `lodestore archive-serve`.
#[derive(clap::Args, Debug)]
pub struct ArchiveServeArgs {
    /// Folder of the node's archive (created if missing): one file of checksummed page copies.
    dir: PathBuf,
    /// Address to listen on, host:port (port 0 picks a free one; the chosen address is printed
    /// on the first line of standard output).
    #[arg(long, default_value = "127.0.0.1:7448")]
    listen: String,
    /// Size of the pages the archive holds, the size of the stores that archive here (a
    /// node's archive keeps the size it was created with).
    #[arg(long, default_value_t = 8192, value_parser = crate::args::page_size)]
    page_size: usize,
    #[command(flatten)]
    network: NetworkArgs,
}

/// What any server of the command line takes: limits, tokens and TLS.
#[derive(clap::Args, Debug)]
pub struct NetworkArgs {
    /// Connections served at once; at the limit the one idle longest without a transaction
    /// is closed to make room.
    #[arg(long, default_value_t = limits::MAX_CONNECTIONS, value_parser = connections)]
    max_connections: usize,
    /// Connections from one peer address at once, with the same rule.
    #[arg(long, default_value_t = limits::MAX_CONNECTIONS_PER_PEER, value_parser = connections)]
    max_connections_per_peer: usize,
    /// Seconds from accepting a connection to the end of its handshake.
    #[arg(long, default_value_t = limits::HANDSHAKE_TIMEOUT.as_secs_f64(), value_parser = crate::args::seconds)]
    handshake_timeout: f64,
    /// Seconds of silence after which a connection holding no transaction is closed.
    #[arg(long, default_value_t = limits::IDLE_TIMEOUT.as_secs_f64(), value_parser = crate::args::seconds)]
    idle_timeout: f64,
    /// Seconds of silence after which a connection holding a transaction is closed and the
    /// transaction rolled back.
    #[arg(long, default_value_t = limits::SILENT_TRANSACTION_TIMEOUT.as_secs_f64(), value_parser = crate::args::seconds)]
    silent_transaction_timeout: f64,
    /// File holding the token clients must prove they hold (at least 16 bytes; a final line
    /// break is not part of it). The token itself never travels, and is never logged.
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// File holding a token that may only read: its clients are refused every write.
    #[arg(long)]
    read_only_token_file: Option<PathBuf>,
    /// Serve without authentication on an address other than loopback: anyone who can reach
    /// it can read and change everything served.
    #[arg(long)]
    insecure_no_auth: bool,
    /// Serve TLS with the certificate (chain) in this PEM file (with --tls-key; `certs` makes
    /// one). Clients then connect with --tls-ca.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert, a PEM file.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// With --tls-cert: require client certificates; those signed by the authority in this
    /// PEM file may read and write.
    #[arg(long, requires = "tls_cert")]
    tls_client_ca: Option<PathBuf>,
    /// With --tls-cert: require client certificates; those signed by the authority in this
    /// PEM file may only read.
    #[arg(long, requires = "tls_cert")]
    tls_read_only_client_ca: Option<PathBuf>,
    /// Seconds one reply may take to be written (a client that stops reading is closed).
    #[arg(long, default_value_t = limits::WRITE_TIMEOUT.as_secs_f64(), value_parser = crate::args::seconds)]
    write_timeout: f64,
}

fn connections(text: &str) -> std::result::Result<usize, String> {
    let n: usize = text
        .parse()
        .map_err(|_| format!("{text:?} is not a whole number"))?;
    if (1..=MAX_CONNECTIONS_LIMIT).contains(&n) {
        Ok(n)
    } else {
        Err(format!(
            "{n} is out of range: from 1 to {MAX_CONNECTIONS_LIMIT}"
        ))
    }
}

/// Most connections an operator may allow (each has a thread and a few descriptors).
const MAX_CONNECTIONS_LIMIT: usize = 65_536;

impl NetworkArgs {
    /// The tokens clients must prove they hold, and the server's TLS.
    fn auth(&self) -> Result<ServerAuth> {
        let mut auth = ServerAuth::none();
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            let mut tls = TlsServer::builder(cert, key);
            if let Some(ca) = &self.tls_client_ca {
                tls = tls.client_authority(ca, Access::ReadWrite);
            }
            if let Some(ca) = &self.tls_read_only_client_ca {
                tls = tls.client_authority(ca, Access::ReadOnly);
            }
            auth = auth.with_tls(tls.build()?);
        }
        if let Some(path) = &self.token_file {
            auth = auth.with(Token::from_file(path)?, Access::ReadWrite);
        }
        if let Some(path) = &self.read_only_token_file {
            auth = auth.with(Token::from_file(path)?, Access::ReadOnly);
        }
        Ok(auth)
    }

    fn limits(&self) -> ServeLimits {
        ServeLimits {
            max_connections: self.max_connections,
            max_connections_per_peer: self.max_connections_per_peer,
            handshake_timeout: Duration::from_secs_f64(self.handshake_timeout),
            idle_timeout: Duration::from_secs_f64(self.idle_timeout),
            silent_transaction_timeout: Duration::from_secs_f64(self.silent_transaction_timeout),
            write_timeout: Duration::from_secs_f64(self.write_timeout),
            ..ServeLimits::default()
        }
    }
}

impl NetworkArgs {
    /// Binds `listen` and builds the server's authentication, refusing to serve `what`
    /// without authentication beyond loopback unless told to, and warning of what crosses
    /// the network in the clear.
    fn bind(&self, listen: &str, what: &str) -> Result<(TcpListener, ServerAuth)> {
        let auth = self.auth()?;
        let listener = TcpListener::bind(listen).map_err(|e| Error::io(listen, "listen", e))?;
        let loopback = listener.local_addr().is_ok_and(|a| a.ip().is_loopback());
        if !auth.authenticates_clients() {
            if !loopback && !self.insecure_no_auth {
                return Err(Error::InvalidArgument(format!(
                    "{listen} is not a loopback address and neither --token-file nor \
                     --tls-client-ca was given: anyone who can reach it could read and change \
                     {what} (give --insecure-no-auth to serve it so anyway)"
                )));
            }
            eprintln!(
                "WARNING: serving without authentication: anyone who can connect to {listen} \
                 can read and change {what} (give --token-file to require a token, or \
                 --tls-client-ca to require a client certificate)"
            );
        }
        if auth.tls().is_none() && !loopback {
            eprintln!(
                "WARNING: serving without TLS on {listen}: pages cross the network in the clear \
                 (give --tls-cert and --tls-key to encrypt them)"
            );
        }
        Ok((listener, auth))
    }
}

/// Prints where `listener` listens on the first line of standard output (port 0 picks one;
/// scripts and tests read it), and returns a flag SIGINT and SIGTERM set.
fn announce(listener: &TcpListener, listen: &str) -> Result<Arc<AtomicBool>> {
    let local = listener
        .local_addr()
        .map_err(|e| Error::io(listen, "listen", e))?;
    println!("listening on {local}");
    std::io::stdout().flush().ok();
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [libc::SIGINT, libc::SIGTERM] {
        signal_flag(signal, stop.clone());
    }
    Ok(stop)
}

/// `lodestore archive-serve`: an archive node until SIGINT or SIGTERM.
pub fn run_archive(args: &ArchiveServeArgs) -> Result<ExitCode> {
    let fs: Arc<dyn lodestore::FileSystem> = Arc::new(lodestore::RealFileSystem);
    fs.create_dir_all(&args.dir)?;
    let archive = lodestore::LocalArchive::open(fs, &args.dir.join("archive"), args.page_size)?;
    let (listener, auth) = args
        .network
        .bind(&args.listen, "every page copy it holds")?;
    let stop = announce(&listener, &args.listen)?;
    eprintln!(
        "archive node for pages of {} bytes, holding {} bytes",
        args.page_size,
        archive.bytes()
    );
    let still_open = lodestore::serve_archive(
        Arc::new(archive),
        args.page_size,
        listener,
        stop,
        args.network.limits(),
        auth,
    )?;
    eprintln!("stopped ({still_open} connections did not end in time)");
    Ok(ExitCode::SUCCESS)
}

pub fn run(args: &ServeArgs) -> Result<ExitCode> {
    let (path, listen) = (args.path.as_path(), args.listen.as_str());
    let mut options = args.archive.apply(Options::new())?;
    if let Some(method) = &args.method {
        options = options.recovery_method(method.parse::<RecoveryMethodKind>()?);
    }
    // One thread per connection: glibc would give each a malloc arena of its own (up to
    // 8 per core) and memory freed in one arena is not reused by another, so resident memory
    // creeps up under many clients. Two arenas keep it flat (measured in docs/BENCHMARKS.md).
    // SAFETY: mallopt only changes allocator tuning; called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
    let (listener, auth) = args.network.bind(listen, "the whole store")?;
    let store = Store::open_or_create(path, options)?;
    let stop = announce(&listener, listen)?;
    eprintln!("recovery method {}", store.recovery_method());
    let still_open = store.serve_with(listener, stop, args.network.limits(), auth)?;
    if let Err(e) = store.close() {
        eprintln!("closing the store failed: {e}");
    }
    // Claim a clean close only when it is one: the next open must find nothing to recover.
    // Checked by running that open's recovery in memory, which writes nothing.
    match lodestore::recover_in_memory(Arc::new(lodestore::RealFileSystem), path) {
        Ok(view) if !view.restart().needed_recovery() => {
            eprintln!("stopped; the store was closed cleanly");
        }
        Ok(_) => eprintln!(
            "stopped, but the store was not closed cleanly ({still_open} connections did not end \
             in time): the next open recovers it from its log"
        ),
        Err(e) => eprintln!("stopped; the store could not be checked after closing: {e}"),
    }
    Ok(ExitCode::SUCCESS)
}

/// Sets `flag` when `signal` arrives.
fn signal_flag(signal: libc::c_int, flag: Arc<AtomicBool>) {
    static FLAG: std::sync::OnceLock<Arc<AtomicBool>> = std::sync::OnceLock::new();
    let _ = FLAG.set(flag);
    extern "C" fn handler(_: libc::c_int) {
        if let Some(flag) = FLAG.get() {
            flag.store(true, Ordering::Relaxed);
        }
    }
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(signal, handler as *const () as libc::sighandler_t);
    }
}
