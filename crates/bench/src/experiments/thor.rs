//! Thor's snapshot experiments (Moh chapter 6) on OO7:
//!
//! - **Overhead on current transactions** (sections 6.3 to 6.5): T1, T2A, T2B, T2C and
//!   Thor's modified T2B (10% of atomic parts updated) on three copies of one database, in
//!   turn within every repetition: snapshots off; on with none taken (the cost of keeping
//!   pre-images); and a snapshot before every transaction (every commit then makes page
//!   copies, Thor's "while snapshot pages are being created").
//! - **T1 as of a snapshot** (section 6.6, Table 6.2): with cold caches (the store reopened
//!   and a new session for every measurement), T1 on the current store against T1 as of a
//!   snapshot whose changed pages come from the archive, with a delay injected into every
//!   archive read (0, 1 and 10 ms by default) to stand for a remote archive; the time is
//!   then fitted as a + reads x delay, as the thesis does. Per archive backend: the local
//!   archive, an archive node over loopback holding the same copies (Table 6.2's
//!   "network storage"), and S3 on an `s3s-fs` server over loopback (feature `s3`) holding
//!   them as objects. Requests and bytes per backend are counted.

use crate::oo7::{self, Oo7Params, Traversal};
use crate::workspace;
use lodestore::{
    Archive, ArchiveNodes, AsOf, Credentials, LocalArchive, Options, PageCopy, PageId,
    RealFileSystem, Result, RunningNode, Scheme, ServeLimits, ServerAuth, Snapshots, Store,
    LOCAL_LOCATION,
};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The traversals of the overhead part, in Thor's order.
pub const OVERHEAD_TRAVERSALS: [Traversal; 5] = [
    Traversal::T1,
    Traversal::T2a,
    Traversal::T2b,
    Traversal::T2c,
    Traversal::T2b10,
];

/// Snapshot settings of the overhead part.
pub const MODES: [&str; 3] = ["off", "on", "each"];

/// Where the as-of part's snapshot pages are read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArchiveBackend {
    /// The local archive file beside the store.
    Local,
    /// An archive node on loopback (`serve_archive`) holding the same file, reached through
    /// `ArchiveNodes`: every read a request over TCP.
    Node,
    /// S3 on an `s3s-fs` server over loopback started for the experiment, the copies
    /// uploaded to it first: every read a listing and a GET over HTTP.
    S3,
    /// The same on a `moto` server.
    S3Moto,
    /// A DHT of `DHT_PEERS` archive peers (libp2p Kademlia), each a process on loopback,
    /// every page on two of them: every read a lookup of several round trips.
    P2p,
}

/// Peers of the DHT backend (Thor's peer-to-peer experiment had 16 too, Moh section 6.6).
pub const DHT_PEERS: usize = 16;
/// Peers holding each page in the DHT backend.
pub const DHT_REPLICAS: usize = 2;

impl ArchiveBackend {
    pub fn name(self) -> &'static str {
        match self {
            ArchiveBackend::Local => "local",
            ArchiveBackend::Node => "node",
            ArchiveBackend::S3 => "s3",
            ArchiveBackend::S3Moto => "s3-moto",
            ArchiveBackend::P2p => "p2p",
        }
    }
}

impl std::str::FromStr for ArchiveBackend {
    type Err = lodestore::Error;

    fn from_str(text: &str) -> Result<ArchiveBackend> {
        match text {
            "local" => Ok(ArchiveBackend::Local),
            "node" => Ok(ArchiveBackend::Node),
            "s3" if cfg!(feature = "s3") => Ok(ArchiveBackend::S3),
            "s3-moto" if cfg!(feature = "s3") => Ok(ArchiveBackend::S3Moto),
            "s3" | "s3-moto" => Err(lodestore::Error::Unsupported(format!(
                "archive backend {text}: this build has no S3 archives (feature `s3`)"
            ))),
            "p2p" if cfg!(feature = "p2p") => Ok(ArchiveBackend::P2p),
            "p2p" => Err(lodestore::Error::Unsupported(
                "archive backend p2p: this build has no DHT archives (feature `p2p`)".into(),
            )),
            other => Err(lodestore::Error::InvalidArgument(format!(
                "archive backend {other:?}: the backends are local, node, s3 (s3s-fs), \
                 s3-moto and p2p (a DHT of {DHT_PEERS} peers)"
            ))),
        }
    }
}

#[derive(Clone, Debug)]
pub struct ThorConfig {
    pub preset: String,
    pub params: Oo7Params,
    pub seed: u64,
    pub scheme: Scheme,
    /// Repetitions of every measurement, interleaved.
    pub runs: u32,
    pub cache_bytes: usize,
    pub server_pool_bytes: usize,
    /// Delays injected into every archive read for the as-of part, in milliseconds.
    pub delays_ms: Vec<f64>,
    /// Archive backends of the as-of part.
    pub backends: Vec<ArchiveBackend>,
    /// Copies per archive read of the as-of part (`Options::archive_read_ahead`; 1: none),
    /// each measured in turn.
    pub read_ahead: Vec<usize>,
    /// Run the overhead part (sections 6.3 to 6.5).
    pub overhead: bool,
    /// Run the as-of part (section 6.6).
    pub as_of: bool,
    /// Run the archive-down part: commits that make page copies while the archive (an
    /// archive node) is up, then down.
    pub archive_down: bool,
    /// How to start an archive peer of the DHT backend: a program and the arguments before
    /// the peer's own (the CLI passes itself and `archive-peer`); `None` looks for the
    /// `lodestore-archive-peer` program.
    pub peer_program: Option<(PathBuf, Vec<String>)>,
    pub out: PathBuf,
    pub quiet: bool,
}

/// One measured transaction.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ThorRecord {
    /// `overhead` or `as-of`.
    pub part: String,
    pub preset: String,
    pub scheme: String,
    pub traversal: String,
    /// Overhead: `off`, `on` or `each`. As-of: `current` or `as-of`.
    pub mode: String,
    /// As-of: the archive backend (`local`, `node`).
    #[serde(default = "local_backend")]
    pub backend: String,
    /// As-of: the delay injected into every archive read.
    pub delay_ms: f64,
    /// As-of: copies asked for per archive read (1: no reading ahead).
    #[serde(default = "no_read_ahead")]
    pub read_ahead: u32,
    pub run: u32,
    /// Traversal and commit.
    pub elapsed_ms: f64,
    /// The commit alone.
    pub commit_ms: f64,
    /// As-of: archive reads the transaction made.
    pub archive_reads: u64,
    /// As-of: requests those reads cost the backend (a read of the local archive or of a
    /// node is one; of S3, a listing and a GET).
    #[serde(default)]
    pub archive_requests: u64,
    /// As-of: bytes those reads brought back (page copies; S3's listings not counted).
    #[serde(default)]
    pub archive_bytes: u64,
    /// As-of: pages the transaction fetched from the server.
    pub pages_fetched: u64,
}

fn no_read_ahead() -> u32 {
    1
}

fn local_backend() -> String {
    ArchiveBackend::Local.name().into()
}

/// Runs both parts.
pub fn run(config: &ThorConfig) -> Result<Vec<ThorRecord>> {
    config.params.validate()?;
    if config.runs == 0 {
        return Err(lodestore::Error::InvalidArgument(
            "--runs must be at least 1".into(),
        ));
    }
    let template = super::oo7::template(
        &config.out,
        &config.preset,
        &config.params,
        config.seed,
        config.quiet,
    )?;
    let mut records = Vec::new();
    if config.overhead {
        records.extend(overhead(config, &template)?);
    }
    if config.as_of {
        records.extend(as_of(config, &template)?);
    }
    if config.archive_down {
        records.extend(archive_down(config, &template)?);
    }
    workspace::remove_work(&config.out)?;
    Ok(records)
}

fn options(config: &ThorConfig) -> Options {
    Options::new()
        .scheme(config.scheme)
        .recovery_method(lodestore::paired_method(config.scheme))
        .client_cache_bytes(config.cache_bytes)
        .server_pool_bytes(config.server_pool_bytes)
}

fn record(config: &ThorConfig, part: &str, traversal: Traversal, mode: &str) -> ThorRecord {
    ThorRecord {
        part: part.into(),
        preset: config.preset.clone(),
        scheme: config.scheme.name().into(),
        traversal: traversal.name().into(),
        mode: mode.into(),
        read_ahead: 1,
        ..ThorRecord::default()
    }
}

/// Sections 6.3 to 6.5: the three settings side by side, hot client caches.
fn overhead(config: &ThorConfig, template: &Path) -> Result<Vec<ThorRecord>> {
    let paths = workspace::fresh_copies(template, &config.out, &MODES)?;
    let stores: Vec<Store> = MODES
        .iter()
        .zip(&paths)
        .map(|(mode, path)| Store::open(path, options(config).snapshots(*mode != "off")))
        .collect::<Result<_>>()?;
    let mut sessions = stores
        .iter()
        .map(Store::session)
        .collect::<Result<Vec<_>>>()?;
    let module = {
        let mut txn = sessions[0].begin()?;
        let modules = oo7::modules(&mut txn)?;
        txn.commit()?;
        modules[0]
    };
    // Hot caches: every traversal once, unmeasured, on every store.
    for session in &mut sessions {
        for traversal in OVERHEAD_TRAVERSALS {
            let mut txn = session.begin()?;
            oo7::traverse(&mut txn, module, traversal, config.seed)?;
            txn.commit()?;
        }
    }
    let total = u64::from(config.runs) * (OVERHEAD_TRAVERSALS.len() * MODES.len()) as u64;
    let bar = workspace::progress_bar(total, "Thor overhead", config.quiet);
    let mut records = Vec::new();
    for run in 1..=config.runs {
        for traversal in OVERHEAD_TRAVERSALS {
            // The settings take turns, starting with a different one each repetition, so
            // drift in the machine's speed falls on all of them alike.
            for turn in 0..MODES.len() {
                let which = (turn + run as usize) % MODES.len();
                let (store, session) = (&stores[which], &mut sessions[which]);
                if MODES[which] == "each" {
                    store.snapshot()?;
                }
                let started = Instant::now();
                let mut txn = session.begin()?;
                oo7::traverse(&mut txn, module, traversal, config.seed + u64::from(run))?;
                let committing = Instant::now();
                txn.commit()?;
                let mut measured = record(config, "overhead", traversal, MODES[which]);
                measured.run = run;
                measured.elapsed_ms = ms(started.elapsed());
                measured.commit_ms = ms(committing.elapsed());
                records.push(measured);
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    drop(sessions);
    for store in stores {
        store.close()?;
    }
    Ok(records)
}

/// Section 6.6: T1 on the current store and as of a snapshot, cold, per archive backend and
/// delay.
fn as_of(config: &ThorConfig, template: &Path) -> Result<Vec<ThorRecord>> {
    let path = workspace::fresh_copies(template, &config.out, &["as-of"])?.remove(0);
    // The snapshot, then T2B and T2C over every module: the atomic parts' pages change, so
    // T1 as of the snapshot reads them from the archive.
    let snapshot = {
        let store = Store::open(&path, options(config).snapshots(true))?;
        let snapshot = store.snapshot()?;
        let mut session = store.session()?;
        let modules = {
            let mut txn = session.begin()?;
            let modules = oo7::modules(&mut txn)?;
            txn.commit()?;
            modules
        };
        for traversal in [Traversal::T2b, Traversal::T2c] {
            for &module in &modules {
                let mut txn = session.begin()?;
                oo7::traverse(&mut txn, module, traversal, config.seed)?;
                txn.commit()?;
            }
        }
        drop(session);
        store.archive_snapshot_pages()?;
        store.close()?;
        snapshot
    };
    let page_size = {
        let store = Store::open(&path, options(config))?;
        let size = store.page_size();
        store.close()?;
        size
    };
    let total = u64::from(config.runs)
        * (config.delays_ms.len() * config.backends.len() * config.read_ahead.len()) as u64
        * 2;
    // The S3 servers, started once and filled with the store's copies.
    let mut buckets = Vec::new();
    for (backend, server) in [
        (ArchiveBackend::S3, s3::Server::S3sFs),
        (ArchiveBackend::S3Moto, s3::Server::Moto),
    ] {
        if config.backends.contains(&backend) {
            buckets.push((backend, s3::Bucket::filled_from(server, &path, page_size)?));
        }
    }
    let dht = if config.backends.contains(&ArchiveBackend::P2p) {
        Some(dht::Dht::filled_from(config, &path, page_size)?)
    } else {
        None
    };
    let bar = workspace::progress_bar(total, "Thor T1 as of a snapshot", config.quiet);
    let mut records = Vec::new();
    for run in 1..=config.runs {
        for (&backend, &read_ahead) in config
            .backends
            .iter()
            .flat_map(|b| config.read_ahead.iter().map(move |r| (b, r)))
        {
            for &delay_ms in &config.delays_ms {
                for mode in ["current", "as-of"] {
                    let delay = Duration::from_secs_f64(delay_ms / 1000.0);
                    let bucket = buckets.iter().find(|(b, _)| *b == backend).map(|(_, b)| b);
                    let mut opened = open_backend(backend, &path, page_size, bucket, dht.as_ref())?;
                    let archive =
                        Arc::new(SlowArchive::new(opened.archive.clone(), delay, page_size));
                    let measured = t1_cold(config, &path, &archive, read_ahead, mode, snapshot.id);
                    if let Some(mut node) = opened.node.take() {
                        node.stop()?;
                    }
                    let mut measured = measured?;
                    measured.archive_requests = archive.asked();
                    measured.archive_bytes = archive.bytes_read();
                    if let Some((requests, bytes)) = opened.traffic() {
                        (measured.archive_requests, measured.archive_bytes) = (requests, bytes);
                    }
                    measured.run = run;
                    measured.backend = backend.name().into();
                    measured.delay_ms = delay_ms;
                    measured.read_ahead = read_ahead as u32;
                    records.push(measured);
                    bar.inc(1);
                }
            }
        }
    }
    bar.finish_and_clear();
    Ok(records)
}

/// Transactions per run and archive state in the archive-down part.
const ARCHIVE_DOWN_TRANSACTIONS: u32 = 20;

/// Commits while the archive is up and while it is down, in turn within every run: T2A on
/// the first module after a snapshot each time, so that every commit stages page copies, with
/// the store's pages archived remotely (the background archiver ships them as it goes); then
/// the archive stops, and the same again. Copies then wait in the snapshot log: the archive
/// must never hold a commit up. Per remote backend named (an archive node, S3 on s3s-fs; a
/// node when none is), each on a fresh copy of the database.
fn archive_down(config: &ThorConfig, template: &Path) -> Result<Vec<ThorRecord>> {
    let mut remote: Vec<ArchiveBackend> = config
        .backends
        .iter()
        .copied()
        .filter(|b| {
            matches!(
                b,
                ArchiveBackend::Node | ArchiveBackend::S3 | ArchiveBackend::P2p
            )
        })
        .collect();
    if remote.is_empty() {
        remote.push(ArchiveBackend::Node);
    }
    let names: Vec<String> = remote
        .iter()
        .map(|b| format!("archive-down-{}", b.name()))
        .collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let paths = workspace::fresh_copies(template, &config.out, &names)?;
    let page_size = {
        let store = Store::open(&paths[0], options(config))?;
        let size = store.page_size();
        store.close()?;
        size
    };
    let total = u64::from(config.runs * ARCHIVE_DOWN_TRANSACTIONS) * 2 * remote.len() as u64;
    let bar = workspace::progress_bar(total, "Thor commits, archive up and down", config.quiet);
    let mut records = Vec::new();
    for (&backend, path) in remote.iter().zip(&paths) {
        let mut switch = Switch::start(config, backend, path, page_size)?;
        let (store, module) = open_with_archive(path, switch.archive()?, options(config))?;
        let mut session = store.session()?;
        // In turn within every run: the archive up (started again), then down.
        for run in 1..=config.runs {
            for mode in ["archive up", "archive down"] {
                if mode == "archive down" {
                    switch.stop()?;
                } else if run > 1 {
                    switch.restart()?;
                }
                for _ in 0..ARCHIVE_DOWN_TRANSACTIONS {
                    store.snapshot()?;
                    let mut measured = record(config, "archive-down", Traversal::T2a, mode);
                    measured.backend = backend.name().into();
                    let started = Instant::now();
                    let mut txn = session.begin()?;
                    oo7::traverse(&mut txn, module, Traversal::T2a, config.seed)?;
                    let committing = Instant::now();
                    txn.commit()?;
                    measured.commit_ms = ms(committing.elapsed());
                    measured.elapsed_ms = ms(started.elapsed());
                    measured.run = run;
                    records.push(measured);
                    bar.inc(1);
                }
            }
        }
        let staged = store.snapshot_stats().map_or(0, |s| s.staged_copies);
        tracing::info!(
            staged,
            backend = backend.name(),
            "page copies waiting for the archive when it went down"
        );
        drop(session);
        // The archive is down: the copies stay in the snapshot log (the close says so).
        store.close()?;
    }
    bar.finish_and_clear();
    Ok(records)
}

/// A remote archive the archive-down part stops and starts again: an archive node over a
/// local archive file, or an S3 server over its files.
enum Switch {
    Node {
        node: Option<RunningNode>,
        address: String,
        file: PathBuf,
        page_size: usize,
    },
    #[cfg(feature = "s3")]
    S3 {
        server: lodestore_archive_s3::servers::S3Server,
        url: String,
    },
    /// Every peer of the DHT stopped and started together.
    #[cfg(feature = "p2p")]
    P2p {
        peers: lodestore_archive_p2p::peers::PeerSet,
        url: String,
    },
}

impl Switch {
    // Only the DHT needs the configuration (its peer program).
    #[cfg_attr(not(feature = "p2p"), allow(unused_variables))]
    fn start(
        config: &ThorConfig,
        backend: ArchiveBackend,
        store: &Path,
        page_size: usize,
    ) -> Result<Switch> {
        match backend {
            #[cfg(feature = "p2p")]
            ArchiveBackend::P2p => {
                let peers = lodestore_archive_p2p::peers::PeerSet::start(
                    dht::peer_command(config)?,
                    DHT_PEERS,
                    DHT_REPLICAS,
                )?;
                let url = peers.url("archive-down", 3);
                Ok(Switch::P2p { peers, url })
            }
            #[cfg(feature = "s3")]
            ArchiveBackend::S3 => {
                use lodestore_archive_s3::servers::{S3Server, ServerKind};
                let server = S3Server::start(ServerKind::S3sFs)?.ok_or_else(|| {
                    lodestore::Error::Unsupported(
                        "archive-down on s3: s3s-fs is not installed (scripts/test-servers.sh \
                         installs it)"
                            .into(),
                    )
                })?;
                server.create_bucket("thor")?;
                let url = server.url("thor", "archive-down");
                Ok(Switch::S3 { server, url })
            }
            _ => {
                let dir = store.with_extension("node");
                lodestore::FileSystem::create_dir_all(&RealFileSystem, &dir)?;
                let mut switch = Switch::Node {
                    node: None,
                    address: "127.0.0.1:0".into(),
                    file: dir.join("archive"),
                    page_size,
                };
                switch.restart()?;
                Ok(switch)
            }
        }
    }

    fn archive(&self) -> Result<Arc<dyn Archive>> {
        match self {
            Switch::Node { address, .. } => Ok(Arc::new(ArchiveNodes::new(
                std::slice::from_ref(address),
                1,
                Credentials::default(),
            )?)),
            #[cfg(feature = "p2p")]
            Switch::P2p { url, .. } => Ok(Arc::new(lodestore_archive_p2p::P2pArchive::open(url)?)),
            #[cfg(feature = "s3")]
            Switch::S3 { url, .. } => {
                use lodestore_archive_s3::servers::{ACCESS_KEY, SECRET_KEY};
                Ok(Arc::new(lodestore::S3Archive::open_with_keys(
                    url, ACCESS_KEY, SECRET_KEY,
                )?))
            }
        }
    }

    fn stop(&mut self) -> Result<()> {
        match self {
            Switch::Node { node, .. } => node.take().map_or(Ok(()), |mut n| n.stop()),
            #[cfg(feature = "s3")]
            Switch::S3 { server, .. } => {
                server.kill();
                Ok(())
            }
            #[cfg(feature = "p2p")]
            Switch::P2p { peers, .. } => {
                (0..peers.len()).for_each(|i| peers.kill(i));
                Ok(())
            }
        }
    }

    /// Starts the archive (again, on the same port: port 0 the first time).
    fn restart(&mut self) -> Result<()> {
        match self {
            Switch::Node {
                node,
                address,
                file,
                page_size,
            } => {
                let archive = LocalArchive::open(Arc::new(RealFileSystem), file, *page_size)?;
                let listener = std::net::TcpListener::bind(address.as_str())
                    .map_err(|e| lodestore::Error::io(address.as_str(), "listen", e))?;
                let started = RunningNode::spawn(
                    Arc::new(archive),
                    *page_size,
                    listener,
                    ServeLimits::default(),
                    ServerAuth::none(),
                )?;
                *address = started.address().to_string();
                *node = Some(started);
                Ok(())
            }
            #[cfg(feature = "s3")]
            Switch::S3 { server, .. } => server.restart(),
            #[cfg(feature = "p2p")]
            Switch::P2p { peers, .. } => (0..peers.len()).try_for_each(|i| peers.restart(i)),
        }
    }
}

/// T1 cold on the store at `path` (opened afresh with `archive`, a new session): on the
/// current store, or as of `snapshot`.
fn t1_cold(
    config: &ThorConfig,
    path: &Path,
    archive: &Arc<SlowArchive>,
    read_ahead: usize,
    mode: &str,
    snapshot: u64,
) -> Result<ThorRecord> {
    // Cold: the store opened afresh (an empty server pool), a new session (an empty client
    // cache).
    let (store, module) = open_with_archive(
        path,
        archive.clone(),
        options(config).archive_read_ahead(read_ahead),
    )?;
    let mut session = store.session()?;
    let reads_before = archive.reads();
    let mut measured = record(config, "as-of", Traversal::T1, mode);
    let started = Instant::now();
    if mode == "current" {
        let mut txn = session.begin()?;
        oo7::traverse(&mut txn, module, Traversal::T1, config.seed)?;
        let committing = Instant::now();
        txn.commit()?;
        measured.commit_ms = ms(committing.elapsed());
        measured.pages_fetched = session.stats().pages_fetched;
    } else {
        let mut txn = session.begin_as_of(AsOf::Snapshot(snapshot))?;
        oo7::traverse(&mut txn, module, Traversal::T1, config.seed)?;
        measured.pages_fetched = txn.pages_fetched();
        let committing = Instant::now();
        txn.finish()?;
        measured.commit_ms = ms(committing.elapsed());
    }
    measured.elapsed_ms = ms(started.elapsed());
    measured.archive_reads = archive.reads() - reads_before;
    drop(session);
    store.close()?;
    Ok(measured)
}

/// The store at `path` opened with `options` and snapshots archived in `archive`, and its
/// first module.
fn open_with_archive(
    path: &Path,
    archive: Arc<dyn Archive>,
    options: Options,
) -> Result<(Store, lodestore::Oid<oo7::schema::Module>)> {
    let store = Store::open(path, options.snapshots(true).snapshot_archive(archive))?;
    let module = {
        let mut session = store.session()?;
        let mut txn = session.begin()?;
        let modules = oo7::modules(&mut txn)?;
        txn.commit()?;
        modules[0]
    };
    Ok((store, module))
}

/// An archive backend opened for one measurement.
struct Opened {
    archive: Arc<dyn Archive>,
    /// The node serving it, to be stopped after the measurement (`ArchiveBackend::Node`).
    node: Option<RunningNode>,
    /// Requests made and bytes received so far, where the backend counts its own (S3, the
    /// DHT: their requests are not one per copy).
    traffic: Option<Box<dyn Fn() -> (u64, u64)>>,
}

impl Opened {
    fn of(archive: Arc<dyn Archive>, node: Option<RunningNode>) -> Opened {
        Opened {
            archive,
            node,
            traffic: None,
        }
    }

    fn traffic(&self) -> Option<(u64, u64)> {
        self.traffic.as_ref().map(|traffic| traffic())
    }
}

/// Uploads every copy of the store's local archive to `to`; returns how many.
#[cfg_attr(not(any(feature = "s3", feature = "p2p")), allow(dead_code))]
fn upload_local_copies(store: &Path, page_size: usize, to: &dyn Archive) -> Result<usize> {
    /// Copies uploaded per put.
    const UPLOAD_BATCH: usize = 256;
    let local = LocalArchive::open(
        Arc::new(RealFileSystem),
        &Snapshots::local_archive_path(store),
        page_size,
    )?;
    let copies = local.list().unwrap_or_default();
    for batch in copies.chunks(UPLOAD_BATCH) {
        let mut images = Vec::with_capacity(batch.len());
        for &(page, time) in batch {
            let mut image = vec![0u8; page_size];
            let found = local.get(page, time, &mut image)?;
            debug_assert_eq!(found, Some(time), "a listed copy reads back");
            images.push(image);
        }
        to.put(&lodestore::page_copies(batch, &images))?;
    }
    Ok(copies.len())
}

/// The archive of `backend` over the store's local archive file (or over the copies
/// uploaded from it to `s3` or `dht`).
fn open_backend(
    backend: ArchiveBackend,
    store: &Path,
    page_size: usize,
    s3: Option<&s3::Bucket>,
    dht: Option<&dht::Dht>,
) -> Result<Opened> {
    let local = LocalArchive::open(
        Arc::new(RealFileSystem),
        &Snapshots::local_archive_path(store),
        page_size,
    )?;
    match backend {
        ArchiveBackend::Local => Ok(Opened::of(Arc::new(local), None)),
        ArchiveBackend::S3 | ArchiveBackend::S3Moto => {
            let bucket = s3.expect("the bucket is filled before S3 is measured");
            bucket.open()
        }
        ArchiveBackend::P2p => dht.expect("the DHT is filled before it is measured").open(),
        ArchiveBackend::Node => {
            let listener = std::net::TcpListener::bind("127.0.0.1:0")
                .map_err(|e| lodestore::Error::io("127.0.0.1:0", "listen", e))?;
            let node = RunningNode::spawn(
                Arc::new(local),
                page_size,
                listener,
                ServeLimits::default(),
                ServerAuth::none(),
            )?;
            let nodes =
                ArchiveNodes::new(&[node.address().to_string()], 1, Credentials::default())?;
            Ok(Opened::of(Arc::new(nodes), Some(node)))
        }
    }
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// An archive with a delay before every read, standing for an archive across a network
/// (Moh Table 6.2), and a count of the reads.
struct SlowArchive {
    inner: Arc<dyn Archive>,
    delay: Duration,
    /// Round trips: a `get`, or a `get_many` (one delay for the lot).
    reads: AtomicU64,
    /// Copies asked for, one request each on the local archive or a node.
    asked: AtomicU64,
    copies_found: AtomicU64,
    page_size: usize,
}

impl SlowArchive {
    fn new(inner: Arc<dyn Archive>, delay: Duration, page_size: usize) -> SlowArchive {
        SlowArchive {
            inner,
            delay,
            reads: AtomicU64::new(0),
            asked: AtomicU64::new(0),
            copies_found: AtomicU64::new(0),
            page_size,
        }
    }

    fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    fn asked(&self) -> u64 {
        self.asked.load(Ordering::Relaxed)
    }

    /// Bytes of the copies the reads found.
    fn bytes_read(&self) -> u64 {
        self.copies_found.load(Ordering::Relaxed) * self.page_size as u64
    }
}

impl Archive for SlowArchive {
    fn name(&self) -> String {
        format!("{} (+{:?} a read)", self.inner.name(), self.delay)
    }

    fn location(&self) -> String {
        // Every backend here serves the store's own archive file (a node over loopback holds
        // that same file): the pages are where the store recorded them.
        LOCAL_LOCATION.into()
    }

    fn put(&self, copies: &[PageCopy<'_>]) -> Result<()> {
        self.inner.put(copies)
    }

    fn get(&self, page: PageId, time_us: u64, buf: &mut [u8]) -> Result<Option<u64>> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.asked.fetch_add(1, Ordering::Relaxed);
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
        let found = self.inner.get(page, time_us, buf)?;
        self.copies_found
            .fetch_add(u64::from(found.is_some()), Ordering::Relaxed);
        Ok(found)
    }

    fn get_many(&self, wants: &[(PageId, u64)], bufs: &mut [u8]) -> Result<Vec<Option<u64>>> {
        // One round trip: the delay once, as for a batch a backend sends at once.
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.asked.fetch_add(wants.len() as u64, Ordering::Relaxed);
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
        let found = self.inner.get_many(wants, bufs)?;
        let copies = found.iter().filter(|f| f.is_some()).count() as u64;
        self.copies_found.fetch_add(copies, Ordering::Relaxed);
        Ok(found)
    }

    fn read_ahead(&self) -> usize {
        self.inner.read_ahead()
    }

    fn get_ts(&self, page: PageId) -> Result<Option<u64>> {
        self.inner.get_ts(page)
    }

    fn newest_times(&self) -> Option<Vec<(PageId, u64)>> {
        self.inner.newest_times()
    }

    fn list(&self) -> Option<Vec<(PageId, u64)>> {
        self.inner.list()
    }

    fn remove(&self, copies: &[(PageId, u64)]) -> Result<()> {
        self.inner.remove(copies)
    }

    fn bytes(&self) -> u64 {
        self.inner.bytes()
    }
}

/// The S3 backend of the as-of part: an `s3s-fs` server on loopback, started for the
/// experiment, holding the store's archived copies as objects.
mod s3 {
    #[cfg(feature = "s3")]
    pub use with_s3::Bucket;

    /// Which S3 server.
    #[derive(Clone, Copy)]
    pub enum Server {
        S3sFs,
        Moto,
    }

    #[cfg(not(feature = "s3"))]
    pub struct Bucket;

    #[cfg(not(feature = "s3"))]
    impl Bucket {
        pub fn filled_from(
            _server: Server,
            _store: &std::path::Path,
            _page_size: usize,
        ) -> lodestore::Result<Bucket> {
            Err(lodestore::Error::Unsupported(
                "archive backend s3: this build has no S3 archives (feature `s3`)".into(),
            ))
        }

        pub fn open(&self) -> lodestore::Result<super::Opened> {
            unreachable!("no bucket is made without the s3 feature")
        }
    }

    #[cfg(feature = "s3")]
    mod with_s3 {
        use super::super::Opened;
        use super::Server;
        use lodestore::{Result, S3Archive};
        use lodestore_archive_s3::servers::{S3Server, ServerKind, ACCESS_KEY, SECRET_KEY};
        use std::path::Path;
        use std::sync::Arc;

        pub struct Bucket {
            url: String,
            _server: S3Server,
        }

        impl Bucket {
            /// Starts the server and uploads every copy of the store's local archive.
            pub fn filled_from(server: Server, store: &Path, page_size: usize) -> Result<Bucket> {
                let kind = match server {
                    Server::S3sFs => ServerKind::S3sFs,
                    Server::Moto => ServerKind::Moto,
                };
                let server = S3Server::start(kind)?.ok_or_else(|| {
                    lodestore::Error::Unsupported(format!(
                        "archive backend on {}: it is not installed (scripts/test-servers.sh \
                         installs it)",
                        kind.name()
                    ))
                })?;
                server.create_bucket("thor")?;
                let url = server.url("thor", "as-of");
                let s3 = S3Archive::open_with_keys(&url, ACCESS_KEY, SECRET_KEY)?;
                let copies = super::super::upload_local_copies(store, page_size, &s3)?;
                tracing::info!(copies, %url, server = kind.name(), "snapshot copies uploaded");
                Ok(Bucket {
                    url,
                    _server: server,
                })
            }

            /// A new archive on the bucket (cold: nothing cached, new connections).
            pub fn open(&self) -> Result<Opened> {
                let s3 = Arc::new(S3Archive::open_with_keys(
                    &self.url, ACCESS_KEY, SECRET_KEY,
                )?);
                let counted = s3.clone();
                Ok(Opened {
                    archive: s3,
                    node: None,
                    traffic: Some(Box::new(move || {
                        let traffic = counted.traffic();
                        (traffic.requests, traffic.bytes_received)
                    })),
                })
            }
        }
    }
}

/// The DHT backend: `DHT_PEERS` archive peers on loopback, each a process, started for the
/// experiment and holding the store's archived copies, each page on `DHT_REPLICAS` of them.
mod dht {
    #[cfg(not(feature = "p2p"))]
    use super::{Opened, ThorConfig};
    #[cfg(not(feature = "p2p"))]
    use lodestore::Result;
    #[cfg(not(feature = "p2p"))]
    use std::path::Path;

    #[cfg(not(feature = "p2p"))]
    pub struct Dht;

    #[cfg(not(feature = "p2p"))]
    impl Dht {
        pub fn filled_from(_: &ThorConfig, _: &Path, _: usize) -> Result<Dht> {
            Err(lodestore::Error::Unsupported(
                "archive backend p2p: this build has no DHT archives (feature `p2p`)".into(),
            ))
        }

        pub fn open(&self) -> Result<Opened> {
            unreachable!("no DHT is made without the p2p feature")
        }
    }

    #[cfg(feature = "p2p")]
    pub use with_p2p::{peer_command, Dht};

    #[cfg(feature = "p2p")]
    mod with_p2p {
        use super::super::{Opened, ThorConfig, DHT_PEERS, DHT_REPLICAS};
        use lodestore::Result;
        use lodestore_archive_p2p::peers::{PeerCommand, PeerSet};
        use lodestore_archive_p2p::P2pArchive;
        use std::path::Path;
        use std::sync::Arc;

        /// How the configuration says to start a peer.
        pub fn peer_command(config: &ThorConfig) -> Result<PeerCommand> {
            match &config.peer_program {
                Some((program, args)) => Ok(PeerCommand {
                    program: program.clone(),
                    args: args.clone(),
                }),
                None => PeerCommand::find(),
            }
        }

        pub struct Dht {
            url: String,
            _peers: PeerSet,
        }

        impl Dht {
            /// Starts the peers and uploads every copy of the store's local archive.
            pub fn filled_from(config: &ThorConfig, store: &Path, page_size: usize) -> Result<Dht> {
                let peers = PeerSet::start(peer_command(config)?, DHT_PEERS, DHT_REPLICAS)?;
                // A store names a few peers; the DHT leads it to the rest.
                let url = peers.url("thor", 3);
                let dht = P2pArchive::open(&url)?;
                let copies = super::super::upload_local_copies(store, page_size, &dht)?;
                tracing::info!(copies, held = ?peers.bytes_held(), "snapshot copies stored in the DHT");
                Ok(Dht { url, _peers: peers })
            }

            /// A new reader of the DHT (cold: no connections, an empty routing table).
            pub fn open(&self) -> Result<Opened> {
                let dht = Arc::new(P2pArchive::open(&self.url)?);
                let counted = dht.clone();
                Ok(Opened {
                    archive: dht,
                    node: None,
                    traffic: Some(Box::new(move || {
                        let traffic = counted.traffic();
                        (traffic.requests, traffic.bytes_received)
                    })),
                })
            }
        }
    }
}
