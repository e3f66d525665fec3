//! `Store`, the handle of an open store, and `Session`, one client of it.

use crate::as_of::{AsOf, AsOfTransaction};
use crate::counters::{self, CountersByScheme};
use crate::folder;
use crate::multilevel::{MultiLevelTransaction, Operations, Strategy};
use crate::object::{Oid, Persistent};
use crate::options::Options;
use crate::transaction::Transaction;
use lodestore_client::{AsOfReader, SnapshotPages};
use lodestore_client::{ClientSession, DetectionStats, Scheme, SpareCaches};
use lodestore_core::{Result, TypeId};
use lodestore_net::RemotePageServer;
use lodestore_server::inspect::{self, StoreInfo};
use lodestore_server::versions::Snapshot;
use lodestore_server::workers::BackgroundWorkers;
use lodestore_server::{
    pool_pages, PageServer, RecoveryMethodKind, RestartReport, Server, ServerStats,
};
use lodestore_snapshots::Snapshots;
use lodestore_storage::StagingFileSystem;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// An open store. Embedded (`create`, `open`): the server runs in this process. Remote
/// (`connect`): a `lodestore serve` process owns the store and every session talks to it over
/// its own connection. The API is the same; cheap to share between threads behind an `Arc`,
/// each thread working through its own `Session`.
pub struct Store {
    /// Dropped first: it stops before the server closes.
    _workers: Option<BackgroundWorkers>,
    backend: Backend,
    /// Counters of the sessions that ended, by scheme; added to the store's counters file
    /// when an embedded store closes.
    session_counters: Arc<Mutex<CountersByScheme>>,
    /// Client caches of closed sessions, for the next sessions (`SpareCaches`).
    spare_caches: Arc<SpareCaches>,
    path: PathBuf,
    options: Options,
    /// The snapshot component of an embedded store that keeps snapshots.
    snapshots: Option<Arc<Snapshots>>,
}

enum Backend {
    Embedded(Arc<Server>),
    Remote {
        address: String,
        /// The connection opened by `connect`: its welcome, and the link for counters and
        /// checkpoints. Sessions open their own.
        control: Box<RemotePageServer>,
    },
}

impl Store {
    /// Creates a new store in the folder `path`, which must be missing or empty. The store is
    /// built beside it under a temporary name (`.NAME.creating`), closed, and renamed into
    /// place in one step: a creation that fails or is killed leaves no store, never a broken
    /// one that cannot be opened or created again.
    pub fn create(path: impl AsRef<Path>, options: Options) -> Result<Store> {
        let path = path.as_ref().to_path_buf();
        options.validate()?;
        let page_size = options.page_size_or_default();
        pool_pages("client cache", options.client_cache_bytes, page_size)?;
        let fs = options.file_system.clone();
        if fs.exists(&lodestore_storage::volume::data_file_path(&path)) {
            return Err(lodestore_core::Error::AlreadyExists { path });
        }
        if fs.is_dir(&path) && !(fs.list(&path)?.is_empty() && fs.list_dirs(&path)?.is_empty()) {
            return Err(lodestore_core::Error::InvalidArgument(format!(
                "{} is a folder that is not empty; a new store needs a missing or empty folder",
                path.display()
            )));
        }
        let temporary = folder::sibling(&path, "creating")?;
        folder::clear_leftover(fs.as_ref(), &temporary)?;
        // Nothing reads the temporary folder before the rename: its syncs wait for one pass
        // over the finished tree, once the server has closed every file.
        let staging = Arc::new(StagingFileSystem::new(fs.clone(), &temporary));
        let built = Server::create(
            staging.clone(),
            &temporary,
            page_size,
            options.server_options(),
        )
        .map(drop)
        .and_then(|()| staging.make_durable());
        match built {
            Ok(()) => {}
            Err(error) => {
                if let Err(cleanup) = fs.remove_dir_all(&temporary) {
                    tracing::warn!(error = %cleanup, path = %temporary.display(), "could not remove a failed store creation");
                }
                return Err(error);
            }
        }
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            fs.create_dir_all(parent)?;
        }
        fs.rename_dir(&temporary, &path)?;
        Store::open(path, options)
    }

    /// Removes the store in the folder `path` and the folder, whole or not at all: the store's
    /// exclusive lock is taken first, so a store in use is refused with `Error::StoreLocked`;
    /// a folder holding anything that is not part of a store is refused too.
    pub fn remove(path: impl AsRef<Path>, options: &Options) -> Result<()> {
        folder::remove_store(options.file_system.as_ref(), path.as_ref())
    }

    /// Opens the store in the folder `path`.
    pub fn open(path: impl AsRef<Path>, options: Options) -> Result<Store> {
        let path = path.as_ref().to_path_buf();
        options.validate()?;
        let fs = options.file_system.clone();
        let mut server_options = options.server_options();
        let snapshots = if options.snapshots || Snapshots::exist_in(fs.as_ref(), &path) {
            // The component reads its files with the store's page size, before the server
            // opens: the superblock says it.
            let page_size = lodestore_storage::Volume::open(
                fs.as_ref(),
                &path,
                options.page_size,
                lodestore_storage::OpenMode::ReadOnly,
            )?
            .page_size();
            let archive = options.archive.clone().map(|archive| {
                lodestore_snapshots::ReadAhead::wrap(archive, options.archive_read_ahead)
            });
            let snapshots = Arc::new(Snapshots::open(fs.clone(), &path, page_size, archive)?);
            server_options.versions = Some(snapshots.clone());
            Some(snapshots)
        } else {
            None
        };
        let server = Server::open(fs, &path, options.page_size, server_options)?;
        let data_bytes =
            u64::from(server.volume().page_count()) * server.volume().page_size() as u64;
        if let Some(factor) = options
            .outgrown_by(data_bytes)
            .filter(|_| options.warn_outgrown)
        {
            tracing::warn!(
                store = %path.display(),
                data_bytes,
                client_cache_bytes = options.client_cache_bytes,
                server_pool_bytes = options.server_pool_bytes,
                "the store is {factor:.1} times its caches: most page visits will read the data \
                 file; Options::client_cache_bytes and server_pool_bytes set larger caches"
            );
        }
        pool_pages(
            "client cache",
            options.client_cache_bytes,
            server.volume().page_size(),
        )?;
        Store::serving(server, path, options, snapshots)
    }

    fn serving(
        server: Server,
        path: PathBuf,
        options: Options,
        snapshots: Option<Arc<Snapshots>>,
    ) -> Result<Store> {
        let server = Arc::new(server);
        let workers =
            if options.background_install {
                Some(BackgroundWorkers::start(&server).map_err(|e| {
                    lodestore_core::Error::io(&path, "start the background workers", e)
                })?)
            } else {
                None
            };
        let warm_start = !server.warm_start().is_empty();
        let store = Store {
            _workers: workers,
            session_counters: Arc::default(),
            spare_caches: Arc::default(),
            backend: Backend::Embedded(server.clone()),
            path,
            options,
            snapshots,
        };
        if warm_start {
            // Multi-level transactions the crash left unfinished: their compensations.
            let mut session = store.session()?;
            crate::multilevel::warm_start(&server, &store.options.operations, &mut session.client)?;
        }
        // Multi-level transactions whose network client left: compensated here, by a session
        // of the store's own (the server holds it weakly: it must not keep itself alive).
        let weak = Arc::downgrade(&server);
        let operations = store.options.operations.clone();
        let mut scheme = store.options.scheme;
        if !store
            .recovery_method()
            .parse::<RecoveryMethodKind>()?
            .wants_logged_pages()
        {
            scheme.ships_logged_pages = false;
        }
        let (pages, recovery_buffer) = (
            pool_pages(
                "client cache",
                store.options.client_cache_bytes,
                store.page_size(),
            )?,
            store.options.recovery_buffer_bytes,
        );
        server.set_compensator(Arc::new(move |txn, pending| {
            let server =
                weak.upgrade()
                    .ok_or_else(|| lodestore_core::Error::TransactionInactive {
                        reason: "the store closed".into(),
                    })?;
            let mut client =
                ClientSession::new(server.clone(), pages, scheme, recovery_buffer, None)?;
            crate::multilevel::compensate_abandoned(
                &server,
                &operations,
                &mut client,
                txn,
                &pending,
            )
        }));
        Ok(store)
    }

    /// Connects to the server at `address` (`host:port`, as `lodestore serve --listen` was
    /// given). `options` set the client side: cache, scheme, recovery buffer; the server's
    /// own options are its own. Each session opens a connection of its own.
    pub fn connect(address: &str, options: Options) -> Result<Store> {
        options.validate()?;
        let control =
            RemotePageServer::connect_secured(address, "lodestore control", &options.credentials)?;
        if control.welcome().recovery_method == lodestore_net::archive::ARCHIVE_NODE_METHOD {
            return Err(lodestore_core::Error::InvalidArgument(format!(
                "{address} is a snapshot archive node, not a store"
            )));
        }
        pool_pages(
            "client cache",
            options.client_cache_bytes,
            control.welcome().page_size,
        )?;
        Ok(Store {
            _workers: None,
            session_counters: Arc::default(),
            // A server may restart under a remote store, and a page's LSN is only compared
            // within one server's life: sessions hand on their memory, not their pages.
            spare_caches: Arc::new(SpareCaches::memory_only()),
            backend: Backend::Remote {
                address: address.to_string(),
                control: Box::new(control),
            },
            path: PathBuf::from(address),
            options,
            snapshots: None,
        })
    }

    /// Serves this (embedded) store to remote clients on `listener` until `stop` is set: the
    /// loop behind `lodestore serve`. Sessions of this process keep working alongside. When
    /// stopped, it shuts every connection down and waits for them to end (their unfinished
    /// transactions roll back); returns how many were still open when it gave up waiting.
    pub fn serve(
        &self,
        listener: std::net::TcpListener,
        stop: Arc<std::sync::atomic::AtomicBool>,
    ) -> Result<usize> {
        self.serve_with_limits(listener, stop, lodestore_net::ServeLimits::default())
    }

    /// `serve` with the bounds on clients of the caller's choosing.
    pub fn serve_with_limits(
        &self,
        listener: std::net::TcpListener,
        stop: Arc<std::sync::atomic::AtomicBool>,
        limits: lodestore_net::ServeLimits,
    ) -> Result<usize> {
        self.serve_with(
            listener,
            stop,
            limits,
            lodestore_net::auth::ServerAuth::none(),
        )
    }

    /// `serve` with bounds on clients and the tokens they must prove they hold, each with the
    /// access it grants (`ServerAuth::none()`: anyone who can connect is served).
    pub fn serve_with(
        &self,
        listener: std::net::TcpListener,
        stop: Arc<std::sync::atomic::AtomicBool>,
        limits: lodestore_net::ServeLimits,
        auth: lodestore_net::auth::ServerAuth,
    ) -> Result<usize> {
        match &self.backend {
            Backend::Embedded(server) => {
                lodestore_net::serve_with(server.clone(), listener, stop, limits, auth)
            }
            Backend::Remote { address, .. } => Err(lodestore_core::Error::Unsupported(format!(
                "{address} is served by another process; only an embedded store can be served"
            ))),
        }
    }

    /// Is this store served by another process?
    pub fn is_remote(&self) -> bool {
        matches!(self.backend, Backend::Remote { .. })
    }

    /// How this store's sessions run multi-level transactions: [`Options::multi_level_strategy`]
    /// if given, else the strategy the store recorded (a remote store's is not sent: S2/PS).
    pub fn multi_level_strategy(&self) -> Strategy {
        self.options
            .multi_level_strategy
            .unwrap_or_else(|| match &self.backend {
                Backend::Embedded(server) => {
                    Strategy::from_code(server.volume().superblock().multi_level_strategy)
                        .unwrap_or_default()
                }
                Backend::Remote { .. } => Strategy::default(),
            })
    }

    /// Name of the server's recovery method: esm, redo or wpl.
    pub fn recovery_method(&self) -> &str {
        match &self.backend {
            Backend::Embedded(server) => server.recovery_method(),
            Backend::Remote { control, .. } => &control.welcome().recovery_method,
        }
    }

    /// Opens the store in `path`, creating it first if the folder holds none.
    pub fn open_or_create(path: impl AsRef<Path>, options: Options) -> Result<Store> {
        let path = path.as_ref();
        let data_file = lodestore_storage::volume::data_file_path(path);
        if options.file_system.exists(&data_file) {
            Store::open(path, options)
        } else {
            Store::create(path, options)
        }
    }

    /// A new session with its own client cache, using the store's scheme.
    pub fn session(&self) -> Result<Session> {
        self.session_with_scheme(self.options.scheme)
    }

    /// A new session that detects and logs updates with `scheme` instead of the store's
    /// (schemes differ only at the client; the server's recovery method must match).
    pub fn session_with_scheme(&self, scheme: Scheme) -> Result<Session> {
        // A redo-at-server server takes log records only: the pages they describe stay home.
        let mut scheme = scheme;
        if !self
            .recovery_method()
            .parse::<RecoveryMethodKind>()?
            .wants_logged_pages()
        {
            scheme.ships_logged_pages = false;
        }
        let page_size = self.page_size();
        let pages = pool_pages("client cache", self.options.client_cache_bytes, page_size)?;
        let server: Arc<dyn PageServer> = match &self.backend {
            Backend::Embedded(server) => server.clone(),
            Backend::Remote { address, .. } => Arc::new(RemotePageServer::connect_secured(
                address,
                "lodestore session",
                &self.options.credentials,
            )?),
        };
        let mut client = ClientSession::new(
            server,
            pages,
            scheme,
            self.options.recovery_buffer_bytes,
            Some(self.spare_caches.clone()),
        )?;
        if !self.options.keep_read_locks {
            client.set_keep_read_locks(false)?;
        }
        Ok(Session {
            client,
            operations: self.options.operations.clone(),
            strategy: self.multi_level_strategy(),
            counters: (!self.is_remote()).then(|| self.session_counters.clone()),
            snapshot_pages: SnapshotPages::new(pages),
        })
    }

    /// The store's folder; for a remote store, the server's address.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn page_size(&self) -> usize {
        match &self.backend {
            Backend::Embedded(server) => server.volume().page_size(),
            Backend::Remote { control, .. } => control.welcome().page_size,
        }
    }

    /// The server's counters of a remote store (zeros, with a warning, if the server cannot
    /// be asked).
    fn remote_stats(
        control: &RemotePageServer,
    ) -> (
        ServerStats,
        lodestore_wal::LogStats,
        lodestore_server::LockStats,
    ) {
        control.stats().unwrap_or_else(|error| {
            tracing::warn!(%error, server = control.peer(), "could not read the server's counters");
            Default::default()
        })
    }

    /// Server counters since the store was opened.
    pub fn server_stats(&self) -> ServerStats {
        match &self.backend {
            Backend::Embedded(server) => server.stats(),
            Backend::Remote { control, .. } => Self::remote_stats(control).0,
        }
    }

    /// The largest persistence sphere (pages) since the store opened or the last call, which
    /// starts the next period; a remote store's server keeps its own, so this is `None` there.
    pub fn take_sphere_pages_max(&self) -> Option<u64> {
        match &self.backend {
            Backend::Embedded(server) => Some(server.take_sphere_pages_max()),
            Backend::Remote { .. } => None,
        }
    }

    /// Takes a checkpoint now: every dirty page is written and the log before it can be reused
    /// (a main-memory store writes every changed page to its next backup image).
    pub fn checkpoint(&self) -> Result<()> {
        match &self.backend {
            Backend::Embedded(server) => server.checkpoint(),
            Backend::Remote { control, .. } => control.checkpoint(),
        }
    }

    /// Lock requests, waits, wait time, deadlocks and timeouts since the store was opened.
    pub fn lock_stats(&self) -> lodestore_server::LockStats {
        match &self.backend {
            Backend::Embedded(server) => server.lock_stats(),
            Backend::Remote { control, .. } => Self::remote_stats(control).2,
        }
    }

    /// Counters of the write-ahead log since the store was opened.
    pub fn log_stats(&self) -> lodestore_wal::LogStats {
        match &self.backend {
            Backend::Embedded(server) => server.log_stats(),
            Backend::Remote { control, .. } => Self::remote_stats(control).1,
        }
    }

    /// What recovery found and did when this store (or, remote, its server) was opened.
    pub fn restart_report(&self) -> &RestartReport {
        match &self.backend {
            Backend::Embedded(server) => server.restart_report(),
            Backend::Remote { control, .. } => &control.welcome().restart,
        }
    }

    /// Takes a snapshot of the whole store: it holds exactly the transactions committed
    /// before it, and returns once it is durable. The store must keep snapshots
    /// ([`Options::snapshots`]).
    pub fn snapshot(&self) -> Result<Snapshot> {
        match &self.backend {
            Backend::Embedded(server) => server.take_snapshot(),
            Backend::Remote { control, .. } => control.take_snapshot(),
        }
    }

    /// Runs `read` in a read-only transaction of the latest committed state that takes no
    /// locks: it never waits for a writer, no writer waits for it, and it sees every
    /// transaction committed before it began and nothing after, however long it runs (what
    /// LMDB and redb readers give). Built on snapshots: a snapshot is taken for it, read as of
    /// itself, and deleted when `read` returns, so the store must keep snapshots
    /// ([`Options::snapshots`]). Costs: taking and deleting the snapshot (a sync of the
    /// snapshot history each), and while the reader runs, a copy of each page a writer changes
    /// for the first time since (Thor's copy-on-write, in the snapshot log).
    pub fn read_latest<R>(
        &self,
        session: &mut Session,
        read: impl FnOnce(&mut AsOfTransaction<'_>) -> Result<R>,
    ) -> Result<R> {
        let snapshot = self.snapshot().map_err(|e| match e {
            lodestore_core::Error::Unsupported(reason) => lodestore_core::Error::Unsupported(
                format!("a reader of the latest state needs Options::snapshots(true): {reason}"),
            ),
            other => other,
        })?;
        let outcome = session
            .begin_as_of(AsOf::Snapshot(snapshot.id))
            .and_then(|mut txn| {
                let result = read(&mut txn);
                let finished = txn.finish();
                let value = result?;
                finished.map(|()| value)
            });
        let deleted = self.delete_snapshot(snapshot.id);
        let value = outcome?;
        deleted.map(|_| value)
    }

    /// Every snapshot of the store, oldest first (none when it keeps no snapshots).
    pub fn snapshots(&self) -> Result<Vec<Snapshot>> {
        match &self.backend {
            Backend::Embedded(server) => Ok(server.list_snapshots()),
            Backend::Remote { control, .. } => control.snapshots(),
        }
    }

    /// Deletes the snapshot numbered `id`, and the page copies no remaining snapshot reads.
    /// Refused while a transaction reads it.
    pub fn delete_snapshot(&self, id: u64) -> Result<Snapshot> {
        let deleted = match &self.backend {
            Backend::Embedded(server) => server.delete_snapshots(&|s| s.id == id)?,
            Backend::Remote { control, .. } => control.delete_snapshots(vec![id], None)?,
        };
        deleted
            .first()
            .copied()
            .ok_or_else(|| lodestore_core::Error::NoSuchSnapshot {
                reason: format!("no snapshot numbered {id}"),
            })
    }

    /// Deletes every snapshot taken before `time`, and the page copies no remaining snapshot
    /// reads; returns them, oldest first.
    pub fn delete_snapshots_before(&self, time: std::time::SystemTime) -> Result<Vec<Snapshot>> {
        let before = crate::as_of::micros_since_epoch(time);
        match &self.backend {
            Backend::Embedded(server) => server.delete_snapshots(&|s| s.time_us < before),
            Backend::Remote { control, .. } => control.delete_snapshots(Vec::new(), Some(before)),
        }
    }

    /// Moves the page copies waiting in the snapshot log to the archive now (a background
    /// worker does it as it goes; crash campaigns, which run none, call this). Nothing to do
    /// when the store keeps no snapshots.
    pub fn archive_snapshot_pages(&self) -> Result<()> {
        match &self.snapshots {
            Some(snapshots) => snapshots.archive_all(),
            None => Ok(()),
        }
    }

    /// Figures of the snapshot component, when the store keeps snapshots.
    pub fn snapshot_stats(&self) -> Option<lodestore_snapshots::SnapshotStats> {
        self.snapshots.as_ref().map(|snapshots| snapshots.stats())
    }

    /// Figures about the stored data (reads every page; takes a checkpoint first so the data
    /// file is current). Embedded stores only: run `lodestore info` where the server runs.
    pub fn info(&self) -> Result<StoreInfo> {
        match &self.backend {
            Backend::Embedded(server) => {
                server.checkpoint()?;
                inspect::info(server.volume())
            }
            Backend::Remote { address, .. } => Err(lodestore_core::Error::Unsupported(format!(
                "info reads the data file; run `lodestore info` where the server of {address} runs"
            ))),
        }
    }
}

/// One client of a store: a client cache and one transaction at a time.
pub struct Session {
    client: ClientSession,
    /// The operations multi-level transactions run: their inverses, at an abort.
    operations: Arc<Operations>,
    strategy: Strategy,
    /// Where the session's counters go when it ends (an embedded store's totals).
    counters: Option<Arc<Mutex<CountersByScheme>>>,
    /// Pages of snapshots read, apart from the client cache of current pages.
    snapshot_pages: SnapshotPages,
}

impl Drop for Session {
    fn drop(&mut self) {
        let Some(totals) = &self.counters else {
            return;
        };
        let mine = counters::of_session(&self.client.stats(), &self.client.detection_stats());
        let by_scheme = [(self.client.scheme().name().to_string(), mine)].into();
        let mut totals = totals.lock().unwrap_or_else(|e| e.into_inner());
        counters::add(&mut totals, &by_scheme);
    }
}

impl Session {
    /// Starts a transaction. Dropping it without `commit` aborts it.
    pub fn begin(&mut self) -> Result<Transaction<'_>> {
        self.client.begin()?;
        Ok(Transaction::new(&mut self.client))
    }

    /// Starts a multi-level transaction: high-level operations under semantic locks, each a
    /// subtransaction of its own (see [`crate::multilevel`]), run by the store's strategy
    /// ([`Options::multi_level_strategy`]). Embedded stores only, for now.
    pub fn begin_multi_level(&mut self) -> Result<MultiLevelTransaction<'_>> {
        self.begin_multi_level_with(self.strategy)
    }

    /// [`Session::begin_multi_level`] with a strategy of one's own.
    pub fn begin_multi_level_with(
        &mut self,
        strategy: Strategy,
    ) -> Result<MultiLevelTransaction<'_>> {
        MultiLevelTransaction::begin(&mut self.client, self.operations.clone(), strategy)
    }

    /// Runs `work` in a transaction and commits it, returning what `work` returned. When the
    /// transaction is chosen as a deadlock victim or times out waiting for a lock (in `work`
    /// or at commit), it is aborted and `work` runs again, up to ten attempts in all with a
    /// growing random pause between them; then `Error::RetriesExhausted` says how many were
    /// made and what the last failure was. Any other error aborts the transaction and is
    /// returned at once. `work` may run several times, so it should not act outside the
    /// transaction before it returns. A rerun takes each collection it changes whole (its
    /// header locked exclusive at the first insert or remove), so splits and merges that lost
    /// a conflict once do not lose it again.
    pub fn transact<T>(
        &mut self,
        work: impl FnMut(&mut Transaction<'_>) -> Result<T>,
    ) -> Result<T> {
        self.transact_with(&crate::RetryPolicy::default(), work)
    }

    /// [`Session::transact`] with a retry policy of one's own.
    pub fn transact_with<T>(
        &mut self,
        policy: &crate::RetryPolicy,
        mut work: impl FnMut(&mut Transaction<'_>) -> Result<T>,
    ) -> Result<T> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let outcome = {
                let mut txn = self.begin()?;
                // A rerun after a lock conflict takes each collection it changes whole
                // (its header exclusive before anything else): splits there need the inner
                // nodes exclusive, which concurrent inserters hold shared, and the same
                // transaction could lose the same conflict at every attempt.
                txn.collections_exclusive = attempt > 1;
                match work(&mut txn) {
                    Ok(value) => txn.commit().map(|_| value),
                    Err(e) => {
                        // Abort now so the locks go before any pause (dropping does it too).
                        let _ = txn.abort();
                        Err(e)
                    }
                }
            };
            match outcome {
                Err(e) if e.is_retryable() => {
                    if attempt >= policy.attempts_max() {
                        return Err(lodestore_core::Error::RetriesExhausted {
                            attempts: attempt,
                            last: Box::new(e),
                        });
                    }
                    tracing::debug!(attempt, error = %e, "transaction retried");
                    std::thread::sleep(policy.pause(attempt, random()));
                }
                other => return other,
            }
        }
    }

    /// Starts a read-only transaction that sees the store as it was at a snapshot: no locks,
    /// never waits for writers, never sees what a transaction had not committed then. A time
    /// names the newest snapshot at or before it; a time before the first snapshot is an
    /// error saying so.
    pub fn begin_as_of(&mut self, at: AsOf) -> Result<AsOfTransaction<'_>> {
        if self.client.is_active() {
            return Err(lodestore_core::Error::InvalidArgument(
                "a transaction is already active in this session".into(),
            ));
        }
        let server = self.client.server();
        let resolve = |server: &Arc<dyn PageServer>| match at {
            AsOf::Snapshot(id) => Ok(id),
            AsOf::Time(time) => server.snapshot_at(crate::as_of::micros_since_epoch(time)),
        };
        let mut snapshot = resolve(&server)?;
        let txn = match AsOfReader::begin_transaction(server.as_ref(), snapshot) {
            Err(lodestore_core::Error::NoSuchSnapshot { .. }) if matches!(at, AsOf::Time(_)) => {
                // Deleted since this session heard of it (remote): the time now names an
                // older one.
                snapshot = resolve(&server)?;
                AsOfReader::begin_transaction(server.as_ref(), snapshot)?
            }
            other => other?,
        };
        AsOfTransaction::begin(server, txn, snapshot, &mut self.snapshot_pages)
    }

    /// Pages whose shared locks this session keeps between its transactions now (see
    /// [`crate::Options::keep_read_locks`]).
    pub fn kept_locks(&self) -> usize {
        self.client.kept_locks()
    }

    /// Session counters: locks requested, pages fetched and shipped, evictions, and the time
    /// of committed transactions by phase.
    pub fn stats(&self) -> crate::ClientStats {
        self.client.stats()
    }

    /// Counters of update detection and log generation: traps, pieces copied, bytes
    /// compared, log records and bytes generated.
    pub fn detection_stats(&self) -> DetectionStats {
        self.client.detection_stats()
    }

    /// The scheme this session detects and logs updates with.
    pub fn scheme(&self) -> Scheme {
        self.client.scheme()
    }

    /// Where objects this session allocates from now on go: in free space anywhere (the
    /// default), or clustered on pages of their own. Choosing `Clustered` again starts a new
    /// cluster, so a loader can keep each group of objects apart.
    pub fn set_placement(&mut self, placement: crate::Placement) {
        self.client.set_placement(placement);
    }

    /// Where objects this session allocates go.
    pub fn placement(&self) -> crate::Placement {
        self.client.placement()
    }

    /// Reserves `count` objects of type `T` ahead of their contents and returns their OIDs,
    /// so a graph whose objects refer to each other forward is written in one pass, over as
    /// many transactions as suits (a bulk load): objects of `T` are placed side by side on
    /// pages held for this session, and [`Transaction::fill`] writes each one. A page's
    /// objects come into being, zero-filled, with the first transaction that fills one of
    /// them, once it commits; pages never filled go back to free space when the session ends
    /// (or [`Session::release_reservations`], or a restart). Only objects that fit a page can
    /// be reserved.
    ///
    /// ```
    /// # use lodestore::{Oid, Options, Persistent, Store};
    /// #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
    /// #[repr(C)]
    /// struct Node { value: u64, next: Oid<Node> }
    /// impl Persistent for Node { const TYPE_ID: u32 = 1; }
    ///
    /// # let dir = tempfile::tempdir()?;
    /// let store = Store::create(dir.path().join("ring"), Options::new())?;
    /// let mut session = store.session()?;
    /// let nodes: Vec<Oid<Node>> = session.reserve(1000)?;
    /// // Each node names the next before the next exists; two transactions of 500.
    /// for half in nodes.chunks(500) {
    ///     let mut txn = session.begin()?;
    ///     for &node in half {
    ///         let i = nodes.iter().position(|n| *n == node).unwrap();
    ///         let next = nodes[(i + 1) % nodes.len()];
    ///         txn.fill(node, &Node { value: i as u64, next })?;
    ///     }
    ///     txn.commit()?;
    /// }
    /// let mut txn = session.begin()?;
    /// assert_eq!(txn.get(nodes[999])?.next, nodes[0]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reserve<T: Persistent>(&mut self, count: u64) -> Result<Vec<Oid<T>>> {
        let oids = self
            .client
            .reserve(TypeId(T::TYPE_ID), size_of::<T>(), count)?;
        Ok(oids.into_iter().map(Oid::from_raw).collect())
    }

    /// [`Session::reserve`] for untyped objects: `count` zero-filled objects of `type_id`
    /// and `len` bytes each, written with [`Transaction::fill_bytes`].
    pub fn reserve_zeroed(
        &mut self,
        type_id: u32,
        len: u64,
        count: u64,
    ) -> Result<Vec<lodestore_core::Oid>> {
        let len = usize::try_from(len).map_err(|_| {
            lodestore_core::Error::InvalidArgument(format!("objects of {len} bytes"))
        })?;
        self.client.reserve(TypeId(type_id), len, count)
    }

    /// Gives the pages of every reservation of this session that no committed transaction
    /// filled back to free space (closing the session does it too). The OIDs of objects not
    /// filled name nothing afterwards.
    pub fn release_reservations(&mut self) -> Result<()> {
        self.client.release_reservations()
    }
}

impl Store {
    /// Closes the store and reports what failed. Embedded: stops the background workers,
    /// keeps the sessions' counters, rolls back what is still active and checkpoints, so the
    /// next open has nothing to recover (`Server::close`); every session must have been
    /// dropped. Remote: closes the control connection. Dropping a store does the same and can
    /// only log what failed.
    pub fn close(mut self) -> Result<()> {
        drop(self._workers.take());
        // Locks closed sessions kept for the next ones hold the server too.
        self.spare_caches.release_locks();
        let counters = self.save_counters();
        let closed = match &self.backend {
            Backend::Embedded(server) => {
                // The store's own reference, and the installer's until it stopped above.
                let others = Arc::strong_count(server) - 1;
                if others > 0 {
                    return Err(lodestore_core::Error::InvalidArgument(format!(
                        "close {}: {others} sessions or servers still use the store; end them \
                         first",
                        self.path.display()
                    )));
                }
                server.close()
            }
            Backend::Remote { .. } => Ok(()),
        };
        closed.and(counters)
    }

    /// Adds the counters of the sessions that ended to the store's counters file (embedded).
    fn save_counters(&mut self) -> Result<()> {
        if self.is_remote() {
            return Ok(());
        }
        let totals = std::mem::take(
            &mut *self
                .session_counters
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        if totals.is_empty() {
            return Ok(());
        }
        counters::add_to_file(self.options.file_system.as_ref(), &self.path, &totals)
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if let Err(e) = self.save_counters() {
            tracing::debug!(error = %e, "session counters were not kept");
        }
    }
}

/// A random number for a retry's pause: the sessions that deadlocked draw apart.
fn random() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    RandomState::new().hash_one(std::time::Instant::now())
}
