//! Snapshots of a Lodestore store and reads as of them, after Thor (Moh, "Snapshots in a
//! Distributed Persistent Object Storage System", 2003), at the page level. The component
//! plugs into the engine through its versions hook (`lodestore_server::versions`) and works
//! beside every recovery method.
//!
//! - [`component::Snapshots`]: coordinator, pre-images, copies at commit, the snapshot page
//!   map, archiving, pages as of a snapshot.
//! - [`history`]: the durable snapshot history.
//! - [`snapshot_log`]: copies waiting for the archive.
//! - [`archive`]: the archive interface and its local backend.
//! - [`copies`]: the file format both the snapshot log and the local archive use.
//! - [`location`]: where the store's pages are archived, recorded.

pub mod archive;
pub mod component;
pub mod copies;
pub mod history;
pub mod location;
pub mod snapshot_log;

pub use archive::{
    file::{FileArchive, FILE_SCHEME},
    local::{LocalArchive, LOCAL_LOCATION},
    Archive, PageCopy,
};
pub use component::{SnapshotStats, Snapshots, SNAPSHOTS_DIR_NAME};
pub use lodestore_protocol::archive::{page_copies, ReadAhead, READ_AHEAD_MAX};
pub use lodestore_server::versions::Snapshot;
