//! The client layer: a client cache of page frames (one mmap'd arena), the object operations a
//! transaction runs against it, and update detection with log generation (`detect`), combined
//! into named schemes (`scheme`). The client talks to its server only through `PageServer`.

pub mod as_of;
pub mod cache;
pub mod detect;
mod located;
pub mod prefault;
mod reserved;
pub mod scheme;
pub mod session;
pub mod spare_caches;

pub use as_of::{AsOfReader, SnapshotPages};
pub use cache::ClientCache;
pub use detect::{DetectionStats, Detector};
pub use scheme::Scheme;
pub use session::{ClientSession, ObjectInfo, Placement};
pub use spare_caches::SpareCaches;
