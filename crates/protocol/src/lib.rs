//! The boundary between a client and a server (QuickStore section 3.1's page server): the
//! [`PageServer`] trait a client session calls, in process or over the network, and the
//! batches of log records it ships. Clients depend on this crate, not on the server's.

pub mod archive;
pub mod batch;
pub mod increments;
pub mod interface;
pub mod kept_locks;
pub mod snapshot_news;

pub use archive::{Archive, PageCopy};
pub use batch::{ObjectUpdate, ObjectUpdates, PageUpdate, PageUpdates};
pub use increments::{FieldIncrement, IncrementsRan};
pub use interface::{
    AppendedCommit, LockMode, LockTarget, OperationNote, PageServer, ShippedPage, ShippedRecords,
    TxnKind,
};
pub use kept_locks::KeptLocks;
pub use snapshot_news::{Accepted, Lookup, SnapshotHistory, SnapshotNews};
