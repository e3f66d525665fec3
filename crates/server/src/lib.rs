//! The server layer: owns a volume, its log, buffer pool, lock manager and free-space
//! management, and serves pages to clients through the [`PageServer`] interface. How it logs
//! and recovers is a [`RecoveryMethodKind`]. Embedded stores call the
//! in-process [`Server`] directly; a network server will put the same interface on a socket.

pub mod buffer_pool;
pub mod check;
pub mod fresh_pages;
pub mod home_run;
pub mod inspect;
pub mod lock_table;
pub mod log_inspect;
pub mod multilevel;
pub mod recovery;
pub mod reservations;
pub mod salvage;
pub mod server;
pub mod space;
pub mod stats;
pub mod versions;
pub mod workers;

// The client/server boundary lives in its own crate; the server's paths to it stay.
pub use lock_table::LockStats;
pub use lodestore_multilevel::warm_start::Compensation;
pub use lodestore_protocol::{batch, increments, interface};
pub use lodestore_protocol::{Accepted, Lookup, SnapshotHistory, SnapshotNews};
pub use lodestore_protocol::{
    AppendedCommit, FieldIncrement, IncrementsRan, LockMode, LockTarget, ObjectUpdate,
    ObjectUpdates, OperationNote, PageServer, PageUpdate, PageUpdates, ShippedPage, ShippedRecords,
    TxnKind,
};
pub use multilevel::Compensator;
pub use recovery::{RecoveryMethodKind, RestartLevel, RestartReport};
pub use server::{
    allocate_pages_max, pool_pages, validate_client_page, Server, ServerOptions,
    CHECKPOINT_LOG_BYTES_DEFAULT, CHECKPOINT_LOG_RECORDS_DEFAULT, COMMIT_DELAY_MAX,
    COMMIT_SIBLINGS_DEFAULT, LOG_DIR_NAME, PAGES_HOME_MIN_DEFAULT,
};
pub use stats::ServerStats;
