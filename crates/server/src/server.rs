//! The in-process server: one volume, its log, buffer pool, locks and free space, behind the
//! [`PageServer`] interface.
//!
//! Buffer policy: STEAL/NO-FORCE. Changes shipped by clients become log records and go into the
//! pool; commit appends a commit record and waits for the group flush of the log; dirty pages
//! reach the data file only when evicted or at a checkpoint, and only after the log is durable
//! up to their LSN (the write-ahead rule, enforced in `write_back`).

use crate::buffer_pool::BufferPool;
use crate::fresh_pages::FreshPages;
use crate::home_run::HomeRun;
use crate::interface::{
    AppendedCommit, LockMode, LockTarget, ObjectUpdate, ObjectUpdates, OperationNote, PageServer,
    PageUpdate, PageUpdates, ShippedPage, ShippedRecords, TxnKind,
};
use crate::lock_table::{LockManager, LockStats};
use crate::multilevel::{MultiLevelState, PendingNote, SubRelease};
use crate::recovery::{RecoveryMethod, RecoveryMethodKind, RestartReport};
use crate::reservations::Reservations;
use crate::space::{entry_for_image, SpaceManager};
use crate::stats::ServerStats;
use crate::versions::{Snapshot, Versions};
use lodestore_core::frames::FrameId;
use lodestore_core::{Error, Lsn, Oid, PageId, Result, TxnId, VolumeId};
use lodestore_storage::doublewrite::DoubleWrite;
use lodestore_storage::large::Extent;
use lodestore_storage::page::{self, PageKind};
use lodestore_storage::spacemap::{self, ENTRY_FREE, ENTRY_UNAVAILABLE};
use lodestore_storage::volume::EXTEND_PAGES_MAX;
use lodestore_storage::{directory::DIRECTORY_PAGE, slotted, FileSystem, OpenMode, Volume};
use lodestore_wal::{ActiveTxn, Log, LogOptions, RecordBody};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::ops::Range;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The server's state, held. The state's mutex spins briefly before it sleeps (parking_lot):
/// its holds are short and many sessions take it several times a transaction, where a std
/// mutex's sleeps and wake-ups cost more than the holds (docs/BENCHMARKS.md). It has no
/// poisoning, so a panic while the state is held marks the server failed here instead: the
/// state may be half changed, and every later request is refused, as after a failed write.
pub(crate) struct StateGuard<'a>(parking_lot::MutexGuard<'a, State>);

impl std::ops::Deref for StateGuard<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        &self.0
    }
}

impl std::ops::DerefMut for StateGuard<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.0
    }
}

impl Drop for StateGuard<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0
                .failed
                .get_or_insert_with(|| "a panic while the server's state was held".to_string());
        }
    }
}

/// How many pages the file grows by at least, so allocation does not extend page by page.
const EXTEND_PAGES_MIN: u32 = 64;
/// How many hinted pages `find_space` tries before it gives up.
const FIND_SPACE_CANDIDATES_MAX: usize = 16;
/// `find_space` offers a page only with room for a `1 / FIND_SPACE_ROOM_MIN_PART` of a page at
/// least (256 bytes of 8 KiB): a smaller hole would cost a read of the page, a logged change
/// and a checkpoint write to take a few bytes. A bulk load otherwise reads back nearly every
/// page it filled to put one small object in the bytes left at its end.
const FIND_SPACE_ROOM_MIN_PART: usize = 32;
/// The fewest frames a buffer pool may have.
pub const POOL_PAGES_MIN: usize = 4;
/// Folder of the log inside a store.
pub const LOG_DIR_NAME: &str = "log";

/// The default log between checkpoints. A restart replays the log from the last checkpoint, so
/// a shorter interval bounds restart after a crash more tightly; but each checkpoint writes the
/// pool's dirty pages home, twice for those that go through the double-write file, and so does
/// the checkpoint a restart ends with (measured in `docs/BENCHMARKS.md`: after OO1 updates on
/// 1,000,000 parts, a restart with 16 MiB of log to replay took about 0.55 s, with 64 MiB 1 s;
/// loads and traversals ran as fast at 16 MiB as at 64, T2C and OO1 loads slower at 8).
pub const CHECKPOINT_LOG_BYTES_DEFAULT: u64 = 16 << 20;

/// The default number of log records between checkpoints. A restart pays for each record it
/// replays (decoding, the transaction tables, the page it lands on) more than for its
/// bytes: 16 MiB of small updates, 220,000 records, took about 0.1 s to replay, so a bound
/// on bytes alone lets a log of small records grow a restart past 20 ms. At this bound a
/// restart after atomic-part updates took 15 to 17 ms on this project's test machine
/// (`docs/BENCHMARKS.md`, "A checkpoint bound on records").
pub const CHECKPOINT_LOG_RECORDS_DEFAULT: u64 = 15_000;

/// Server settings.
#[derive(Clone)]
pub struct ServerOptions {
    /// Memory of the server buffer pool, in bytes (whole pages of it are used).
    pub pool_bytes: usize,
    /// Log settings (segment size is fixed when the store is created).
    pub log: LogOptions,
    /// A checkpoint is taken after this many bytes of log,
    pub checkpoint_log_bytes: u64,
    /// or after this many log records, whichever comes first.
    pub checkpoint_log_records: u64,
    /// How long a lock request waits before it fails with `LockTimeout`.
    pub lock_wait_timeout: Duration,
    /// How the server logs and recovers; `None`: as the store did before (the registry's
    /// default for a new store).
    pub method: Option<RecoveryMethodKind>,
    /// A component that keeps old versions of pages, beside the recovery method (see
    /// [`crate::versions`]).
    pub versions: Versions,
    /// Adaptive commit delay (PostgreSQL's `commit_delay`): a committer that leads a log
    /// flush first waits this long, so that more commits join its sync, but only while at
    /// least `commit_siblings` other transactions are active. Zero (the default): no wait.
    pub commit_delay: Duration,
    pub commit_siblings: usize,
    /// Log streams of a store created with (or switched to) a method that keeps several
    /// (differential logging); a store that has them keeps its number.
    pub log_streams: usize,
    /// Differential logging's restart parallelism (Lee, Kim & Cha, Table 1), 1 to 4: see
    /// [`crate::recovery::RestartLevel`]. Default 4.
    pub restart_level: crate::recovery::RestartLevel,
    /// The multi-level strategy to record in the superblock (its code: 1 S1, 2 S2, 3 S2/PS);
    /// `None` keeps what the store has.
    pub multi_level_strategy: Option<u8>,
    /// Deferred page writes (`dbcache`): a persistence sphere that reaches this many pages at
    /// a subtransaction's end is written then, not forced (Hasse & Weikum's remedy for large
    /// spheres); 0: spheres wait for their transaction's end.
    pub sphere_write_pages: usize,
    /// A shipment that brings at least this many new pages of one transaction (free until
    /// then, never logged) writes them to the data file, synced, and logs only their numbers
    /// (`RecordBody::PagesHome`) instead of their contents, where the recovery method allows
    /// it (ESM, without snapshots): a bulk load writes each page once instead of into the
    /// log and again at a checkpoint. It costs two extra syncs per such shipment, so small
    /// transactions stay logged. 0: never. PostgreSQL's `wal_skip_threshold` is the model.
    pub pages_home_min: usize,
}

/// Default [`ServerOptions::pages_home_min`]: 64 pages (512 KiB of 8 KiB pages), where
/// logging the pages and writing them again at a checkpoint costs more than two syncs.
pub const PAGES_HOME_MIN_DEFAULT: usize = 64;

/// Longest adaptive commit delay: past it, a commit waits longer than a sync takes on any
/// disk, and throughput only falls.
pub const COMMIT_DELAY_MAX: Duration = Duration::from_millis(100);
/// Other active transactions a committer needs before it delays by default (PostgreSQL's).
pub const COMMIT_SIBLINGS_DEFAULT: usize = 5;

impl std::fmt::Debug for ServerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerOptions")
            .field("pool_bytes", &self.pool_bytes)
            .field("log", &self.log)
            .field("checkpoint_log_bytes", &self.checkpoint_log_bytes)
            .field("checkpoint_log_records", &self.checkpoint_log_records)
            .field("lock_wait_timeout", &self.lock_wait_timeout)
            .field("method", &self.method)
            .field("versions", &self.versions.is_some())
            .field("commit_delay", &self.commit_delay)
            .field("commit_siblings", &self.commit_siblings)
            .field("log_streams", &self.log_streams)
            .field("restart_level", &self.restart_level)
            .field("multi_level_strategy", &self.multi_level_strategy)
            .field("sphere_write_pages", &self.sphere_write_pages)
            .field("pages_home_min", &self.pages_home_min)
            .finish()
    }
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            pool_bytes: 64 << 20,
            log: LogOptions::default(),
            checkpoint_log_bytes: CHECKPOINT_LOG_BYTES_DEFAULT,
            checkpoint_log_records: CHECKPOINT_LOG_RECORDS_DEFAULT,
            lock_wait_timeout: Duration::from_secs(10),
            method: None,
            versions: None,
            commit_delay: Duration::ZERO,
            commit_siblings: COMMIT_SIBLINGS_DEFAULT,
            log_streams: 1,
            restart_level: crate::recovery::RestartLevel::default(),
            multi_level_strategy: None,
            sphere_write_pages: 0,
            pages_home_min: PAGES_HOME_MIN_DEFAULT,
        }
    }
}

/// Marks the server failed by `e`, a write that left the pool ahead of the file, and returns
/// it.
fn write_failed(state: &mut State, e: Error) -> Error {
    state.failed = Some(e.to_string());
    e
}

/// What a transaction's commit needs to know of a new page it wrote home (see
/// `Server::write_new_pages_home`).
#[derive(Clone, Copy, Debug)]
pub struct HomedPage {
    /// The space hint of the image written.
    pub hint: u8,
    /// The image was a slotted page without objects.
    pub empty: bool,
}

pub struct Server {
    /// The file system and folder of the store (methods with files of their own open them
    /// there).
    pub(crate) fs: Arc<dyn FileSystem>,
    pub(crate) dir: std::path::PathBuf,
    pub(crate) volume: Volume,
    pub(crate) log: Log,
    pub(crate) locks: LockManager,
    pub(crate) state: parking_lot::Mutex<State>,
    pub(crate) method: Box<dyn RecoveryMethod>,
    options: ServerOptions,
    restart: RestartReport,
    /// `close` ran: dropping the server does nothing more.
    closed: std::sync::atomic::AtomicBool,
    /// Subtransactions whose commit was appended, their locks still held (multi-level
    /// transactions; `Server::subs_appended`).
    pub(crate) subs_appended: Mutex<rustc_hash::FxHashSet<TxnId>>,
    /// Runs the compensations of a level-1 transaction whose client left
    /// (`Server::abandon`); the store that runs this server installs it.
    pub(crate) compensator: Mutex<Option<crate::multilevel::Compensator>>,
}

/// Everything the server changes under its one mutex.
pub(crate) struct State {
    pub pool: BufferPool,
    pub space: SpaceManager,
    /// Ordered, so that everything the server does is a function of its inputs (crash
    /// campaigns replay exactly).
    pub txns: BTreeMap<TxnId, TxnState>,
    pub next_txn: u64,
    /// Begin LSN of the newest checkpoint, where the next restart starts reading the log.
    pub restart_lsn: Lsn,
    /// Pages whose whole image the log holds from the restart point on (fresh pages, imaged
    /// at their first change): a torn home write of one is rebuilt from the log, so it needs
    /// no double write. Emptied when a checkpoint moves the restart point.
    pub logged_whole: HashSet<PageId>,
    /// Where pages go before a home write a crash could tear (see
    /// [`lodestore_storage::doublewrite`]).
    pub double_write: DoubleWrite,
    /// Log end when the last checkpoint finished,
    pub checkpoint_log_end: Lsn,
    /// and the log's count of records appended then.
    pub checkpoint_log_records: u64,
    /// Records of the log from the restart point that were there before this process
    /// appended any: a restart that left its pages to the next checkpoint counts them
    /// toward it, so the next crash replays no more than the bound.
    pub checkpoint_records_carried: u64,
    pub stats: ServerStats,
    /// What the recovery method keeps beside the engine's state (whole-page logging: its table
    /// of page images in the log); each method reads its own (`RecoveryMethod::fresh_state`).
    pub method_state: Box<dyn std::any::Any + Send>,
    /// Set when a write failed half way: the in-memory state no longer matches the disk and
    /// the server refuses further work until it is reopened (and recovers).
    pub failed: Option<String>,
    /// Pages that have not been in the pool since an extension of the volume wrote them
    /// free: an allocation installs that image instead of reading it back (a bulk load
    /// allocates thousands), and a reservation takes them without caching them.
    pub fresh_pages: FreshPages,
    /// Pages reserved for clients across their transactions (`PageServer::reserve_pages`).
    pub reservations: Reservations,
    /// Was everything committed at its home location when the last checkpoint (or a restart
    /// that found nothing to do) ended? With no log since, a clean close then has nothing
    /// to write.
    pub home_at_checkpoint: bool,
    /// Level-1 transactions with subtransactions (multi-level transactions).
    pub multilevel: MultiLevelState,
    /// The buffer of the last run of pages written home, kept for the next: a new one per
    /// commit was memory touched for the first time at every commit of a bulk load.
    pub home_run_buffer: Vec<u8>,
}

/// What the server remembers about an active transaction.
#[derive(Default)]
pub(crate) struct TxnState {
    pub first_lsn: Lsn,
    pub last_lsn: Lsn,
    /// Pages the transaction changed (their space hints are refreshed at its end).
    pub touched: BTreeSet<PageId>,
    /// Pages handed out by `allocate_pages` (reserved in the space map until the end).
    pub allocated: Vec<PageId>,
    /// Pages to format as free at commit.
    pub freed: Vec<PageId>,
    /// New pages written to the data file by the transaction itself (logged by number only)
    /// and not changed since, with what the commit needs to know of the image written, so it
    /// need not read them back.
    pub homed: BTreeMap<PageId, HomedPage>,
    /// A read-only transaction of the store as of this snapshot: no locks, no changes.
    pub as_of: Option<Snapshot>,
    /// A subtransaction's level-1 transaction.
    pub parent: Option<TxnId>,
    /// What the subtransaction logs at level 1 when it commits.
    pub note: Option<PendingNote>,
}

impl Server {
    /// Creates a store in folder `dir` and serves it.
    pub fn create(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        page_size: usize,
        options: ServerOptions,
    ) -> Result<Server> {
        refuse_versions_with(options.method.unwrap_or_default(), &options)?;
        let volume = Volume::create(fs.as_ref(), dir, page_size)?;
        let double_write = DoubleWrite::open(fs.as_ref(), dir, page_size)?;
        let log = Log::create(
            fs.clone(),
            &dir.join(LOG_DIR_NAME),
            log_options(&options, page_size),
        )?;
        let server = Server::assemble(fs, dir, volume, double_write, log, options)?;
        {
            let mut state = server.lock_state();
            state.space = SpaceManager::load(&server.volume)?;
            server.method.attach(&server, &mut state)?;
            server.checkpoint_locked_with(&mut state, true)?;
        }
        Ok(server)
    }

    /// Opens the store in folder `dir`, recovers it from its log, and serves it.
    pub fn open(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        requested_page_size: Option<usize>,
        mut options: ServerOptions,
    ) -> Result<Server> {
        let volume = Volume::open(fs.as_ref(), dir, requested_page_size, OpenMode::Existing)?;
        let double_write = DoubleWrite::open(fs.as_ref(), dir, volume.page_size())?;
        let sb = volume.superblock();
        if sb.checkpoint_lsn == Lsn::ZERO {
            return Err(Error::CorruptSuperblock {
                path: volume.path().to_path_buf(),
                reason: "no checkpoint recorded: the store was never completely created".into(),
            });
        }
        options.log.segment_bytes = sb.log_segment_bytes;
        // The restart scans the whole log from the checkpoint (and reports damage anywhere in
        // it): opening only needs to find the end.
        let (log, end) = Log::open_at_end(
            fs.clone(),
            &dir.join(LOG_DIR_NAME),
            log_options(&options, volume.page_size()),
            sb.checkpoint_lsn,
        )?;
        // The log is read by the method that wrote it; a different method asked for takes over
        // once everything committed is at its home location.
        let recorded = RecoveryMethodKind::from_code(sb.recovery_method);
        let wanted = options.method.unwrap_or(recorded);
        refuse_versions_with(wanted, &options)?;
        let restart_with = if recorded.same_log(wanted) {
            wanted
        } else {
            recorded
        };
        let mut server = Server::assemble(fs, dir, volume, double_write, log, options)?;
        match server.recover(restart_with, wanted, recorded, sb.checkpoint_lsn, end) {
            Ok(()) => Ok(server),
            Err(e) => {
                // A store that did not recover is left as the crash left it: dropping the
                // server must not checkpoint what recovery only half rebuilt.
                server
                    .closed
                    .store(true, std::sync::atomic::Ordering::Release);
                Err(e)
            }
        }
    }

    /// Recovers with `restart_with` (the method that wrote the log), then switches to
    /// `wanted` if it differs.
    fn recover(
        &mut self,
        restart_with: RecoveryMethodKind,
        wanted: RecoveryMethodKind,
        recorded: RecoveryMethodKind,
        checkpoint: Lsn,
        end: lodestore_wal::LogEnd,
    ) -> Result<()> {
        self.use_method(restart_with);
        let report = {
            let mut state = self.lock_state();
            self.method.attach(self, &mut state)?;
            crate::recovery::restart::run(self, &mut state, checkpoint, end)?
        };
        tracing::info!(?report, method = restart_with.name(), "recovered");
        if restart_with != wanted {
            self.checkpoint_with(true)?;
            self.method.detach(self)?;
            self.use_method(wanted);
            let mut state = self.lock_state();
            self.method.attach(self, &mut state)?;
        }
        let strategy_changed = self
            .options
            .multi_level_strategy
            .is_some_and(|code| code != self.volume.superblock().multi_level_strategy);
        if wanted != recorded || strategy_changed {
            // The superblock names the method and strategy from this checkpoint on.
            self.checkpoint_with(false)?;
            if wanted != recorded {
                tracing::info!(
                    from = recorded.name(),
                    to = wanted.name(),
                    "recovery method changed"
                );
            }
        }
        self.restart = report;
        Ok(())
    }

    /// Makes `kind` the recovery method, with fresh state of its own.
    fn use_method(&mut self, kind: RecoveryMethodKind) {
        self.method = kind.build();
        let fresh = self.method.fresh_state();
        self.state.get_mut().method_state = fresh;
    }

    fn assemble(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        volume: Volume,
        double_write: DoubleWrite,
        log: Log,
        options: ServerOptions,
    ) -> Result<Server> {
        let pool_pages = pool_pages("server pool", options.pool_bytes, volume.page_size())?;
        let pool = BufferPool::new(volume.page_size(), pool_pages);
        let method = options.method.unwrap_or_default().build();
        let method_state = method.fresh_state();
        Ok(Server {
            fs,
            dir: dir.to_path_buf(),
            locks: LockManager::new(options.lock_wait_timeout),
            method,
            state: parking_lot::Mutex::new(State {
                pool,
                space: SpaceManager::empty(volume.page_size()),
                txns: BTreeMap::new(),
                next_txn: 1,
                restart_lsn: volume.superblock().checkpoint_lsn,
                logged_whole: HashSet::new(),
                double_write,
                checkpoint_log_end: log.end_lsn(),
                checkpoint_log_records: log.stats().records,
                checkpoint_records_carried: 0,
                stats: ServerStats::default(),
                method_state,
                failed: None,
                fresh_pages: FreshPages::default(),
                reservations: Reservations::default(),
                home_at_checkpoint: false,
                multilevel: MultiLevelState::default(),
                home_run_buffer: Vec::new(),
            }),
            volume,
            log,
            options,
            restart: RestartReport::default(),
            closed: std::sync::atomic::AtomicBool::new(false),
            subs_appended: Mutex::default(),
            compensator: Mutex::default(),
        })
    }

    pub fn volume(&self) -> &Volume {
        &self.volume
    }

    pub fn log(&self) -> &Log {
        &self.log
    }

    /// Counters of the server's log and of the recovery method's log streams, together.
    pub fn log_stats(&self) -> lodestore_wal::LogStats {
        let mut stats = self.log.stats();
        for stream in self.method.stream_stats() {
            stats.add(&stream);
        }
        stats
    }

    /// Counters of each log stream of the recovery method (none for methods with one log).
    pub fn stream_stats(&self) -> Vec<lodestore_wal::LogStats> {
        self.method.stream_stats()
    }

    /// The folder of the store's log.
    pub fn log_dir(&self) -> std::path::PathBuf {
        self.volume
            .path()
            .parent()
            .map(|dir| dir.join(LOG_DIR_NAME))
            .unwrap_or_default()
    }

    pub fn options(&self) -> &ServerOptions {
        &self.options
    }

    /// Name of the recovery method in use.
    pub fn recovery_method(&self) -> &'static str {
        self.method.kind().name()
    }

    pub fn recovery_method_kind(&self) -> RecoveryMethodKind {
        self.method.kind()
    }

    /// The versions component, or an error saying what needs one.
    fn versions(&self, what: &str) -> Result<&Arc<dyn crate::versions::PageVersions>> {
        self.options.versions.as_ref().ok_or_else(|| {
            Error::Unsupported(format!(
                "{what}: this store keeps no snapshots (open it with snapshots on)"
            ))
        })
    }

    /// Does the server keep old versions of pages (snapshots)?
    pub fn keeps_versions(&self) -> bool {
        self.options.versions.is_some()
    }

    /// Takes a snapshot: a cut in the log under the server's state, so it holds exactly the
    /// transactions committed before it, all of each; returns once it is durable, with
    /// everything it holds.
    pub fn take_snapshot(&self) -> Result<Snapshot> {
        let versions = self.versions("taking a snapshot")?;
        let snapshot = {
            let mut state = self.usable_state()?;
            // Transactions running now commit after the snapshot: it needs the committed image
            // of every page they changed. Those kept at the first change are there; the others
            // the recovery method recovers in memory.
            let running: Vec<(TxnId, Vec<PageId>)> = state
                .txns
                .iter()
                .filter(|(_, own)| own.as_of.is_none())
                .map(|(&txn, own)| {
                    let missing = own
                        .touched
                        .iter()
                        .copied()
                        .filter(|&page| !versions.has_pre_image(txn, page))
                        .collect();
                    (txn, missing)
                })
                .filter(|(_, missing): &(TxnId, Vec<PageId>)| !missing.is_empty())
                .collect();
            for (txn, pages) in running {
                let images = self
                    .method
                    .committed_images(self, &mut state, txn, &pages)?;
                for (page, image) in pages.iter().zip(&images) {
                    versions.first_change(txn, *page, image);
                }
            }
            versions.take_snapshot(self.log.end_lsn())?
        };
        if snapshot.lsn.0 > 0 {
            self.log.flush(Lsn(snapshot.lsn.0 - 1))?;
        }
        versions.persist_snapshot(&snapshot)?;
        Ok(snapshot)
    }

    /// The durable snapshots, oldest first (none without a versions component).
    pub fn list_snapshots(&self) -> Vec<Snapshot> {
        self.options
            .versions
            .as_ref()
            .map(|versions| versions.list())
            .unwrap_or_default()
    }

    /// Deletes the snapshots `which` picks; returns them.
    pub fn delete_snapshots(&self, which: &dyn Fn(&Snapshot) -> bool) -> Result<Vec<Snapshot>> {
        self.versions("deleting snapshots")?.delete(which)
    }

    /// News of the snapshots taken after `prev_us` (see `lodestore_protocol::snapshot_news`).
    pub fn snapshot_news(&self, prev_us: u64) -> Result<lodestore_protocol::SnapshotNews> {
        Ok(self.versions("snapshot news")?.news_since(prev_us))
    }

    /// Copies `page` as it was at `snapshot` into `buf`: the versions component's copy, else
    /// the committed image an active transaction's first change kept, else the current page,
    /// which then has not changed since the snapshot.
    pub fn page_as_of(&self, page: PageId, snapshot: &Snapshot, buf: &mut [u8]) -> Result<()> {
        let versions = self.versions("reading as of a snapshot")?;
        if versions.copy_as_of(page, snapshot, buf)? {
            return Ok(());
        }
        let mut state = self.usable_state()?;
        // Under the state no commit can add a copy: a commit's copies are made before its
        // record is appended, and that happens under the state.
        if versions.has_copy_as_of(page, snapshot) {
            drop(state);
            if versions.copy_as_of(page, snapshot, buf)? {
                return Ok(());
            }
            return Err(Error::Io {
                path: self.volume.path().to_path_buf(),
                operation: "read as of a snapshot",
                source: std::io::Error::other(format!(
                    "the copy of page {page} for snapshot {} vanished while read",
                    snapshot.id
                )),
            });
        }
        if versions.pre_image(page, buf) {
            return Ok(());
        }
        self.cache_page(&mut state, page)?;
        buf.copy_from_slice(state.pool.get(page).expect("page just cached"));
        Ok(())
    }

    /// The snapshot `txn` reads as of, if it is such a transaction.
    fn as_of(&self, txn: TxnId) -> Result<Option<Snapshot>> {
        if self.options.versions.is_none() {
            return Ok(None);
        }
        let state = self.usable_state()?;
        let own = state.txns.get(&txn).ok_or_else(|| inactive(txn))?;
        Ok(own.as_of)
    }

    /// Keeps the committed image of `page` for the versions component before `txn` changes it
    /// for the first time.
    fn before_first_change(&self, state: &mut State, txn: TxnId, page: PageId) -> Result<()> {
        let Some(versions) = &self.options.versions else {
            return Ok(());
        };
        let own = state.txns.get(&txn).ok_or_else(|| inactive(txn))?;
        if own.as_of.is_some() {
            return Err(read_only(txn));
        }
        if own.touched.contains(&page) || !versions.wants_pre_image(page) {
            return Ok(());
        }
        self.cache_page_in_change(state, page)?;
        versions.first_change(txn, page, state.pool.get(page).expect("page just cached"));
        Ok(())
    }

    /// The workers the recovery method runs in the background.
    pub fn background_workers(&self) -> Vec<crate::workers::BackgroundWorker> {
        let mut workers = self.method.background_workers();
        if self.options.versions.is_some() {
            workers.push(crate::workers::BackgroundWorker {
                name: "archiver",
                turn: |server| match &server.options.versions {
                    Some(versions) => versions.background_turn(),
                    None => Ok(false),
                },
            });
        }
        workers
    }

    /// Pages the recovery method holds in the log but not yet at their home location.
    pub fn pages_awaiting_install(&self) -> usize {
        let state = self.lock_state();
        self.method.pages_awaiting_install(&state)
    }

    /// What the last restart found and did.
    pub fn restart_report(&self) -> &RestartReport {
        &self.restart
    }

    pub fn stats(&self) -> ServerStats {
        self.lock_state().stats
    }

    pub fn lock_stats(&self) -> LockStats {
        self.locks.stats()
    }

    /// The largest persistence sphere since the server started or the last call, which starts
    /// the next period (a benchmark's runs each want their own maximum).
    pub fn take_sphere_pages_max(&self) -> u64 {
        std::mem::take(&mut self.lock_state().stats.sphere_pages_max)
    }

    pub(crate) fn lock_state(&self) -> StateGuard<'_> {
        StateGuard(self.state.lock())
    }

    /// The state, unless an earlier failure left it unusable.
    pub(crate) fn usable_state(&self) -> Result<StateGuard<'_>> {
        let state = self.lock_state();
        if let Some(reason) = &state.failed {
            return Err(Error::Io {
                path: self.volume.path().to_path_buf(),
                operation: "serve",
                source: std::io::Error::other(format!(
                    "stopped after an earlier failure ({reason}); reopen the store to recover"
                )),
            });
        }
        Ok(state)
    }

    /// Is `page` one a client may lock and fetch?
    pub(crate) fn check_data_page(&self, page: PageId) -> Result<()> {
        let is_data = page.0 >= DIRECTORY_PAGE.0
            && page.0 < self.volume.page_count()
            && !spacemap::is_map_page(page, self.volume.page_size());
        if is_data {
            Ok(())
        } else {
            Err(Error::NoSuchPage { page })
        }
    }

    // ---- the buffer pool ----------------------------------------------------------------

    /// Makes sure `page` is in the pool, reading it from the data file if needed, or from the
    /// log when the recovery method keeps a newer copy there. A page read from the data file
    /// is checked whole: its checksum, header and structure.
    pub(crate) fn cache_page(&self, state: &mut State, page: PageId) -> Result<()> {
        self.cache_page_checked(state, page, true)
    }

    /// [`Self::cache_page`] for a page in the middle of a change: one the caller's
    /// transaction holds exclusively, or one recovery redoes or undoes. Log records of one
    /// change may reach the server apart (a client logs a page's blocks as its recovery
    /// buffer lets them go), and a steal may write the page home between them; its slotted
    /// structure is whole again only once the change is complete, so only the checksum and
    /// header are checked here.
    pub(crate) fn cache_page_in_change(&self, state: &mut State, page: PageId) -> Result<()> {
        self.cache_page_checked(state, page, false)
    }

    /// Locks `page` for `txn` and caches it; with `fetch`, also copies the version `txn` sees
    /// there (a client's miss: one lock request and one pass through the server's state for
    /// both). Returns the LSN of the page's version in the pool (for a transaction as of a
    /// snapshot, which takes no locks: of the version it sees).
    fn lock_page_fetching(
        &self,
        txn: TxnId,
        page: PageId,
        mode: LockMode,
        fetch: Option<&mut [u8]>,
    ) -> Result<Lsn> {
        if mode == LockMode::Increment {
            return Err(Error::InvalidArgument(format!(
                "page {page} locked in increment mode: pages are locked shared or exclusive"
            )));
        }
        self.check_data_page(page)?;
        if let Some(snapshot) = self.as_of(txn)? {
            // Reads of the past take no locks: nothing there changes.
            if mode == LockMode::Exclusive {
                return Err(read_only(txn));
            }
            return match fetch {
                Some(buf) => {
                    self.page_as_of(page, &snapshot, buf)?;
                    Ok(page::lsn(buf))
                }
                None => {
                    let mut buf = vec![0u8; self.volume.page_size()];
                    self.page_as_of(page, &snapshot, &mut buf)?;
                    Ok(page::lsn(&buf))
                }
            };
        }
        let held = self.locks.acquire(txn, page, mode)?;
        let mut state = self.usable_state()?;
        if !state.txns.contains_key(&txn) {
            // Not a transaction of this server: take back what was just granted.
            drop(state);
            self.locks.release_all(txn);
            return Err(inactive(txn));
        }
        let defers = self.method.defers_page_writes();
        Server::sub_locked_page(&mut state, txn, page, defers);
        if let Some(frame) = state.pool.lookup(page) {
            // The common case, the page in the pool: nothing to read or to check again.
            state.stats.pool_hits += 1;
            let lsn = state.pool.frame_lsn(frame);
            if let Some(buf) = fetch {
                buf.copy_from_slice(state.pool.frame_bytes(frame));
                state.stats.pages_fetched_by_clients += 1;
            }
            return Ok(lsn);
        }
        let own = held == LockMode::Exclusive;
        if let Some(buf) = fetch {
            let (mut state, read_here) = self.cache_locked_page(state, page, own, buf)?;
            if !read_here {
                buf.copy_from_slice(state.pool.get(page).expect("page just cached"));
            }
            state.stats.pages_fetched_by_clients += 1;
            return Ok(page::lsn(buf));
        }
        // A page to read into only when the read happens (the state is held until then).
        let mut scratch = if self.must_read_from_disk(&state, page) {
            vec![0u8; self.volume.page_size()]
        } else {
            Vec::new()
        };
        let (mut state, _) = self.cache_locked_page(state, page, own, &mut scratch)?;
        Ok(state.pool.page_lsn(page).expect("page just cached"))
    }

    /// Caches `page` for a transaction that holds a lock on it (exclusive: `own`). A read of
    /// the data file happens without the server's lock, so that the misses of different
    /// sessions wait for the disk side by side: the page cannot change meanwhile, since
    /// changing it takes an exclusive lock, which conflicts with the one held, and whatever
    /// writes a page home or logs a copy of it does so under the server's lock with the page
    /// in the pool or its copy in the log. Returns the server's state again, and whether the
    /// page was read here into `buf` (a page long whenever the pool and log lack it).
    fn cache_locked_page<'s>(
        &'s self,
        mut state: StateGuard<'s>,
        page: PageId,
        own: bool,
        buf: &mut [u8],
    ) -> Result<(StateGuard<'s>, bool)> {
        if self.must_read_from_disk(&state, page) {
            assert_eq!(buf.len(), self.volume.page_size(), "a page to read into");
            drop(state);
            let read = if own {
                self.volume.read_page_sealed(page, buf)
            } else {
                self.volume.read_page(page, buf)
            };
            state = self.usable_state()?;
            read?;
            // Another session's read of the same page may have got in first.
            if self.must_read_from_disk(&state, page) {
                self.install(&mut state, page, buf)?;
                state.stats.pages_read += 1;
                return Ok((state, true));
            }
        }
        if own {
            self.cache_page_in_change(&mut state, page)?;
        } else {
            self.cache_page(&mut state, page)?;
        }
        Ok((state, false))
    }

    /// Would caching `page` read the data file (neither the pool nor the log holds a copy, and
    /// it is not a fresh page, whose image is known)?
    fn must_read_from_disk(&self, state: &State, page: PageId) -> bool {
        !state.pool.contains(page)
            && !state.fresh_pages.contains(page)
            && self.method.newer_copy_in_log(state, page).is_none()
    }

    fn cache_page_checked(&self, state: &mut State, page: PageId, whole: bool) -> Result<()> {
        if state.pool.contains(page) {
            state.stats.pool_hits += 1;
            return Ok(());
        }
        if let Some(lsn) = self.method.newer_copy_in_log(state, page) {
            let mut buf = vec![0u8; self.volume.page_size()];
            self.read_logged_image(page, lsn, &mut buf)?;
            state.stats.pages_reread_from_log += 1;
            return self.install(state, page, &buf);
        }
        // A page the file grew by that has not been in the pool since holds the image its
        // growth gave it: known without a read.
        if state.fresh_pages.contains(page) {
            let frame = self.reserve_frame(state, page)?;
            self.volume
                .format_new_page(page, state.pool.frame_bytes_mut(frame));
            return Ok(());
        }
        // Read straight into the frame: no buffer to clear and copy on every miss.
        let frame = self.reserve_frame(state, page)?;
        let bytes = state.pool.frame_bytes_mut(frame);
        let read = if whole {
            self.volume.read_page(page, bytes)
        } else {
            self.volume.read_page_sealed(page, bytes)
        };
        if let Err(e) = read {
            state.pool.remove(page);
            return Err(e);
        }
        state.stats.pages_read += 1;
        Ok(())
    }

    /// Reads the image of `page` logged at `lsn` into `buf`, stamped with that LSN.
    pub(crate) fn read_logged_image(&self, page: PageId, lsn: Lsn, buf: &mut [u8]) -> Result<()> {
        let record = self.log.read(lsn)?;
        match record.body {
            RecordBody::PageImage { page: p, image } if p == page && image.len() <= buf.len() => {
                buf[..image.len()].copy_from_slice(&image);
                buf[image.len()..].fill(0);
                page::set_lsn(buf, lsn);
                Ok(())
            }
            // A deferred write's record (the database-cache method): one page each.
            RecordBody::Family { kind, flags, body }
                if kind == lodestore_multilevel::kinds::AFTER_IMAGES =>
            {
                let write = lodestore_multilevel::records::decode_after_images(
                    flags,
                    &body,
                    buf.len(),
                )
                .map_err(|reason| Error::CorruptLog {
                    path: self.log_dir(),
                    offset: lsn.0,
                    reason: format!("after-image record: {reason}"),
                })?;
                let image = write
                    .pages
                    .iter()
                    .find(|image| image.page == page)
                    .ok_or_else(|| Error::CorruptLog {
                        path: self.log_dir(),
                        offset: lsn.0,
                        reason: format!(
                            "the recovery method places an image of page {page} in this after-image record, which holds none"
                        ),
                    })?;
                image.write_into(buf);
                page::set_lsn(buf, lsn);
                Ok(())
            }
            other => Err(Error::CorruptLog {
                path: self.log_dir(),
                offset: lsn.0,
                reason: format!(
                    "the recovery method places an image of page {page} here, but the record is {:?}",
                    other
                        .page()
                        .map_or("not a page image".to_string(), |p| format!(
                            "about page {p}"
                        ))
                ),
            }),
        }
    }

    /// Puts `image` into the pool as `page` (not present yet), writing back a dirty victim.
    pub(crate) fn install(&self, state: &mut State, page: PageId, image: &[u8]) -> Result<()> {
        let frame = self.reserve_frame(state, page)?;
        state.pool.fill(frame, image);
        Ok(())
    }

    /// Gives `page` (not in the pool) a frame, writing the page that leaves it home first if
    /// it is dirty. The caller fills the frame.
    fn reserve_frame(&self, state: &mut State, page: PageId) -> Result<FrameId> {
        // Every change to a page passes through the pool: one that has been here may differ
        // from the image the file's growth gave it.
        state.fresh_pages.remove(page);
        if self.method.keeps_pages_resident() && state.pool.len() >= state.pool.capacity() {
            return Err(crate::recovery::resident_pool_full(
                self.volume.page_size(),
                state.pool.capacity(),
            ));
        }
        // Deferred page writes: pages not yet logged leave last, as each forces a log write.
        let reserved = if self.method.defers_page_writes() {
            let spheres = &state.multilevel.spheres;
            state
                .pool
                .reserve_avoiding(page, |p| spheres.is_unlogged(p))
        } else {
            state.pool.reserve(page)
        };
        let Some((frame, victim)) = reserved else {
            return Err(Error::InvalidArgument(format!(
                "the server pool of {} pages holds only pages changed by running transactions \
                 and not yet logged ({} recovery method): no frame for page {page}; open the \
                 store with a larger server pool or change fewer pages per transaction",
                state.pool.capacity(),
                self.method.kind()
            )));
        };
        if let Some(victim) = victim {
            state.stats.pool_evictions += 1;
            if self.method.defers_page_writes() && state.multilevel.spheres.is_unlogged(victim.page)
            {
                // The paper's rule for deferred writes: a page leaving the pool forces the
                // persistence sphere of the subtransactions whose changes it carries. Its
                // bytes are still in the frame.
                let sphere = state.multilevel.spheres.take_for_page(victim.page);
                let bytes = state.pool.frame_bytes(frame).to_vec();
                let written = self
                    .method
                    .write_sphere(self, state, sphere, None, Some((victim.page, &bytes)))
                    .and_then(|eos| self.log.flush(eos));
                if let Err(e) = written {
                    // The victim's bytes are nowhere else now: nothing more is served.
                    state.failed = Some(e.to_string());
                    return Err(e);
                }
                state.stats.spheres_forced_by_eviction += 1;
                debug_assert!(!victim.dirty, "a page not yet logged is never dirty");
            }
            if victim.dirty {
                let lsn = page::lsn(state.pool.frame_bytes(frame));
                let durable = self.log.durable_lsn();
                if self
                    .method
                    .may_evict_unwritten(state, victim.page, lsn, durable)
                {
                    state.stats.pages_evicted_unwritten += 1;
                } else {
                    let mut bytes = state.pool.frame_bytes(frame).to_vec();
                    self.write_back(state, victim.page, &mut bytes)?;
                }
            }
        }
        Ok(frame)
    }

    /// Writes a dirty page to the data file, after the log is durable up to its LSN (and, for
    /// a copy the recovery method keeps, up to what it asks: for whole-page logging, its
    /// transaction's commit record); through the double-write file when a torn write of it
    /// could not be rebuilt from the log.
    pub(crate) fn write_back(
        &self,
        state: &mut State,
        page: PageId,
        bytes: &mut [u8],
    ) -> Result<()> {
        debug_assert_eq!(page::number(bytes), page, "the image names another page");
        self.write_home(state, &mut [bytes])
    }

    /// [`Self::write_back`] for several pages (each image names its page), at most a
    /// double-write batch: the log is forced once, and the pages that need a double write
    /// share one sync of the double-write file.
    pub(crate) fn write_home(&self, state: &mut State, pages: &mut [&mut [u8]]) -> Result<()> {
        debug_assert!(pages.len() <= state.double_write.batch_limit());
        let written: Vec<(PageId, Lsn)> = pages
            .iter()
            .map(|bytes| (page::number(bytes), page::lsn(bytes)))
            .collect();
        let durable = written
            .iter()
            .map(|&(page, lsn)| self.method.durable_before_home(state, page, lsn))
            .max()
            .unwrap_or(Lsn::ZERO);
        self.log.flush(durable)?;
        let guards = self.method.home_writes_need_double_write();
        let (mut guarded, direct): (Vec<&mut [u8]>, Vec<&mut [u8]>) = pages
            .iter_mut()
            .map(|bytes| &mut **bytes)
            .partition(|bytes| {
                guards
                    && page::lsn(bytes) != Lsn::ZERO
                    && !state.logged_whole.contains(&page::number(bytes))
            });
        let mut result = state.double_write.write_home(&self.volume, &mut guarded);
        for bytes in direct {
            if result.is_err() {
                break;
            }
            result = self.volume.write_page(page::number(bytes), bytes);
        }
        if let Err(e) = &result {
            state.failed = Some(e.to_string());
        }
        result?;
        state.stats.pages_written += written.len() as u64;
        state.stats.pages_double_written += guarded.len() as u64;
        for (page, lsn) in written {
            self.method.written_home(state, page, lsn);
        }
        Ok(())
    }

    /// Changes `page` in the pool to `image` at `lsn` and marks it dirty.
    pub(crate) fn put_changed(&self, state: &mut State, page: PageId, image: &[u8], lsn: Lsn) {
        let frame = state.pool.get_mut(page).expect("changed page is cached");
        frame.copy_from_slice(image);
        self.mark_changed(state, page, lsn);
    }

    /// The pool's copy of `page` holds the change of the record at `lsn`: it takes that LSN
    /// and is dirty.
    pub(crate) fn mark_changed(&self, state: &mut State, page: PageId, lsn: Lsn) {
        let frame = state.pool.get_mut(page).expect("changed page is cached");
        page::set_lsn(frame, lsn);
        state.pool.mark_dirty(page, lsn);
    }

    // ---- checkpoints --------------------------------------------------------------------

    /// Takes a checkpoint: records the active transactions, writes every dirty page, then
    /// moves the log anchor (both superblock copies) to the new checkpoint and recycles log
    /// segments no longer needed.
    pub fn checkpoint(&self) -> Result<()> {
        let mut state = self.usable_state()?;
        if let Err(e) = self.method.checkpoint_asked(self, &mut state) {
            state.failed = Some(e.to_string());
            return Err(e);
        }
        self.checkpoint_locked(&mut state)
    }

    pub(crate) fn checkpoint_locked(&self, state: &mut State) -> Result<()> {
        self.checkpoint_locked_with(state, false)
    }

    /// A checkpoint that, with `install_all`, also leaves everything committed at its home
    /// location (before closing or changing recovery method).
    fn checkpoint_with(&self, install_all: bool) -> Result<()> {
        let mut state = self.usable_state()?;
        self.checkpoint_locked_with(&mut state, install_all)
    }

    pub(crate) fn checkpoint_locked_with(
        &self,
        state: &mut State,
        install_all: bool,
    ) -> Result<()> {
        let result = self.checkpoint_steps(state, install_all);
        if let Err(e) = &result {
            state.failed = Some(e.to_string());
        }
        result
    }

    /// Writes committed pages that the recovery method keeps in the log to their home
    /// locations, at most `max_pages`, oldest first, so their log space can be reused (the
    /// background installer of QuickStore section 3.4.2). Returns how many were written; 0
    /// under methods that keep none.
    pub fn install_committed(&self, max_pages: usize) -> Result<usize> {
        let mut state = self.usable_state()?;
        // Only copies whose commit is durable already: the installer never forces the log
        // (with commits appended unforced, as S2/PS's subtransactions are, it would force
        // it again and again, where a commit's own force is due anyway).
        let durable = self.log.durable_lsn();
        let copies: Vec<(PageId, Lsn)> = self
            .method
            .installable(&state)
            .into_iter()
            .filter(|&(page, lsn)| self.method.durable_before_home(&state, page, lsn) < durable)
            .take(max_pages)
            .collect();
        let mut installed = 0;
        for (page, lsn) in copies {
            self.install_copy(&mut state, page, lsn)?;
            installed += 1;
        }
        Ok(installed)
    }

    /// Writes the committed copy of `page` logged at `lsn` to its home location, from the pool
    /// when the pool holds that very copy, else from the log.
    pub(crate) fn install_copy(&self, state: &mut State, page: PageId, lsn: Lsn) -> Result<()> {
        let pooled = state
            .pool
            .get(page)
            .filter(|image| page::lsn(image) == lsn)
            .map(<[u8]>::to_vec);
        let mut bytes = match pooled {
            Some(bytes) => bytes,
            None => {
                let mut buf = vec![0u8; self.volume.page_size()];
                self.read_logged_image(page, lsn, &mut buf)?;
                state.stats.pages_reread_from_log += 1;
                buf
            }
        };
        self.volume.extend_to(page.0 + 1)?;
        self.write_back(state, page, &mut bytes)?;
        if state
            .pool
            .get(page)
            .is_some_and(|image| page::lsn(image) == lsn)
        {
            state.pool.mark_clean(page);
        }
        state.stats.pages_installed += 1;
        Ok(())
    }

    fn checkpoint_steps(&self, state: &mut State, install_all: bool) -> Result<()> {
        self.method.before_checkpoint(self, state, install_all)?;
        let active: Vec<ActiveTxn> = state
            .txns
            .iter()
            .filter(|(_, t)| t.last_lsn != Lsn::ZERO)
            .map(|(id, t)| ActiveTxn {
                txn: *id,
                first_lsn: t.first_lsn,
                last_lsn: t.last_lsn,
            })
            .collect();
        let (level_one, oldest_level_one) = Server::multilevel_checkpoint(&mut *state);
        let oldest_needed = active
            .iter()
            .map(|a| a.first_lsn)
            .chain(oldest_level_one)
            .min();
        let begin = self
            .log
            .append(None, Lsn::ZERO, &RecordBody::CheckpointBegin { active })?;
        if let Some(level_one) = level_one {
            // Where the level-1 records of unfinished transactions are, for the warm start.
            self.log.append(None, Lsn::ZERO, &level_one)?;
        }
        let previous = std::mem::replace(&mut state.restart_lsn, begin);
        let mut flushed = 0;
        let dirty = if self.method.checkpoint_writes_home(install_all) {
            state.pool.dirty_pages()
        } else {
            Vec::new()
        };
        let mut batch = Vec::new();
        for chunk in dirty.chunks(state.double_write.batch_limit()) {
            batch.clear();
            batch.extend(
                chunk
                    .iter()
                    .map(|(page, _)| state.pool.get(*page).expect("dirty page cached").to_vec()),
            );
            let mut pages: Vec<&mut [u8]> = batch.iter_mut().map(|b| &mut b[..]).collect();
            self.write_home(state, &mut pages)?;
            for (page, _) in chunk {
                state.pool.mark_clean(*page);
            }
            flushed += chunk.len();
        }
        let method_needs = self.method.checkpoint(self, state, previous, install_all)?;
        let end = self
            .log
            .append(None, Lsn::ZERO, &RecordBody::CheckpointEnd { begin })?;
        self.log.flush(end)?;
        state.stats.pages_written += state.space.write_dirty_maps(&self.volume, begin)? as u64;
        // The superblock below records the page count: every page it covers gets its image
        // on disk, synced with the rest.
        state.stats.pages_written += u64::from(self.volume.write_unwritten()?);
        self.volume.sync()?;
        state.double_write.home_synced();
        if install_all {
            // Everything is home and durable: the copies are no longer needed.
            state.double_write.empty()?;
        }
        let page_count = self.volume.page_count();
        let segment_bytes = self.log.options().segment_bytes;
        let recovery_method = self.method.kind().code();
        let strategy = self.options.multi_level_strategy;
        self.volume.update_superblock(|sb| {
            sb.checkpoint_lsn = begin;
            sb.last_lsn = end;
            sb.page_count = page_count;
            sb.log_segment_bytes = segment_bytes;
            sb.recovery_method = recovery_method;
            if let Some(code) = strategy {
                sb.multi_level_strategy = code;
            }
        })?;
        state.stats.checkpoints += 1;
        state.checkpoint_log_end = self.log.end_lsn();
        state.checkpoint_log_records = self.log.stats().records;
        state.checkpoint_records_carried = 0;
        state.home_at_checkpoint = install_all;
        // The log from the new restart point holds no page image yet.
        state.logged_whole.clear();
        let keep_from = [oldest_needed, method_needs]
            .into_iter()
            .flatten()
            .fold(begin, Lsn::min);
        self.log.recycle_before(keep_from)?;
        tracing::debug!(begin = begin.0, flushed, "checkpoint");
        Ok(())
    }

    /// Has the log grown past either bound since the last checkpoint? (Both bound the work of
    /// the restart after a crash: reading the bytes, replaying the records.)
    fn checkpoint_due(&self, state: &State) -> bool {
        let records = self.log.stats().records + state.checkpoint_records_carried
            - state.checkpoint_log_records;
        self.log.end_lsn().0 - state.checkpoint_log_end.0 >= self.options.checkpoint_log_bytes
            || records >= self.options.checkpoint_log_records
    }

    /// Refreshes the space hints of `pages` from their images in the pool.
    pub(crate) fn refresh_hints(
        &self,
        state: &mut State,
        pages: impl IntoIterator<Item = PageId>,
    ) -> Result<()> {
        for page in pages {
            if page.0 < DIRECTORY_PAGE.0 || spacemap::is_map_page(page, self.volume.page_size()) {
                continue;
            }
            self.cache_page(state, page)?;
            let image = state.pool.get(page).expect("page just cached");
            let entry = entry_for_image(page, image);
            state.space.grow(self.volume.page_count());
            state.space.set(page, entry);
        }
        Ok(())
    }

    /// Slotted pages `txn` changed that hold no object now: they go back to free space at its
    /// commit like the pages of a freed large object. Left slotted, such a page could serve
    /// only small objects, found by a hint search that starts where the last one succeeded;
    /// reservations and large objects take free pages alone, so a store whose objects come
    /// and go through them would grow without bound around pages it never uses again.
    fn emptied_pages(&self, state: &mut State, txn: TxnId) -> Result<Vec<PageId>> {
        let own = state.txns.get(&txn).ok_or_else(|| inactive(txn))?;
        // A page written home holding objects and not changed since is not empty: reading it
        // back to find that out would cost a read of the file for every page of a bulk load.
        let homed_full = |page: &PageId| {
            own.homed.get(page).is_some_and(|homed| !homed.empty) && !state.pool.contains(*page)
        };
        let candidates: Vec<PageId> = own
            .touched
            .iter()
            .copied()
            .filter(|page| {
                *page != DIRECTORY_PAGE && !own.freed.contains(page) && !homed_full(page)
            })
            .collect();
        let mut emptied = Vec::new();
        for page in candidates {
            // Every change of the transaction has reached the server's copy by now (the
            // commit ships the rest first), so the copy's slot table is the committed one.
            self.cache_page(state, page)?;
            let image = state.pool.get(page).expect("page just cached");
            if page::kind(image) == Some(PageKind::Slotted) && slotted::slot_count(image) == 0 {
                emptied.push(page);
            }
        }
        Ok(emptied)
    }

    /// Takes `count` free pages out of the space map's reach, growing the volume as needed,
    /// each locked exclusively for `txn` if given (else locked by nobody).
    fn take_free_pages(
        &self,
        state: &mut State,
        count: u32,
        txn: Option<TxnId>,
    ) -> Result<Vec<PageId>> {
        let mut pages = Vec::with_capacity(count as usize);
        let taken = self.take_free_pages_into(state, count, txn, &mut pages);
        if let Err(e) = taken {
            // Nobody will end these reservations: free again (a transaction's locks go at its
            // end).
            for page in pages {
                state.space.unreserve(page, ENTRY_FREE);
            }
            return Err(e);
        }
        Ok(pages)
    }

    /// [`Self::take_free_pages`], appending to `pages` as it goes.
    fn take_free_pages_into(
        &self,
        state: &mut State,
        count: u32,
        txn: Option<TxnId>,
        pages: &mut Vec<PageId>,
    ) -> Result<()> {
        // No transaction has id 0: "locked by another" then means locked by anyone.
        let me = txn.unwrap_or(TxnId(0));
        while pages.len() < count as usize {
            let Some(page) = state.space.next_free() else {
                let missing = count - pages.len() as u32;
                let grow = missing.clamp(EXTEND_PAGES_MIN, EXTEND_PAGES_MAX);
                let capacity = state.pool.capacity();
                if self.method.keeps_pages_resident()
                    && (self.volume.page_count() + grow) as usize > capacity
                {
                    // Every page of the file is loaded at the next restart: refuse the growth
                    // now rather than a store that cannot be opened with this pool.
                    return Err(crate::recovery::resident_pool_full(
                        self.volume.page_size(),
                        capacity,
                    ));
                }
                let first = self.volume.grow(grow)?;
                state.space.grow(self.volume.page_count());
                state.fresh_pages.extended(first.0..first.0 + grow);
                continue;
            };
            // Reserve it first, so the search moves on whatever the page turns out to be.
            state.space.reserve(page);
            if self.locks.locked_by_other(me, page) {
                continue;
            }
            // A fresh page is free as the file's growth left it, and enters the pool when it is
            // first read or changed (a bulk load's new pages only when written home): caching
            // it now would touch pool memory for an image that is replaced before anyone
            // reads it, and fill the pool with a whole reservation ahead of its use.
            let known_free = state.fresh_pages.contains(page);
            if !known_free {
                self.cache_page(state, page)?;
                let image = state.pool.get(page).expect("page just cached");
                if page::kind(image) != Some(PageKind::Free) {
                    let actual = entry_for_image(page, image);
                    state.space.unreserve(page, actual);
                    continue;
                }
            }
            if let Some(txn) = txn {
                if !self.locks.try_acquire(txn, page, LockMode::Exclusive) {
                    state.space.unreserve(page, ENTRY_FREE);
                    continue;
                }
            }
            pages.push(page);
        }
        Ok(())
    }

    /// Ends `txn`'s bookkeeping after commit or rollback and releases its locks.
    fn finish(&self, state: &mut State, txn: TxnId, committed: bool) -> Result<()> {
        let Some(own) = state.txns.remove(&txn) else {
            return Ok(());
        };
        Server::multilevel_finished(state, txn, &own);
        if let Some(versions) = &self.options.versions {
            versions.ended(txn);
        }
        // A page the transaction wrote home itself and did not read back since: its hint is
        // known, and reading it back would only fill the pool.
        let homed_hint = |page: &PageId| {
            own.homed
                .get(page)
                .filter(|_| committed && !state.pool.contains(*page))
                .map(|homed| homed.hint)
        };
        let homed: BTreeMap<PageId, u8> = own
            .touched
            .iter()
            .filter_map(|page| homed_hint(page).map(|hint| (*page, hint)))
            .collect();
        self.refresh_hints(
            state,
            own.touched
                .iter()
                .copied()
                .filter(|page| !homed.contains_key(page)),
        )?;
        state.space.grow(self.volume.page_count());
        for (page, hint) in homed {
            state.space.set(page, hint);
        }
        for &page in &own.touched {
            if !state.reservations.holds(page) {
                continue;
            }
            if committed {
                // Formatted by a committed transaction: an ordinary page from now on.
                state.reservations.committed(page);
                state.space.unreserve_keep(page);
            } else {
                // Rolled back to free: still the reservation's, so no allocation takes it.
                state.space.set(page, ENTRY_UNAVAILABLE);
            }
        }
        for page in own.allocated {
            if !own.touched.contains(&page) {
                state.space.unreserve(page, ENTRY_FREE);
            } else {
                state.space.unreserve_keep(page);
            }
        }
        if committed {
            state.stats.commits += 1;
        } else {
            state.stats.aborts += 1;
        }
        Ok(())
    }
}

/// Snapshots need every committed page image when asked; under deferred page writes one may
/// wait in the pool, unlogged, as part of a persistence sphere.
fn refuse_versions_with(method: RecoveryMethodKind, options: &ServerOptions) -> Result<()> {
    if method == RecoveryMethodKind::Dbcache && options.versions.is_some() {
        return Err(Error::Unsupported(
            "snapshots with the dbcache recovery method; use wpl or esm for a store that keeps snapshots"
                .into(),
        ));
    }
    Ok(())
}

/// Checks a request for `count` pages (`what`: allocate or reserve): from 1 to
/// [`allocate_pages_max`], which it returns.
fn check_page_request(what: &str, count: u32, page_size: usize) -> Result<u32> {
    let most = allocate_pages_max(page_size);
    if count == 0 || count > most {
        return Err(Error::InvalidArgument(format!(
            "cannot {what} {count} pages in one request: from 1 to {most}, the pages of the \
             largest object"
        )));
    }
    Ok(most)
}

/// Pages of `bytes` of pool memory, refusing pools too small to work with.
pub fn pool_pages(what: &str, bytes: usize, page_size: usize) -> Result<usize> {
    let pages = bytes / page_size;
    if pages < POOL_PAGES_MIN {
        return Err(Error::InvalidArgument(format!(
            "{what} of {bytes} bytes holds {pages} pages of {page_size} bytes; \
             it needs at least {POOL_PAGES_MIN}"
        )));
    }
    Ok(pages)
}

/// Most pages one `allocate_pages` request may ask for: the runs of the largest object a store
/// holds, so no single request can grow the data file by more.
pub fn allocate_pages_max(page_size: usize) -> u32 {
    let per_page = lodestore_storage::large::data_bytes_per_page(page_size) as u64;
    let pages = lodestore_core::limits::OBJECT_BYTES_MAX.div_ceil(per_page);
    u32::try_from(pages).unwrap_or(u32::MAX)
}

fn log_options(options: &ServerOptions, page_size: usize) -> LogOptions {
    LogOptions {
        page_size_max: page_size,
        ..options.log.clone()
    }
}

impl Server {
    /// The adaptive commit delay for a commit now: the configured delay while enough other
    /// transactions are active to be worth waiting for, else none.
    fn commit_delay_now(&self) -> Duration {
        let delay = self.options.commit_delay;
        if delay.is_zero() {
            return delay;
        }
        // The committing transaction is gone from the table already: the rest are siblings.
        let siblings = self.lock_state().txns.len();
        if siblings >= self.options.commit_siblings {
            delay
        } else {
            Duration::ZERO
        }
    }

    /// Page records of `txn` (see `PageServer::ship_records`).
    fn ship_page_records(&self, txn: TxnId, records: &PageUpdates) -> Result<()> {
        let records: Vec<PageUpdate<'_>> = records.iter().collect();

        self.check_updates(txn, &records)?;
        let mut state = self.usable_state()?;
        if !state.txns.contains_key(&txn) {
            return Err(inactive(txn));
        }
        self.log_updates_holding(&mut state, txn, &records)?;
        state.stats.log_records_shipped += records.len() as u64;
        Ok(())
    }

    /// Logs `records` of `txn` (checked, each page's together) and applies them to the pool,
    /// under a hold of the state.
    pub(crate) fn log_updates_holding(
        &self,
        state: &mut State,
        txn: TxnId,
        records: &[PageUpdate<'_>],
    ) -> Result<()> {
        Server::refuse_parent_changes(state, txn)?;
        for same_page in records.chunk_by(|a, b| a.page == b.page) {
            let page = same_page[0].page;
            self.before_first_change(state, txn, page)?;
            self.method
                .log_client_updates(self, state, txn, page, same_page)?;
        }
        Ok(())
    }

    /// Object update records of `txn` (see `PageServer::ship_records`).
    fn ship_object_records(&self, txn: TxnId, records: &ObjectUpdates) -> Result<()> {
        let records: Vec<ObjectUpdate<'_>> = records.iter().collect();
        let mut state = self.usable_state()?;
        if !state.txns.contains_key(&txn) {
            return Err(inactive(txn));
        }
        Server::refuse_parent_changes(&state, txn)?;
        // Each run of one page's records is resolved against the server's copy as the runs
        // before it left it, then logged and applied, so a later run of the same page sees
        // them.
        for same_page in records.chunk_by(|a, b| a.oid.page() == b.oid.page()) {
            let page = same_page[0].oid.page();
            if let Some(foreign) = same_page
                .iter()
                .find(|r| r.oid.volume() != self.volume.volume_id())
            {
                return Err(Error::ObjectNotFound { oid: foreign.oid });
            }
            self.check_data_page(page)?;
            self.check_exclusive(txn, page, "logged an object of")?;
            self.before_first_change(&mut state, txn, page)?;
            self.cache_page_in_change(&mut state, page)?;
            let mut image = state.pool.get(page).expect("page just cached").to_vec();
            let mut resolved = PageUpdates::new();
            for record in same_page {
                let range = resolve_object_update(&image, record)?;
                resolved.push(
                    page,
                    range.start as u32,
                    &image[range.clone()],
                    record.after,
                );
                image[range].copy_from_slice(record.after);
            }
            let resolved: Vec<PageUpdate<'_>> = resolved.iter().collect();
            self.check_updates(txn, &resolved)?;
            self.method
                .log_client_updates(self, &mut state, txn, page, &resolved)?;
            state.stats.log_records_shipped += resolved.len() as u64;
        }
        Ok(())
    }
}

impl PageServer for Server {
    fn page_size(&self) -> usize {
        self.volume.page_size()
    }

    fn volume_id(&self) -> VolumeId {
        self.volume.volume_id()
    }

    fn root_directory(&self) -> Oid {
        self.volume.superblock().root_directory
    }

    fn begin_transaction(&self, kind: TxnKind) -> Result<TxnId> {
        let as_of = match kind {
            TxnKind::ReadWrite => None,
            TxnKind::ReadOnlyAsOf { snapshot } => {
                Some((self.versions("a transaction as of a snapshot")?, snapshot))
            }
            TxnKind::Sub { parent } => return self.begin_subtransaction(parent),
        };
        let mut state = self.usable_state()?;
        let txn = TxnId(state.next_txn);
        state.next_txn += 1;
        let as_of = match as_of {
            Some((versions, id)) => Some(versions.begin_read(txn, id)?),
            None => None,
        };
        state.txns.insert(
            txn,
            TxnState {
                as_of,
                ..TxnState::default()
            },
        );
        Ok(txn)
    }

    fn keep_read_locks(&self, limit: usize) -> Option<Arc<lodestore_protocol::KeptLocks>> {
        // The database-cache method records the pages each transaction reads as it locks
        // them (persistence spheres): every read has to reach the server.
        if self.method.defers_page_writes() || limit == 0 {
            return None;
        }
        let id = {
            let mut state = self.usable_state().ok()?;
            let id = TxnId(state.next_txn);
            state.next_txn += 1;
            id
        };
        let kept = Arc::new(lodestore_protocol::KeptLocks::new(id, limit));
        self.locks.register_keeper(kept.clone());
        Some(kept)
    }

    fn begin_keeping(&self, kept: &lodestore_protocol::KeptLocks) -> Result<TxnId> {
        let txn = self.begin_transaction(TxnKind::ReadWrite)?;
        self.locks.attach_to_keeper(txn, kept.id());
        kept.begin(txn);
        Ok(txn)
    }

    fn forget_kept(&self, kept: &lodestore_protocol::KeptLocks) {
        self.locks.forget_keeper(kept.id());
    }

    fn lock(&self, txn: TxnId, target: LockTarget, mode: LockMode) -> Result<Lsn> {
        let page = match target {
            LockTarget::Page(page) => page,
            LockTarget::Object(oid) => {
                return self.lock_objects(txn, &[(oid, mode)]).map(|()| Lsn::ZERO)
            }
        };
        self.lock_page_fetching(txn, page, mode, None)
    }

    fn lock_objects(&self, txn: TxnId, objects: &[(Oid, LockMode)]) -> Result<()> {
        Server::lock_objects(self, txn, objects)
    }

    fn lock_and_fetch_page(
        &self,
        txn: TxnId,
        page: PageId,
        mode: LockMode,
        buf: &mut [u8],
    ) -> Result<Lsn> {
        self.lock_page_fetching(txn, page, mode, Some(buf))
    }

    fn fetch_page(&self, txn: TxnId, page: PageId, buf: &mut [u8]) -> Result<()> {
        self.check_data_page(page)?;
        if let Some(snapshot) = self.as_of(txn)? {
            return self.page_as_of(page, &snapshot, buf);
        }
        let Some(held) = self.locks.held_mode(txn, page) else {
            return Err(Error::InvalidArgument(format!(
                "transaction {txn} fetched page {page} without locking it"
            )));
        };
        let own = held == LockMode::Exclusive;
        let (mut state, read_here) =
            self.cache_locked_page(self.usable_state()?, page, own, buf)?;
        if !read_here {
            buf.copy_from_slice(state.pool.get(page).expect("page just cached"));
        }
        state.stats.pages_fetched_by_clients += 1;
        Ok(())
    }

    fn find_space(
        &self,
        txn: TxnId,
        bytes: usize,
        skip: &[PageId],
    ) -> Result<Option<(PageId, Lsn)>> {
        let mut state = self.usable_state()?;
        writable(&state, txn)?;
        let room = bytes.max(self.volume.page_size() / FIND_SPACE_ROOM_MIN_PART);
        let candidates = state
            .space
            .slotted_candidates(room, FIND_SPACE_CANDIDATES_MAX + skip.len());
        for page in candidates {
            if skip.contains(&page) || self.locks.locked_by_other(txn, page) {
                continue;
            }
            if self.locks.holds(txn, page, LockMode::Exclusive) {
                continue; // the client already knows this page
            }
            // Trust the page, not the hint.
            self.cache_page(&mut state, page)?;
            let image = state.pool.get(page).expect("page just cached");
            let actual = entry_for_image(page, image);
            let fits = page::kind(image) == Some(PageKind::Slotted)
                && page != DIRECTORY_PAGE
                && slotted::free_bytes(image) >= bytes;
            let lsn = page::lsn(image);
            if !fits {
                state.space.set(page, actual);
                continue;
            }
            if !self.locks.try_acquire(txn, page, LockMode::Exclusive) {
                continue;
            }
            state.space.note_slotted_success(page);
            return Ok(Some((page, lsn)));
        }
        Ok(None)
    }

    fn allocate_pages(&self, txn: TxnId, count: u32) -> Result<Vec<Extent>> {
        check_page_request("allocate", count, self.volume.page_size())?;
        let mut state = self.usable_state()?;
        writable(&state, txn)?;
        let pages = self.take_free_pages(&mut state, count, Some(txn))?;
        state
            .txns
            .get_mut(&txn)
            .expect("checked")
            .allocated
            .extend_from_slice(&pages);
        Ok(extents_of(&pages))
    }

    fn reserve_pages(&self, count: u32) -> Result<(u64, Vec<Extent>)> {
        let most = check_page_request("reserve", count, self.volume.page_size())?;
        let mut state = self.usable_state()?;
        let held = state.reservations.pages_held();
        if held + count as usize > most as usize {
            return Err(Error::InvalidArgument(format!(
                "cannot reserve {count} more pages: reservations hold {held}, and at most \
                 {most} (the pages of the largest object) are held at once"
            )));
        }
        let pages = self.take_free_pages(&mut state, count, None)?;
        let id = state.reservations.add(&pages);
        tracing::debug!(reservation = id, pages = pages.len(), "pages reserved");
        Ok((id, extents_of(&pages)))
    }

    fn take_reserved(&self, txn: TxnId, reservation: u64, page: PageId) -> Result<()> {
        let mut state = self.usable_state()?;
        writable(&state, txn)?;
        state.reservations.check_held(reservation, page)?;
        if !self.locks.try_acquire(txn, page, LockMode::Exclusive) {
            return Err(Error::InvalidArgument(format!(
                "reserved page {page} is locked by another transaction"
            )));
        }
        if state.fresh_pages.contains(page) {
            // Free as the file's growth left it: nobody has taken it since.
            return Ok(());
        }
        self.cache_page(&mut state, page)?;
        let image = state.pool.get(page).expect("page just cached");
        if page::kind(image) != Some(PageKind::Free) {
            return Err(Error::InvalidArgument(format!(
                "reserved page {page} was taken by a committed transaction already"
            )));
        }
        Ok(())
    }

    fn release_reservation(&self, reservation: u64) -> Result<()> {
        let mut state = self.usable_state()?;
        for page in state.reservations.release(reservation)? {
            // Taken by a transaction still running: its end sets the page's hint.
            if self.locks.locked_by_other(TxnId(0), page) {
                state.space.unreserve_keep(page);
            } else {
                state.space.unreserve(page, ENTRY_FREE);
            }
        }
        Ok(())
    }

    fn free_pages(&self, txn: TxnId, pages: &[PageId]) -> Result<()> {
        writable(&*self.usable_state()?, txn)?;
        for &page in pages {
            self.check_data_page(page)?;
            self.locks.acquire(txn, page, LockMode::Exclusive)?;
        }
        let mut state = self.usable_state()?;
        Server::refuse_parent_changes(&state, txn)?;
        let own = state.txns.get_mut(&txn).ok_or_else(|| inactive(txn))?;
        own.freed.extend_from_slice(pages);
        Ok(())
    }

    fn ship_records(&self, txn: TxnId, records: ShippedRecords<'_>) -> Result<()> {
        match records {
            ShippedRecords::Pages(records) => self.ship_page_records(txn, records),
            ShippedRecords::Objects(records) => self.ship_object_records(txn, records),
        }
    }

    fn ship_dirty_pages(&self, txn: TxnId, pages: &[ShippedPage<'_>]) -> Result<Vec<Lsn>> {
        self.check_shipped(txn, pages)?;
        let mut state = self.usable_state()?;
        self.log_shipped(&mut state, txn, pages)
    }

    fn commit(&self, txn: TxnId) -> Result<Lsn> {
        self.ship_and_commit(txn, &[]).map(|(_, lsn)| lsn)
    }

    fn ship_and_commit(&self, txn: TxnId, pages: &[ShippedPage<'_>]) -> Result<(Vec<Lsn>, Lsn)> {
        let (lsns, commit) = self.ship_and_commit_deferred(txn, pages)?;
        self.wait_durable(txn, commit)?;
        Ok((lsns, commit.lsn))
    }

    fn ship_and_commit_deferred(
        &self,
        txn: TxnId,
        pages: &[ShippedPage<'_>],
    ) -> Result<(Vec<Lsn>, AppendedCommit)> {
        self.check_shipped(txn, pages)?;
        self.ship_and_commit_holding(self.usable_state()?, txn, pages, SubRelease::AfterAppend)
    }

    fn wait_durable(&self, txn: TxnId, mut commit: AppendedCommit) -> Result<()> {
        if commit.durable {
            return Ok(());
        }
        if self.method.defers_page_writes() && self.subs_appended().contains(&txn) {
            // A subtransaction's forced end (strategy S2) under deferred writes: its sphere is
            // written now, and the log forced past it.
            commit.lsn = self.write_sub_sphere(txn)?;
        }
        // Group commit: wait for the flush without holding the server's state. The locks are
        // held until the commit is durable (strict two-phase locking).
        let delay = self.commit_delay_now();
        let flushed = if commit.stream == 0 {
            self.log.flush_after(commit.lsn, delay)
        } else {
            self.method.flush_commit(commit, delay)
        };
        match flushed {
            Ok(()) => {
                self.subs_appended().remove(&txn);
                self.locks.release_committed(txn);
                Ok(())
            }
            Err(e) => {
                // The commit's outcome is unknown until a restart reads the log. Its locks stay
                // held, so nobody reads or builds on what may be lost, and the server refuses
                // work from now on.
                self.lock_state()
                    .failed
                    .get_or_insert_with(|| e.to_string());
                Err(e)
            }
        }
    }

    fn snapshot_at(&self, time_us: u64) -> Result<u64> {
        let list = self.versions("reading as of a time")?.list();
        match list.iter().rev().find(|s| s.time_us <= time_us) {
            Some(snapshot) => Ok(snapshot.id),
            None => Err(Error::NoSuchSnapshot {
                reason: match list.first() {
                    Some(first) => format!(
                        "time {time_us} µs is before the first snapshot ({} at {} µs)",
                        first.id, first.time_us
                    ),
                    None => format!("time {time_us} µs: the store has no snapshots yet"),
                },
            }),
        }
    }

    fn note_operation(&self, sub: TxnId, note: OperationNote<'_>) -> Result<()> {
        self.note(sub, note)
    }

    fn run_increments(
        &self,
        parent: TxnId,
        fields: &[lodestore_protocol::FieldIncrement],
        undo: OperationNote<'_>,
        force: bool,
    ) -> Result<lodestore_protocol::IncrementsRan> {
        self.run_increments_here(parent, fields, undo, force)
    }

    fn release_after_append(&self, sub: TxnId, commit: AppendedCommit) -> Result<()> {
        if commit.durable {
            return Ok(());
        }
        self.release_sub(sub)
    }

    fn ship_and_commit_unforced(
        &self,
        sub: TxnId,
        pages: &[ShippedPage<'_>],
    ) -> Result<(Vec<Lsn>, AppendedCommit)> {
        // Checked before anything is appended: a flat transaction's locks may only go once its
        // commit is durable, or others would read what a crash could still take back.
        match self.lock_state().txns.get(&sub) {
            None => return Err(inactive(sub)),
            Some(own) if own.parent.is_none() => {
                return Err(Error::InvalidArgument(format!(
                    "transaction {sub} is not a subtransaction: only a subtransaction's commit \
                     may be left unforced"
                )))
            }
            Some(_) => {}
        }
        let (lsns, commit) = self.ship_and_commit_deferred(sub, pages)?;
        self.release_after_append(sub, commit)?;
        Ok((lsns, commit))
    }

    fn abort(&self, txn: TxnId) -> Result<()> {
        let result = {
            let mut state = self.usable_state()?;
            if !state.txns.contains_key(&txn) {
                drop(state);
                self.locks.release_all(txn);
                return Ok(());
            }
            if let Some(sub) = state
                .multilevel
                .parents
                .get(&txn)
                .and_then(|p| p.active_sub)
            {
                // A parent aborted while its subtransaction runs: that one goes first.
                drop(state);
                self.abort(sub)?;
                state = self.usable_state()?;
            }
            // A level-1 transaction ends with its end record once nothing is left to
            // compensate (refused before then: it stays active).
            self.end_level_one(&mut state, txn, false)?;
            let rolled_back = self.method.rollback(self, &mut state, txn);
            if let Err(e) = &rolled_back {
                state.failed = Some(e.to_string());
            }
            rolled_back.and_then(|()| self.finish(&mut state, txn, false))
        };
        self.locks.release_all(txn);
        result
    }
}

impl Server {
    /// [`PageServer::ship_and_commit_deferred`] under a hold of the state the caller took,
    /// the shipped pages already checked (`check_shipped`). `release` says when a
    /// subtransaction's page locks go once its commit is appended.
    pub(crate) fn ship_and_commit_holding<'s>(
        &'s self,
        mut state: StateGuard<'s>,
        txn: TxnId,
        pages: &[ShippedPage<'_>],
        release: SubRelease,
    ) -> Result<(Vec<Lsn>, AppendedCommit)> {
        if !pages.is_empty() {
            Server::refuse_parent_changes(&state, txn)?;
        }
        if let Some(end) = self.end_level_one(&mut state, txn, true)? {
            // A level-1 commit: its end record, durable before its locks go.
            self.finish(&mut state, txn, true)?;
            let commit = AppendedCommit {
                lsn: end,
                durable: false,
                stream: 0,
            };
            return Ok((Vec::new(), commit));
        }
        let lsns = self.log_shipped(&mut state, txn, pages)?;
        let own = state.txns.get(&txn).ok_or_else(|| inactive(txn))?;
        let mut freed = own.freed.clone();
        freed.extend(self.emptied_pages(&mut state, txn)?);
        // The session's copies of the pages freed here are not what commits.
        self.locks.note_commit(txn, &freed);
        // Most commits free no page: no zeroed page for them.
        let mut blank = if freed.is_empty() {
            Vec::new()
        } else {
            vec![0u8; self.volume.page_size()]
        };
        for page in freed {
            self.before_first_change(&mut state, txn, page)?;
            page::format(&mut blank, PageKind::Free, page, self.volume.volume_id());
            self.method
                .log_page_change(self, &mut state, txn, page, &blank)?;
        }
        // Level 1 before the commit record: what undoes the subtransaction.
        let noted = self.append_note(&mut state, txn)?;
        if !noted && !self.method.has_changes(&state, txn) {
            // Read-only: nothing to make durable.
            self.finish(&mut state, txn, true)?;
            drop(state);
            self.locks.release_all(txn);
            let commit = AppendedCommit {
                lsn: self.log.durable_lsn(),
                durable: true,
                stream: 0,
            };
            return Ok((lsns, commit));
        }
        // What the versions component keeps for the commit is durable before the commit
        // record can be: made without the state, checked again under it (a snapshot taken
        // in between asks for more).
        while let Some(versions) = &self.options.versions {
            if versions.commit_ready(txn) {
                break;
            }
            drop(state);
            versions.prepare_commit(txn)?;
            state = self.usable_state()?;
        }
        let last = state.txns.get(&txn).ok_or_else(|| inactive(txn))?.last_lsn;
        // A durable commit record ends the transaction for recovery: no end record follows.
        let commit = match self.method.append_commit(self, &mut state, txn)? {
            Some(commit) => commit,
            None => AppendedCommit {
                lsn: self.log.append(Some(txn), last, &RecordBody::Commit)?,
                durable: false,
                stream: 0,
            },
        };
        self.method.committed(&mut state, txn, commit.lsn);
        let parent = state.txns.get(&txn).and_then(|t| t.parent);
        if let Some(parent) = parent {
            Server::sub_committed(&mut state, txn, parent);
            match release {
                // Nobody can take the pages between the append and the release: the next
                // subtransaction on them finds them free instead of waiting out this one's
                // return from the hold.
                SubRelease::InHold => self.locks.release_all(txn),
                SubRelease::AfterAppend => {
                    self.subs_appended().insert(txn);
                }
            }
        }
        self.finish(&mut state, txn, true)?;
        if parent.is_some() {
            // Ended, the subtransaction is named by a write of its sphere.
            self.write_large_sphere(&mut state, txn)?;
        }
        if self.checkpoint_due(&state) {
            self.checkpoint_locked(&mut state)?;
        }
        Ok((lsns, commit))
    }

    /// Checks shipped pages before anything is logged: size, identity, exclusive lock held.
    /// Their structure is checked where they cross a trust boundary: the network server
    /// validates every page a remote client ships (`validate_client_page`) before it gets
    /// here, while an embedded session's pages were only ever changed by Lodestore's own page
    /// operations in the same process; validating each one again at every commit was a third
    /// of an OO1 update (a debug build still does).
    fn check_shipped(&self, txn: TxnId, pages: &[ShippedPage<'_>]) -> Result<()> {
        let page_size = self.volume.page_size();
        for shipped in pages {
            let (id, image) = (shipped.page, shipped.image);
            self.check_data_page(id)?;
            if shipped.logged && image.is_empty() {
                // Logged, without an image: the records already shipped stand for the page.
                self.check_exclusive(txn, id, "shipped")?;
                continue;
            }
            if image.len() != page_size || page::number(image) != id {
                return Err(Error::InvalidArgument(format!(
                    "shipped image for page {id} has {} bytes or names another page",
                    image.len()
                )));
            }
            self.check_exclusive(txn, id, "shipped")?;
            debug_assert!(
                validate_client_page(image).is_ok(),
                "page {id} shipped malformed: {:?}",
                validate_client_page(image)
            );
        }
        Ok(())
    }

    /// Checks client log records before anything is logged: the page is one the transaction
    /// holds exclusively, the range lies in it and leaves the server's header fields
    /// (checksum, LSN) alone, and before and after have the same non-zero length.
    fn check_updates(&self, txn: TxnId, records: &[PageUpdate<'_>]) -> Result<()> {
        let page_size = self.volume.page_size();
        for record in records {
            self.check_data_page(record.page)?;
            self.check_exclusive(txn, record.page, "logged")?;
            let start = record.offset as usize;
            let end = start.saturating_add(record.after.len());
            let server_owned = |r: std::ops::Range<usize>| start < r.end && r.start < end;
            if record.after.is_empty()
                || record.before.len() != record.after.len()
                || end > page_size
                || server_owned(0..4)
                || server_owned(8..16)
            {
                return Err(Error::InvalidArgument(format!(
                    "log record for bytes {start}..{end} of page {} (before {} bytes, after {} \
                     bytes) is malformed or touches the page's checksum or LSN",
                    record.page,
                    record.before.len(),
                    record.after.len()
                )));
            }
        }
        Ok(())
    }

    fn check_exclusive(&self, txn: TxnId, page: PageId, what: &str) -> Result<()> {
        if self.locks.holds(txn, page, LockMode::Exclusive) {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "transaction {txn} {what} page {page} without an exclusive lock"
            )))
        }
    }

    /// Writes the new pages among `pages` (shipped by `txn`) to the data file and logs only
    /// their numbers, when there are at least `ServerOptions::pages_home_min` of them and the
    /// recovery method allows it: a new page is one the transaction allocated (or took from a
    /// reservation) that no logged record has changed yet (LSN 0 in the pool), so what the
    /// file held there is of no account. The record is forced first (undo information before
    /// the data it undoes), the pages are written carrying its LSN and synced (durable before
    /// any commit record of the transaction can be), and the pool keeps them clean. For each
    /// shipped page, the LSN it carries now if it was written here; empty when the shipment
    /// does not qualify.
    fn write_new_pages_home(
        &self,
        state: &mut State,
        txn: TxnId,
        pages: &[ShippedPage<'_>],
    ) -> Result<Vec<Option<Lsn>>> {
        let min = self.options.pages_home_min;
        if min == 0
            || pages.len() < min
            || !self.method.writes_new_pages_home()
            || self.options.versions.is_some()
        {
            return Ok(Vec::new());
        }
        let own = state.txns.get(&txn).ok_or_else(|| inactive(txn))?;
        if own.parent.is_some() || own.as_of.is_some() {
            return Ok(Vec::new());
        }
        let allocated: HashSet<PageId> = own.allocated.iter().copied().collect();
        let mut new = vec![false; pages.len()];
        for (i, shipped) in pages.iter().enumerate() {
            // Allocated by the transaction, or taken from a reservation (which it holds
            // exclusively, as every shipped page): its end settles the reservation's part.
            new[i] = !shipped.logged
                && !shipped.image.is_empty()
                && (allocated.contains(&shipped.page) || state.reservations.holds(shipped.page))
                && (state.pool.page_lsn(shipped.page) == Some(Lsn::ZERO)
                    || state.fresh_pages.contains(shipped.page));
        }
        let ids: Vec<PageId> = pages
            .iter()
            .zip(&new)
            .filter(|(_, new)| **new)
            .map(|(shipped, _)| shipped.page)
            .collect();
        if ids.len() < min {
            return Ok(Vec::new());
        }
        let count = ids.len();
        let prev = own.last_lsn;
        let lsn = self
            .log
            .append(Some(txn), prev, &RecordBody::PagesHome { pages: ids })?;
        {
            let own = state.txns.get_mut(&txn).expect("checked above");
            if own.first_lsn == Lsn::ZERO {
                own.first_lsn = lsn;
            }
            own.last_lsn = lsn;
        }
        self.log.flush(lsn)?;
        let page_size = self.volume.page_size();
        let mut run = HomeRun::with_buffer(page_size, std::mem::take(&mut state.home_run_buffer));
        let mut lsns = vec![None; pages.len()];
        for (i, shipped) in pages.iter().enumerate() {
            if !new[i] {
                continue;
            }
            let page = shipped.page;
            if !run.continues_with(page) {
                run.write(&self.volume)
                    .map_err(|e| write_failed(state, e))?;
            }
            let image = run.push(page, shipped.image);
            page::set_lsn(image, lsn);
            state.stats.pages_written += 1;
            let hint = entry_for_image(page, image);
            // The pool keeps what was written, clean: the pages a load writes are those its
            // readers ask for next. A fresh page gets its first frame here, which ends its
            // freshness (formatting it free when next cached would drop what was written).
            let frame = match state.pool.lookup(page) {
                Some(frame) => frame,
                None => self.reserve_frame(state, page)?,
            };
            state.pool.fill(frame, image);
            state.pool.mark_clean(page);
            debug_assert!(!state.fresh_pages.contains(page));
            let own = state.txns.get_mut(&txn).expect("checked above");
            own.touched.insert(page);
            let empty =
                page::kind(image) == Some(PageKind::Slotted) && slotted::slot_count(image) == 0;
            own.homed.insert(page, HomedPage { hint, empty });
            lsns[i] = Some(lsn);
        }
        // The pool holds the pages as written, clean: a write that fails leaves it ahead of
        // the file, and the server refuses work until a reopen recovers.
        run.write(&self.volume)
            .and_then(|()| self.volume.sync())
            .map_err(|e| write_failed(state, e))?;
        state.home_run_buffer = run.into_buffer();
        state.stats.new_pages_written_home += count as u64;
        tracing::debug!(%txn, pages = count, %lsn, "new pages written home");
        Ok(lsns)
    }

    /// Makes the shipped pages recoverable and installs them; returns their new LSNs.
    fn log_shipped(
        &self,
        state: &mut State,
        txn: TxnId,
        pages: &[ShippedPage<'_>],
    ) -> Result<Vec<Lsn>> {
        if !state.txns.contains_key(&txn) {
            return Err(inactive(txn));
        }
        if !pages.is_empty() {
            Server::refuse_parent_changes(state, txn)?;
        }
        let homed = self.write_new_pages_home(state, txn, pages)?;
        let mut lsns = Vec::with_capacity(pages.len());
        for (i, shipped) in pages.iter().enumerate() {
            if let Some(&Some(lsn)) = homed.get(i) {
                lsns.push(lsn);
                state.stats.dirty_pages_shipped += 1;
                continue;
            }
            let (id, image) = (shipped.page, shipped.image);
            let lsn = if shipped.logged {
                self.method
                    .accept_logged_page(self, state, txn, id, image)?
            } else {
                self.before_first_change(state, txn, id)?;
                self.method.log_page_change(self, state, txn, id, image)?
            };
            lsns.push(lsn);
            if !image.is_empty() {
                state.stats.dirty_pages_shipped += 1;
            }
        }
        Ok(lsns)
    }
}

impl Server {
    /// Closes the server: rolls back the transactions still active and checkpoints with every
    /// committed page written home, so that the data file alone is the store and the next open
    /// has nothing to recover. An error says what could not be done; the log still holds
    /// everything committed, and the next open recovers from it. Dropping a server that was
    /// not closed does the same and logs what failed.
    pub fn close(&self) -> Result<()> {
        if self.closed.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return Ok(());
        }
        self.shut_down()
    }

    fn shut_down(&self) -> Result<()> {
        let mut state = self.usable_state()?;
        // Active transactions are rolled back so the checkpoint leaves a clean store.
        let active: Vec<TxnId> = state.txns.keys().copied().collect();
        for txn in active {
            self.method.rollback(self, &mut state, txn)?;
            state.txns.remove(&txn);
            if let Some(versions) = &self.options.versions {
                versions.ended(txn);
            }
        }
        // Everything committed goes home, so the data file alone is the store; unless it is
        // there already and nothing was logged since (a store opened and closed unchanged).
        let quiet = state.home_at_checkpoint
            && self.log.end_lsn() == state.checkpoint_log_end
            && state.pool.dirty_pages().is_empty()
            && !state.space.has_dirty_maps()
            && !self.volume.has_unwritten();
        if !quiet {
            self.checkpoint_locked_with(&mut state, true)?;
        }
        // Spare segments only spare the next writer a file creation: a closed store keeps none.
        self.log.remove_spares()?;
        drop(state);
        match &self.options.versions {
            Some(versions) => versions.close(),
            None => Ok(()),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.closed.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        if let Err(e) = self.shut_down() {
            tracing::warn!(error = %e, "closing the store failed; the next open recovers");
        }
    }
}

/// `txn` is an active transaction that may change the store.
fn writable(state: &State, txn: TxnId) -> Result<()> {
    match state.txns.get(&txn) {
        None => Err(inactive(txn)),
        Some(own) if own.as_of.is_some() => Err(read_only(txn)),
        Some(_) => Ok(()),
    }
}

fn read_only(txn: TxnId) -> Error {
    Error::InvalidArgument(format!(
        "transaction {txn} reads the store as of a snapshot and cannot change it"
    ))
}

pub(crate) fn inactive(txn: TxnId) -> Error {
    Error::TransactionInactive {
        reason: format!("transaction {txn} is not active on this server"),
    }
}

/// The bytes of `image` (the server's copy of the object's page with the batch's earlier
/// records applied) an object update record changes.
fn resolve_object_update(image: &[u8], record: &ObjectUpdate<'_>) -> Result<Range<usize>> {
    let oid = record.oid;
    let found = if page::kind(image) == Some(PageKind::Slotted) {
        slotted::record(image, oid.slot()).ok().flatten()
    } else {
        None
    };
    let Some(object) = found else {
        return Err(Error::ObjectNotFound { oid });
    };
    let payload = object.payload();
    let start = payload.start + record.offset as usize;
    let end = start.saturating_add(record.after.len());
    if record.after.is_empty() || end > payload.end {
        return Err(Error::InvalidArgument(format!(
            "object update record for bytes {}..{} of object {oid} ({} bytes) is empty or out of \
             bounds",
            record.offset,
            record.offset as usize + record.after.len(),
            payload.len()
        )));
    }
    Ok(start..end)
}

/// Structural checks on a page image that crosses between client and server: one a client
/// shipped, or one a client fetched (the server on the other end of a connection is not
/// trusted to send a sound page).
pub fn validate_client_page(image: &[u8]) -> std::result::Result<(), String> {
    match page::kind(image) {
        Some(PageKind::Slotted) => slotted::validate(image),
        Some(PageKind::LargeData) | Some(PageKind::Free) => Ok(()),
        Some(other) => Err(format!("{} pages are not for clients", other.name())),
        None => Err(format!("unknown page kind {}", page::kind_byte(image))),
    }
}

/// Groups pages into runs of consecutive pages, keeping their order.
fn extents_of(pages: &[PageId]) -> Vec<Extent> {
    let mut extents: Vec<Extent> = Vec::new();
    for &page in pages {
        match extents.last_mut() {
            Some(last) if last.first.0 + last.count == page.0 => last.count += 1,
            _ => extents.push(Extent {
                first: page,
                count: 1,
            }),
        }
    }
    extents
}

#[cfg(test)]
mod tests {
    use super::*;
    use lodestore_storage::SimFileSystem;

    /// The state's mutex does not poison: a panic while it is held marks the server failed,
    /// and every later request is refused with an error instead of a panic.
    #[test]
    fn a_panic_holding_the_state_fails_the_server() {
        let fs = Arc::new(SimFileSystem::new());
        let server = Server::create(fs, Path::new("/s"), 4096, ServerOptions::default()).unwrap();
        let txn = server.begin().unwrap();
        server.commit(txn).unwrap();
        std::thread::scope(|scope| {
            let holder = scope.spawn(|| {
                let _state = server.lock_state();
                panic!("a bug while the state is held");
            });
            assert!(holder.join().is_err());
        });
        let err = server.begin().unwrap_err();
        assert!(err.to_string().contains("a panic"), "{err}");
    }
}
