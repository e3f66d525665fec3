//! `Store`, the handle of an open store, and `Session`, one client of it.

use crate::options::Options;
use crate::transaction::Transaction;
use lodestore_client::{ClientSession, DetectionStats, Scheme};
use lodestore_core::Result;
use lodestore_server::inspect::{self, StoreInfo};
use lodestore_server::{pool_pages, RestartReport, Server, ServerStats};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// An open store (embedded: the server runs in this process). Cheap to share between threads
/// behind an `Arc`; each thread works through its own `Session`.
pub struct Store {
    server: Arc<Server>,
    path: PathBuf,
    options: Options,
}

impl Store {
    /// Creates a new store in the folder `path` (created if missing; it must not hold a store).
    pub fn create(path: impl AsRef<Path>, options: Options) -> Result<Store> {
        let path = path.as_ref().to_path_buf();
        let page_size = options.page_size_or_default();
        pool_pages("client cache", options.client_cache_bytes, page_size)?;
        let server = Server::create(
            options.file_system.clone(),
            &path,
            page_size,
            options.server_options(),
        )?;
        Ok(Store::serving(server, path, options))
    }

    /// Opens the store in the folder `path`.
    pub fn open(path: impl AsRef<Path>, options: Options) -> Result<Store> {
        let path = path.as_ref().to_path_buf();
        let server = Server::open(
            options.file_system.clone(),
            &path,
            options.page_size,
            options.server_options(),
        )?;
        pool_pages(
            "client cache",
            options.client_cache_bytes,
            server.volume().page_size(),
        )?;
        Ok(Store::serving(server, path, options))
    }

    fn serving(server: Server, path: PathBuf, options: Options) -> Store {
        Store {
            server: Arc::new(server),
            path,
            options,
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
        if scheme.method.name() != self.server.recovery_method() {
            return Err(lodestore_core::Error::InvalidArgument(format!(
                "scheme {scheme} needs the {} recovery method; this store uses {}",
                scheme.method.name(),
                self.server.recovery_method()
            )));
        }
        let page_size = self.page_size();
        let pages = pool_pages("client cache", self.options.client_cache_bytes, page_size)?;
        Ok(Session {
            client: ClientSession::new(
                self.server.clone(),
                pages,
                scheme,
                self.options.recovery_buffer_bytes,
            )?,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn page_size(&self) -> usize {
        self.server.volume().page_size()
    }

    /// Server counters since the store was opened.
    pub fn server_stats(&self) -> ServerStats {
        self.server.stats()
    }

    /// Takes a checkpoint now: every dirty page is written and the log before it can be reused.
    pub fn checkpoint(&self) -> Result<()> {
        self.server.checkpoint()
    }

    /// Lock waits, deadlocks and timeouts since the store was opened.
    pub fn lock_stats(&self) -> lodestore_server::LockStats {
        self.server.lock_stats()
    }

    /// Counters of the write-ahead log since the store was opened.
    pub fn log_stats(&self) -> lodestore_wal::LogStats {
        self.server.log().stats()
    }

    /// What recovery found and did when this store was opened.
    pub fn restart_report(&self) -> &RestartReport {
        self.server.restart_report()
    }

    /// Figures about the stored data (reads every page; takes a checkpoint first so the data
    /// file is current).
    pub fn info(&self) -> Result<StoreInfo> {
        self.server.checkpoint()?;
        inspect::info(self.server.volume())
    }
}

/// One client of a store: a client cache and one transaction at a time.
pub struct Session {
    client: ClientSession,
}

impl Session {
    /// Starts a transaction. Dropping it without `commit` aborts it.
    pub fn begin(&mut self) -> Result<Transaction<'_>> {
        self.client.begin()?;
        Ok(Transaction::new(&mut self.client))
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
}
