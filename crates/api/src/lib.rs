//! Lodestore: applications keep a graph of typed objects on disk, read and update them in place
//! inside transactions, and find them again by named roots.
//!
//! ```
//! use lodestore::{Options, Persistent, Store};
//!
//! #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
//! #[repr(C)]
//! struct Counter {
//!     value: u64,
//! }
//! impl Persistent for Counter {
//!     const TYPE_ID: u32 = 1;
//! }
//!
//! # let dir = tempfile::tempdir().unwrap();
//! let store = Store::create(dir.path().join("store"), Options::new())?;
//! let mut session = store.session()?;
//! let mut txn = session.begin()?;
//! let counter = txn.alloc(&Counter { value: 0 })?;
//! txn.get_mut(counter)?.value += 1;
//! txn.set_root("counter", counter)?;
//! txn.commit()?;
//! # Ok::<(), lodestore::Error>(())
//! ```

/// The README's examples, built by `cargo test` as doc tests so that what a new user pastes
/// compiles.
#[doc = include_str!("../../../README.md")]
#[cfg(doctest)]
pub struct ReadmeExamples;

pub mod archive_url;
mod as_of;
pub mod collections;
pub mod counters;
mod folder;
pub mod multilevel;
mod object;
mod offline;
mod options;
mod read;
mod retry;
mod store;
mod transaction;

pub use archive_url::archive_from_url;
pub use as_of::{AsOf, AsOfTransaction};
pub use collections::key::{Key, KeyBytes, Packed, Value};
pub use collections::map::{BTreeMap, BTreeSet, Keys};
pub use collections::range::Range;
pub use collections::tree::TreeReport;
pub use counters::{Counters, CountersByScheme};
#[cfg(feature = "p2p")]
pub use lodestore_archive_p2p::{P2pArchive, Traffic as P2pTraffic};
#[cfg(feature = "s3")]
pub use lodestore_archive_s3::{S3Archive, Traffic as S3Traffic};
pub use lodestore_client::session::{ClientStats, PhaseTimes};
pub use lodestore_client::{DetectionStats, Detector, ObjectInfo, Placement, Scheme};
pub use lodestore_core::limits::{page_size_is_supported, PAGE_SIZES_SUPPORTED};
pub use lodestore_core::{Error, Lsn, Oid as RawOid, PageId, Result, TypeId};
pub use lodestore_net::archive::{serve_archive, ArchiveNodes, RunningNode};
pub use lodestore_net::auth::{Access, Credentials, ServerAuth, Token};
pub use lodestore_net::tls::certs::{self as tls_certs, CertificateSet};
pub use lodestore_net::{limits, ServeLimits, TlsClient, TlsServer};
pub use lodestore_server::check::{CheckReport, Problem};
pub use lodestore_server::inspect::{StoreInfo, StoredObject};
pub use lodestore_server::log_inspect::LogSummary;
pub use lodestore_server::versions::Snapshot;
pub use lodestore_server::{
    LockStats, RecoveryMethodKind, RestartLevel, RestartReport, ServerStats,
};
pub use lodestore_snapshots::{
    page_copies, Archive, FileArchive, LocalArchive, PageCopy, ReadAhead, SnapshotStats, Snapshots,
    FILE_SCHEME, LOCAL_LOCATION, READ_AHEAD_MAX,
};
pub use lodestore_storage::overlay::{Change as FileChange, BLOCK_BYTES as CHANGE_BLOCK_BYTES};
pub use lodestore_storage::{
    DiskModel, EmulatedDisks, FileSystem, MemoryFileSystem, OpenMode, OverlayFileSystem,
    RealFileSystem, Storage, DATA_FILE_NAME,
};
pub use lodestore_wal::LogStats;
pub use object::{Oid, Persistent};
pub use offline::{
    check, info, log_summary, objects, readable_objects, recover_in_memory, roots, salvage,
    session_counters, snapshot_summary, RecoveredView, Salvaged,
};
pub use options::{
    default_client_cache_bytes, default_server_pool_bytes, memory_bytes_max, paired_method,
    Options, CLIENT_CACHE_BYTES_DEFAULT_MAX, CLIENT_CACHE_BYTES_DEFAULT_MIN, OUTGROWN_FACTOR,
    SERVER_POOL_BYTES_DEFAULT_MAX, SERVER_POOL_BYTES_DEFAULT_MIN,
};
pub use read::ReadTransaction;
pub use retry::RetryPolicy;
pub use store::{Session, Store};
pub use transaction::{ObjectsOf, PendingCommit, Transaction};

/// Hands back to the system, at once, the cache memory closed stores left to this process.
///
/// A closing store keeps its client caches' and its server pool's mappings (at most two of
/// each kind, marked so the kernel may reclaim them under pressure) for the next store the
/// process opens, which then skips the cost of touching fresh memory. A process done with
/// stores for a while, or one measuring its memory, can call this to unmap them now.
/// Returns the bytes unmapped; stores opened later map their memory afresh.
pub fn release_spare_memory() -> usize {
    lodestore_core::spare_memory::release_all()
}

/// Bytes of cache memory closed stores left to this process, kept for the next store it
/// opens (see [`release_spare_memory`]).
pub fn spare_memory_bytes() -> usize {
    lodestore_core::spare_memory::kept_bytes()
}
