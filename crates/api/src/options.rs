//! Settings for opening or creating a store, as a builder.

use lodestore_client::Scheme;
use lodestore_core::limits::{
    page_size_is_supported, PAGE_SIZES_SUPPORTED, PAGE_SIZE_DEFAULT, PAGE_SIZE_MIN,
};
use lodestore_core::{Error, Result};
use lodestore_server::{RecoveryMethodKind, RestartLevel, ServerOptions};
use lodestore_storage::{FileSystem, RealFileSystem};
use lodestore_wal::segment::{SEGMENT_BYTES_MAX, SEGMENT_BYTES_MIN};
use lodestore_wal::LogOptions;
use std::sync::Arc;
use std::time::Duration;

/// Largest cache, pool or buffer an option may ask for: the memory this process may use, this
/// machine's or less where a control group limits it (a container; 1 TiB where neither can be
/// read). Past it, the allocation would fail, swap, or have the process killed. Read once per
/// process (every `Options` asks, a store's opening three times; a container's limit is set
/// as it starts).
pub fn memory_bytes_max() -> u64 {
    static MEMORY_BYTES_MAX: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *MEMORY_BYTES_MAX.get_or_init(read_memory_bytes_max)
}

fn read_memory_bytes_max() -> u64 {
    // SAFETY: sysconf only reads a system constant.
    let pages = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) };
    let machine = if pages > 0 {
        pages as u64 * lodestore_storage::os_page_bytes() as u64
    } else {
        1 << 40
    };
    CGROUP_MEMORY_LIMITS
        .iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .filter_map(|text| cgroup_limit(&text))
        .fold(machine, u64::min)
}

/// Where a control group states the memory its processes may use: version 2, then version 1.
const CGROUP_MEMORY_LIMITS: [&str; 2] = [
    "/sys/fs/cgroup/memory.max",
    "/sys/fs/cgroup/memory/memory.limit_in_bytes",
];

/// A control group's memory limit as its file states it: bytes, or `max` (none).
fn cgroup_limit(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}
/// The smallest and largest server pool [`Options::new`] gives a store by default
/// ([`default_server_pool_bytes`]).
pub const SERVER_POOL_BYTES_DEFAULT_MIN: usize = 64 << 20;
pub const SERVER_POOL_BYTES_DEFAULT_MAX: usize = 1 << 30;

/// The server pool a store gets by default: an eighth of the memory this process may use
/// ([`memory_bytes_max`]: the machine's, or its container's limit), from 64 MiB to
/// 1 GiB (redb's default cache is 1 GiB; LMDB leans on the whole OS page cache). The pool is
/// one per store, shared by all its sessions, and takes memory only as pages come into it, so
/// a small store costs no more than before while one of a few hundred megabytes stays in
/// memory instead of being read back from the data file on every visit.
pub fn default_server_pool_bytes() -> usize {
    let eighth = usize::try_from(memory_bytes_max() / 8).unwrap_or(usize::MAX);
    eighth.clamp(SERVER_POOL_BYTES_DEFAULT_MIN, SERVER_POOL_BYTES_DEFAULT_MAX)
}

/// The smallest and largest client cache [`Options::new`] gives a session by default
/// ([`default_client_cache_bytes`]).
pub const CLIENT_CACHE_BYTES_DEFAULT_MIN: usize = 64 << 20;
pub const CLIENT_CACHE_BYTES_DEFAULT_MAX: usize = 512 << 20;

/// The client cache each session gets by default: a sixteenth of the memory this process may
/// use ([`memory_bytes_max`]), from 64 MiB to 512 MiB, half the default server pool. A
/// session's objects are read and updated in its cache, so a store the cache holds is visited
/// at memory speed after its first pass, where a smaller cache copies a page out of the
/// server pool at nearly every visit (OO1 lookups on 1,000,000 parts, a 313 MB store:
/// docs/BENCHMARKS.md, "Client caches sized to the machine"). Like the pool, the cache takes
/// memory only for the frames it fills, so a small store's sessions stay small; each session
/// has its own, and sessions that all visit a large store each hold a copy of what they
/// visit: set [`Options::client_cache_bytes`] lower for many such sessions.
pub fn default_client_cache_bytes() -> usize {
    let sixteenth = usize::try_from(memory_bytes_max() / 16).unwrap_or(usize::MAX);
    sixteenth.clamp(
        CLIENT_CACHE_BYTES_DEFAULT_MIN,
        CLIENT_CACHE_BYTES_DEFAULT_MAX,
    )
}

/// Longest lock wait: past this, a transaction is stuck, not waiting.
pub const LOCK_WAIT_TIMEOUT_MAX: Duration = Duration::from_secs(24 * 3600);

/// How to open or create a store. Start from `Options::new()` and change what you need:
///
/// ```
/// let options = lodestore::Options::new()
///     .page_size(16 * 1024)
///     .client_cache_bytes(32 << 20)
///     .server_pool_bytes(64 << 20);
/// ```
#[derive(Clone)]
pub struct Options {
    pub(crate) page_size: Option<usize>,
    pub(crate) client_cache_bytes: usize,
    pub(crate) server_pool_bytes: usize,
    pub(crate) log_segment_bytes: u64,
    pub(crate) checkpoint_log_bytes: u64,
    pub(crate) checkpoint_log_records: u64,
    pub(crate) lock_wait_timeout: Duration,
    pub(crate) commit_delay: Duration,
    pub(crate) commit_siblings: usize,
    pub(crate) scheme: Scheme,
    pub(crate) recovery_method: Option<RecoveryMethodKind>,
    pub(crate) log_streams: usize,
    pub(crate) restart_level: RestartLevel,
    pub(crate) background_install: bool,
    pub(crate) keep_read_locks: bool,
    /// Warn in the log when the store far outgrows the caches (not for an inspection's
    /// in-memory recovery, which reports it itself).
    pub(crate) warn_outgrown: bool,
    pub(crate) snapshots: bool,
    /// Where snapshot pages are archived; `None`: the local archive beside the store.
    pub(crate) archive: Option<Arc<dyn lodestore_snapshots::Archive>>,
    /// Copies per read of the past (`ReadAhead`); `None`: as the archive prefers.
    pub(crate) archive_read_ahead: Option<usize>,
    pub(crate) recovery_buffer_bytes: usize,
    pub(crate) file_system: Arc<dyn FileSystem>,
    /// How a remote client proves who it is, and whether it talks TLS (`connect` only).
    pub(crate) credentials: lodestore_net::auth::Credentials,
    /// Operations multi-level transactions can run from the log (compensations).
    pub(crate) operations: Arc<crate::multilevel::Operations>,
    pub(crate) multi_level_strategy: Option<crate::multilevel::Strategy>,
    pub(crate) sphere_write_pages: usize,
    pub(crate) pages_home_min: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            page_size: None,
            client_cache_bytes: default_client_cache_bytes(),
            server_pool_bytes: default_server_pool_bytes(),
            log_segment_bytes: 1 << 20,
            checkpoint_log_bytes: lodestore_server::CHECKPOINT_LOG_BYTES_DEFAULT,
            checkpoint_log_records: lodestore_server::CHECKPOINT_LOG_RECORDS_DEFAULT,
            lock_wait_timeout: Duration::from_secs(10),
            commit_delay: Duration::ZERO,
            commit_siblings: lodestore_server::COMMIT_SIBLINGS_DEFAULT,
            scheme: Scheme::default(),
            recovery_method: None,
            log_streams: 1,
            restart_level: RestartLevel::default(),
            background_install: true,
            keep_read_locks: true,
            warn_outgrown: true,
            snapshots: false,
            archive: None,
            archive_read_ahead: None,
            recovery_buffer_bytes: 4 << 20,
            file_system: Arc::new(RealFileSystem),
            credentials: Default::default(),
            operations: Arc::default(),
            multi_level_strategy: None,
            sphere_write_pages: 0,
            pages_home_min: lodestore_server::PAGES_HOME_MIN_DEFAULT,
        }
    }
}

impl std::fmt::Debug for Options {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Options")
            .field("page_size", &self.page_size)
            .field("client_cache_bytes", &self.client_cache_bytes)
            .field("server_pool_bytes", &self.server_pool_bytes)
            .field("log_segment_bytes", &self.log_segment_bytes)
            .field("checkpoint_log_bytes", &self.checkpoint_log_bytes)
            .field("checkpoint_log_records", &self.checkpoint_log_records)
            .field("lock_wait_timeout", &self.lock_wait_timeout)
            .field("commit_delay", &self.commit_delay)
            .field("commit_siblings", &self.commit_siblings)
            .field("scheme", &self.scheme.name())
            .field("recovery_method", &self.recovery_method.map(|m| m.name()))
            .field("log_streams", &self.log_streams)
            .field("restart_level", &self.restart_level)
            .field("background_install", &self.background_install)
            .field("keep_read_locks", &self.keep_read_locks)
            .field("snapshots", &self.snapshots)
            .field(
                "archive",
                &self.archive.as_ref().map(|archive| archive.name()),
            )
            .field("recovery_buffer_bytes", &self.recovery_buffer_bytes)
            .field("operations", &self.operations)
            .field("multi_level_strategy", &self.multi_level_strategy)
            .field("sphere_write_pages", &self.sphere_write_pages)
            .field("pages_home_min", &self.pages_home_min)
            .finish_non_exhaustive()
    }
}

/// A store more than this many times a session's caches is reported as outgrowing them
/// ([`Options::outgrown_by`]).
pub const OUTGROWN_FACTOR: f64 = 2.0;

/// The server's recovery method QuickStore pairs with a client scheme: whole-page logging at
/// the client (section 3.4) goes with whole-page logging at the server, a client that ships log
/// records only with redo at the server (section 3.5), and the rest with ESM.
pub fn paired_method(scheme: Scheme) -> RecoveryMethodKind {
    if scheme.logs_whole_pages() {
        RecoveryMethodKind::Wpl
    } else if !scheme.ships_logged_pages {
        RecoveryMethodKind::Redo
    } else {
        RecoveryMethodKind::Esm
    }
}

impl Options {
    pub fn new() -> Options {
        Options::default()
    }

    /// Page size in bytes: 4, 8 (default), 16, 32 or 64 KiB. Fixed when the store is created;
    /// when opening, a size given here must match the store's.
    pub fn page_size(mut self, bytes: usize) -> Options {
        self.page_size = Some(bytes);
        self
    }

    /// Registers `O`, an application's high-level operation, so that the store can run it
    /// from the log as a compensation (multi-level transactions, [`crate::multilevel`]);
    /// needed before the store opens, for the warm start. Refused: an id below
    /// [`crate::multilevel::APPLICATION_OPERATION_ID_MIN`] or one already taken.
    pub fn operation<O: crate::multilevel::Operation>(mut self) -> Result<Options> {
        Arc::make_mut(&mut self.operations).register::<O>()?;
        Ok(self)
    }

    /// How `Session::begin_multi_level` runs multi-level transactions. Recorded in the
    /// store, like the recovery method: a store opened later without this option runs the
    /// strategy it was last given ([`crate::multilevel::Strategy::S2Ps`] if it never was).
    pub fn multi_level_strategy(mut self, strategy: crate::multilevel::Strategy) -> Options {
        self.multi_level_strategy = Some(strategy);
        self
    }

    /// With the `dbcache` recovery method: write a persistence sphere as soon as a
    /// subtransaction's end makes it this many pages (appended, not forced), rather than all
    /// at its transaction's end (Hasse & Weikum's remedy for spheres that grow too large). 0,
    /// the default: at the end.
    pub fn sphere_write_pages(mut self, pages: usize) -> Options {
        self.sphere_write_pages = pages;
        self
    }

    /// A commit (or an eviction) that ships at least this many new pages of one transaction
    /// writes them straight to the data file and logs only their numbers, instead of logging
    /// their contents and writing them again at a checkpoint: a bulk load writes each page
    /// once. Default 64 pages; 0: always log them. Used by the `esm` recovery method without
    /// snapshots; the others log every page.
    pub fn pages_home_min(mut self, pages: usize) -> Options {
        self.pages_home_min = pages;
        self
    }

    /// Memory of each session's client cache (default [`default_client_cache_bytes`]: a
    /// sixteenth of the memory this process may use, from 64 MiB to 512 MiB; frames take
    /// memory only as pages come into them). A store keeps the cache memory
    /// of up to two closed sessions for its next sessions (marked free, so the kernel takes it
    /// back when it needs it): a session opened after another closed fills memory already
    /// faulted in rather than its own.
    pub fn client_cache_bytes(mut self, bytes: usize) -> Options {
        self.client_cache_bytes = bytes;
        self
    }

    /// Memory of the server's buffer pool, shared by all sessions of the store (default
    /// [`default_server_pool_bytes`]: an eighth of the memory this process may use, from 64 MiB to
    /// 1 GiB). Pages take its memory only as they are read or written.
    pub fn server_pool_bytes(mut self, bytes: usize) -> Options {
        self.server_pool_bytes = bytes;
        self
    }

    /// LSN span of one log segment file (default 1 MiB; 256 KiB to 1 GiB). Fixed when the
    /// store is created. A restart reads the segment the log ends in whole, and the log keeps
    /// whole segments, so small segments keep restarts quick and small stores small.
    pub fn log_segment_bytes(mut self, bytes: u64) -> Options {
        self.log_segment_bytes = bytes;
        self
    }

    /// Take a checkpoint after this many bytes of log (default 16 MiB), or after
    /// [`Options::checkpoint_log_records`] records, whichever comes first. Smaller means
    /// shorter restarts after a crash (a restart replays the log from the last checkpoint) and
    /// more page writes (each checkpoint writes every dirty page home, through the
    /// double-write file).
    pub fn checkpoint_log_bytes(mut self, bytes: u64) -> Options {
        self.checkpoint_log_bytes = bytes;
        self
    }

    /// Take a checkpoint after this many log records (default 15,000), or after
    /// [`Options::checkpoint_log_bytes`], whichever comes first. A restart's time goes mostly
    /// to the records it replays, so with small updates this is the bound that keeps it short
    /// (15 to 17 ms for 15,000 small records on the project's test machine; a log of page
    /// images meets the byte bound first). The main-memory methods (`dl1p`, `dl2p`, `pl2p`) count bytes only: their
    /// fuzzy checkpoints run in steps beside the transactions.
    pub fn checkpoint_log_records(mut self, records: u64) -> Options {
        self.checkpoint_log_records = records;
        self
    }

    /// How long a transaction waits for a lock before it fails with `Error::LockTimeout`
    /// (default 10 s). Deadlocks are detected at once, whatever this is.
    pub fn lock_wait_timeout(mut self, timeout: Duration) -> Options {
        self.lock_wait_timeout = timeout;
        self
    }

    /// Adaptive commit delay (default zero: off), after PostgreSQL's `commit_delay`: a commit
    /// that would start a log sync first waits this long, so that commits arriving meanwhile
    /// share the sync, but only while at least [`Options::commit_siblings`] other transactions
    /// are active. Group commit already batches whatever arrives during a sync; a delay can
    /// add commits per sync when many threads commit at once, at the cost of latency. At most
    /// 100 ms.
    pub fn commit_delay(mut self, delay: Duration) -> Options {
        self.commit_delay = delay;
        self
    }

    /// Other active transactions a commit needs before it delays (default 5, PostgreSQL's).
    pub fn commit_siblings(mut self, siblings: usize) -> Options {
        self.commit_siblings = siblings;
        self
    }

    /// How sessions detect updates and generate log records (default `SD-ESM`); see
    /// [`Scheme`] for the names. Each session may differ; `PD-ESM` and `PAGES` install a
    /// SIGSEGV handler that passes faults outside Lodestore's caches to the handler before it.
    pub fn scheme(mut self, scheme: Scheme) -> Options {
        self.scheme = scheme;
        self
    }

    /// How the server logs and recovers: `esm` (ARIES-style records), `redo` (the same, with
    /// clients shipping log records only), `wpl` (whole-page logging), or a main-memory method
    /// of differential logging, `dl1p`, `dl2p` (XOR records, one-pass or two-pass restart) or
    /// `pl2p` (its physical-logging baseline), which keep every page in the server pool (it
    /// must hold the whole store). Unset, a new store uses `esm` and an existing one keeps its
    /// own. An existing store written under another method is recovered with that one first,
    /// then switched for good.
    pub fn recovery_method(mut self, method: RecoveryMethodKind) -> Options {
        self.recovery_method = Some(method);
        self
    }

    /// Log streams of a store that takes a differential logging method (1 to 64, default 1):
    /// each transaction logs to the idlest stream, each stream has its own files and group
    /// commit. Fixed when the store takes the method.
    pub fn log_streams(mut self, streams: usize) -> Options {
        self.log_streams = streams;
        self
    }

    /// How much of a differential logging store's restart runs at once (Lee, Kim & Cha,
    /// Table 1; default [`RestartLevel::Four`]: the backup XORed into memory while every log
    /// stream is read and replayed on a thread of its own). Lower levels exist to measure
    /// what each step of parallelism buys. The physical-logging baseline `pl2p` loads the
    /// backup first whatever the level.
    pub fn restart_level(mut self, level: RestartLevel) -> Options {
        self.restart_level = level;
        self
    }

    /// Whether the recovery method's background workers run (default on): under whole-page
    /// logging, the installer that writes committed pages from the log to their home
    /// locations between checkpoints. Off, checkpoints do it; crash campaigns turn it off so
    /// every run does the same I/O in the same order.
    pub fn background_install(mut self, on: bool) -> Options {
        self.background_install = on;
        self
    }

    /// Whether an embedded session keeps its shared page locks from one transaction to the
    /// next (default on), so that a page it read before is read again without asking for its
    /// lock or checking its copy; a writer that needs the page calls the lock back, waiting
    /// only while a transaction of the session is using it. Off, every transaction locks each
    /// page it reads again, as QuickStore does. Sessions of a remote store, and stores using
    /// the database-cache method (which records every read), never keep locks.
    pub fn keep_read_locks(mut self, on: bool) -> Options {
        self.keep_read_locks = on;
        self
    }

    /// Keep snapshots (default off): the store can then take snapshots and be read as of any
    /// of them. A store that keeps snapshots always does from then on, whatever this says
    /// when it is opened again, since every commit must keep what its snapshots need. Costs a
    /// copy of each page a transaction changes, held until it ends, and at commit a durable
    /// copy of each page whose state the newest snapshot needs.
    pub fn snapshots(mut self, on: bool) -> Options {
        self.snapshots = on;
        self
    }

    /// Archive snapshot pages in `archive` instead of the local archive file beside the store
    /// (archive nodes through `ArchiveNodes`, a backend of one's own, or the local one
    /// wrapped, as the benchmark suite does to add latency). The store records where its
    /// pages went (`Archive::location`): opened later with another archive, it refuses every
    /// read of the past with an error naming both, rather than miss the copies.
    pub fn snapshot_archive(mut self, archive: Arc<dyn lodestore_snapshots::Archive>) -> Options {
        self.archive = Some(archive);
        self
    }

    /// Copies a read of the past asks the archive for at once: the one wanted and those of
    /// the next pages changed since the snapshot, which wait in a small cache until read
    /// (`ReadAhead`). By default as the archive prefers: 1 (none) for the local archive and
    /// archive nodes, 32 for S3, whose requests overlap. At most `READ_AHEAD_MAX`.
    pub fn archive_read_ahead(mut self, copies: usize) -> Options {
        self.archive_read_ahead = Some(copies);
        self
    }

    /// Memory of each session's recovery buffer, which holds pre-images of what the running
    /// transaction changed (default 4 MiB, as in QuickStore's experiments; at least a page).
    /// When it is full, log records of the oldest pre-images are generated and shipped early.
    pub fn recovery_buffer_bytes(mut self, bytes: usize) -> Options {
        self.recovery_buffer_bytes = bytes;
        self
    }

    /// The token `Store::connect` proves it holds to the server (`Token::from_file` reads
    /// one). With a token, a server that does not ask for it, or cannot prove it holds it too,
    /// is refused.
    pub fn token(mut self, token: lodestore_net::auth::Token) -> Options {
        self.credentials.token = Some(token);
        self
    }

    /// `Store::connect` talks TLS to the server, checking its certificate and presenting the
    /// client's own if `tls` has one (`TlsClient::builder` reads them from PEM files).
    pub fn tls(mut self, tls: lodestore_net::TlsClient) -> Options {
        self.credentials.tls = Some(tls);
        self
    }

    /// The file system all I/O goes through (default: the operating system's).
    pub fn file_system(mut self, file_system: Arc<dyn FileSystem>) -> Options {
        self.file_system = file_system;
        self
    }

    /// Checks every value against its limits, naming the first one out of them. `create`,
    /// `open` and `connect` call it first, so no value reaches the engine unchecked.
    pub fn validate(&self) -> Result<()> {
        let invalid = |message: String| Err(Error::InvalidArgument(message));
        if let Some(size) = self.page_size {
            if !page_size_is_supported(size) {
                return invalid(format!(
                    "page_size {size} is not one of {PAGE_SIZES_SUPPORTED:?}"
                ));
            }
        }
        if let Some(copies) = self.archive_read_ahead {
            if !(1..=lodestore_snapshots::READ_AHEAD_MAX).contains(&copies) {
                return invalid(format!(
                    "archive_read_ahead {copies}: 1 (no reading ahead) to {}",
                    lodestore_snapshots::READ_AHEAD_MAX
                ));
            }
        }
        // Opening, the store's own page size is not known yet: the smallest one is the floor.
        let page_size = self.page_size.unwrap_or(PAGE_SIZE_MIN);
        let memory = memory_bytes_max();
        for (name, bytes) in [
            ("client_cache_bytes", self.client_cache_bytes),
            ("server_pool_bytes", self.server_pool_bytes),
            ("recovery_buffer_bytes", self.recovery_buffer_bytes),
        ] {
            if bytes < page_size || bytes as u64 > memory {
                return invalid(format!(
                    "{name} {bytes} must be from one page ({page_size} bytes) to the memory \
                     this process may use ({memory} bytes)"
                ));
            }
        }
        let segment = self.log_segment_bytes;
        if !(SEGMENT_BYTES_MIN..=SEGMENT_BYTES_MAX).contains(&segment)
            || !segment.is_multiple_of(4096)
        {
            return invalid(format!(
                "log_segment_bytes {segment} must be a multiple of 4096 from {SEGMENT_BYTES_MIN} \
                 to {SEGMENT_BYTES_MAX}"
            ));
        }
        if self.checkpoint_log_bytes == 0 {
            return invalid("checkpoint_log_bytes must be at least 1".into());
        }
        if self.checkpoint_log_records == 0 {
            return invalid("checkpoint_log_records must be at least 1".into());
        }
        let streams_max = lodestore_difflog::anchor::STREAMS_MAX;
        if !(1..=streams_max).contains(&self.log_streams) {
            return invalid(format!(
                "log_streams {} must be from 1 to {streams_max}",
                self.log_streams
            ));
        }
        if self.commit_delay > lodestore_server::COMMIT_DELAY_MAX {
            return invalid(format!(
                "commit_delay {:?} is longer than {:?}",
                self.commit_delay,
                lodestore_server::COMMIT_DELAY_MAX
            ));
        }
        if self.lock_wait_timeout > LOCK_WAIT_TIMEOUT_MAX {
            return invalid(format!(
                "lock_wait_timeout {:?} is longer than {LOCK_WAIT_TIMEOUT_MAX:?}",
                self.lock_wait_timeout
            ));
        }
        Ok(())
    }

    /// How many times a data file of `data_bytes` outgrows the memory these options give one
    /// session (its client cache and the server pool), when that is more than
    /// [`OUTGROWN_FACTOR`]: most of its pages are then read from the data file on every visit,
    /// and larger caches would help. `None` when the store fits well enough.
    pub fn outgrown_by(&self, data_bytes: u64) -> Option<f64> {
        let caches = (self.client_cache_bytes + self.server_pool_bytes) as f64;
        let factor = data_bytes as f64 / caches;
        (factor > OUTGROWN_FACTOR).then_some(factor)
    }

    pub(crate) fn page_size_or_default(&self) -> usize {
        self.page_size.unwrap_or(PAGE_SIZE_DEFAULT)
    }

    pub(crate) fn server_options(&self) -> ServerOptions {
        ServerOptions {
            pool_bytes: self.server_pool_bytes,
            log: LogOptions {
                segment_bytes: self.log_segment_bytes,
                ..LogOptions::default()
            },
            checkpoint_log_bytes: self.checkpoint_log_bytes,
            checkpoint_log_records: self.checkpoint_log_records,
            lock_wait_timeout: self.lock_wait_timeout,
            method: self.recovery_method,
            commit_delay: self.commit_delay,
            commit_siblings: self.commit_siblings,
            log_streams: self.log_streams,
            restart_level: self.restart_level,
            multi_level_strategy: self.multi_level_strategy.map(|s| s.code()),
            sphere_write_pages: self.sphere_write_pages,
            pages_home_min: self.pages_home_min,
            // The store gives it the snapshot component when it keeps snapshots.
            versions: None,
        }
    }
}

#[cfg(test)]
mod pairing_tests {
    use super::*;

    /// QuickStore's pairing, derived from what each scheme does rather than its name.
    #[test]
    fn every_scheme_pairs_with_the_method_quickstore_gives_it() {
        for scheme in Scheme::all() {
            let expected = match scheme.name() {
                "WPL" | "WPL-UFFD" => RecoveryMethodKind::Wpl,
                "PD-REDO" => RecoveryMethodKind::Redo,
                _ => RecoveryMethodKind::Esm,
            };
            assert_eq!(paired_method(scheme), expected, "{}", scheme.name());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_control_group_limit_is_read_as_bytes_or_none() {
        assert_eq!(cgroup_limit("536870912\n"), Some(512 << 20));
        assert_eq!(cgroup_limit("max\n"), None);
        assert_eq!(cgroup_limit(""), None);
        // Whatever limits this process, the bound never exceeds the machine's memory.
        // SAFETY: sysconf only reads system constants.
        let machine = unsafe {
            libc::sysconf(libc::_SC_PHYS_PAGES) as u64 * libc::sysconf(libc::_SC_PAGESIZE) as u64
        };
        assert!(memory_bytes_max() <= machine);
        // Read once: what later calls get is what a read finds.
        assert_eq!(memory_bytes_max(), read_memory_bytes_max());
    }

    #[test]
    fn read_ahead_out_of_bounds_is_refused_by_name() {
        for copies in [0, lodestore_snapshots::READ_AHEAD_MAX + 1] {
            let err = Options::new()
                .archive_read_ahead(copies)
                .validate()
                .unwrap_err();
            assert!(err.to_string().contains("archive_read_ahead"), "{err}");
        }
        for copies in [1, 32, lodestore_snapshots::READ_AHEAD_MAX] {
            Options::new()
                .archive_read_ahead(copies)
                .validate()
                .unwrap();
        }
    }

    #[test]
    fn a_store_is_outgrown_past_twice_the_caches_of_one_session() {
        let options = Options::new()
            .client_cache_bytes(64 << 20)
            .server_pool_bytes(64 << 20);
        assert_eq!(options.outgrown_by(256 << 20), None, "exactly twice fits");
        assert_eq!(options.outgrown_by(10 << 20), None);
        let factor = options.outgrown_by(313 << 20).unwrap();
        assert!((factor - 313.0 / 128.0).abs() < 1e-9, "{factor}");
        // Larger caches make the same store fit.
        let larger = options.server_pool_bytes(512 << 20);
        assert_eq!(larger.outgrown_by(313 << 20), None);
    }
}
