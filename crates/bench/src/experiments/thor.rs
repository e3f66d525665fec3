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
//!   archive, and an archive node over loopback holding the same copies (Table 6.2's
//!   "network storage").

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
}

impl ArchiveBackend {
    pub fn name(self) -> &'static str {
        match self {
            ArchiveBackend::Local => "local",
            ArchiveBackend::Node => "node",
        }
    }
}

impl std::str::FromStr for ArchiveBackend {
    type Err = lodestore::Error;

    fn from_str(text: &str) -> Result<ArchiveBackend> {
        match text {
            "local" => Ok(ArchiveBackend::Local),
            "node" => Ok(ArchiveBackend::Node),
            other => Err(lodestore::Error::InvalidArgument(format!(
                "archive backend {other:?}: the backends are local and node"
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
    /// Run the overhead part (sections 6.3 to 6.5).
    pub overhead: bool,
    /// Run the as-of part (section 6.6).
    pub as_of: bool,
    /// Run the archive-down part: commits that make page copies while the archive (an
    /// archive node) is up, then down.
    pub archive_down: bool,
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
    pub run: u32,
    /// Traversal and commit.
    pub elapsed_ms: f64,
    /// The commit alone.
    pub commit_ms: f64,
    /// As-of: archive reads the transaction made.
    pub archive_reads: u64,
    /// As-of: pages the transaction fetched from the server.
    pub pages_fetched: u64,
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
    let total =
        u64::from(config.runs) * config.delays_ms.len() as u64 * config.backends.len() as u64 * 2;
    let bar = workspace::progress_bar(total, "Thor T1 as of a snapshot", config.quiet);
    let mut records = Vec::new();
    for run in 1..=config.runs {
        for &backend in &config.backends {
            for &delay_ms in &config.delays_ms {
                for mode in ["current", "as-of"] {
                    let delay = Duration::from_secs_f64(delay_ms / 1000.0);
                    let (inner, node) = open_backend(backend, &path, page_size)?;
                    let archive = Arc::new(SlowArchive::new(inner, delay));
                    let measured = t1_cold(config, &path, &archive, mode, snapshot.id);
                    if let Some(mut node) = node {
                        node.stop()?;
                    }
                    let mut measured = measured?;
                    measured.run = run;
                    measured.backend = backend.name().into();
                    measured.delay_ms = delay_ms;
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
/// the store's pages archived on an archive node (the background archiver ships them as it
/// goes); then the node stops, and the same again. Copies then wait in the snapshot log: the
/// archive must never hold a commit up.
fn archive_down(config: &ThorConfig, template: &Path) -> Result<Vec<ThorRecord>> {
    let path = workspace::fresh_copies(template, &config.out, &["archive-down"])?.remove(0);
    let page_size = {
        let store = Store::open(&path, options(config))?;
        let size = store.page_size();
        store.close()?;
        size
    };
    let node_archive = path.with_extension("node");
    let fs: Arc<dyn lodestore::FileSystem> = Arc::new(RealFileSystem);
    fs.create_dir_all(&node_archive)?;
    let node_archive = node_archive.join("archive");
    // The node, on the same port each time it starts again (port 0 the first time).
    let start_node = |address: &str| -> Result<RunningNode> {
        let archive = LocalArchive::open(fs.clone(), &node_archive, page_size)?;
        let listener = std::net::TcpListener::bind(address)
            .map_err(|e| lodestore::Error::io(address, "listen", e))?;
        RunningNode::spawn(
            Arc::new(archive),
            page_size,
            listener,
            ServeLimits::default(),
            ServerAuth::none(),
        )
    };
    let mut node = start_node("127.0.0.1:0")?;
    let address = node.address().to_string();
    let nodes = ArchiveNodes::new(std::slice::from_ref(&address), 1, Credentials::default())?;
    let (store, module) = open_with_archive(config, &path, Arc::new(nodes))?;
    let mut session = store.session()?;
    let total = u64::from(config.runs * ARCHIVE_DOWN_TRANSACTIONS) * 2;
    let bar = workspace::progress_bar(total, "Thor commits, archive up and down", config.quiet);
    let mut records = Vec::new();
    // In turn within every run: the archive up (the node started again), then down.
    for run in 1..=config.runs {
        for mode in ["archive up", "archive down"] {
            if mode == "archive down" {
                node.stop()?;
            } else if run > 1 {
                node = start_node(&address)?;
            }
            for _ in 0..ARCHIVE_DOWN_TRANSACTIONS {
                store.snapshot()?;
                let mut measured = record(config, "archive-down", Traversal::T2a, mode);
                measured.backend = ArchiveBackend::Node.name().into();
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
    bar.finish_and_clear();
    let staged = store.snapshot_stats().map_or(0, |s| s.staged_copies);
    tracing::info!(
        staged,
        "page copies waiting for the archive when it went down"
    );
    drop(session);
    // The archive is down: the copies stay in the snapshot log (the close says so).
    store.close()?;
    Ok(records)
}

/// T1 cold on the store at `path` (opened afresh with `archive`, a new session): on the
/// current store, or as of `snapshot`.
fn t1_cold(
    config: &ThorConfig,
    path: &Path,
    archive: &Arc<SlowArchive>,
    mode: &str,
    snapshot: u64,
) -> Result<ThorRecord> {
    // Cold: the store opened afresh (an empty server pool), a new session (an empty client
    // cache).
    let (store, module) = open_with_archive(config, path, archive.clone())?;
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

/// The store at `path` with snapshots archived in `archive`, and its first module.
fn open_with_archive(
    config: &ThorConfig,
    path: &Path,
    archive: Arc<dyn Archive>,
) -> Result<(Store, lodestore::Oid<oo7::schema::Module>)> {
    let store = Store::open(
        path,
        options(config).snapshots(true).snapshot_archive(archive),
    )?;
    let module = {
        let mut session = store.session()?;
        let mut txn = session.begin()?;
        let modules = oo7::modules(&mut txn)?;
        txn.commit()?;
        modules[0]
    };
    Ok((store, module))
}

/// The archive of `backend` over the store's local archive file, and the node serving it
/// (to be stopped after the measurement) for `ArchiveBackend::Node`.
fn open_backend(
    backend: ArchiveBackend,
    store: &Path,
    page_size: usize,
) -> Result<(Arc<dyn Archive>, Option<RunningNode>)> {
    let local = LocalArchive::open(
        Arc::new(RealFileSystem),
        &Snapshots::local_archive_path(store),
        page_size,
    )?;
    match backend {
        ArchiveBackend::Local => Ok((Arc::new(local), None)),
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
            Ok((Arc::new(nodes), Some(node)))
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
    reads: AtomicU64,
}

impl SlowArchive {
    fn new(inner: Arc<dyn Archive>, delay: Duration) -> SlowArchive {
        SlowArchive {
            inner,
            delay,
            reads: AtomicU64::new(0),
        }
    }

    fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
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
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
        self.inner.get(page, time_us, buf)
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
