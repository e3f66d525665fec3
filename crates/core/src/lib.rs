//! Lodestore's shared vocabulary: identifiers, the one `Error` enum, checksums and the limits
//! every layer agrees on. Everything above depends on this crate; it depends on nothing of ours.

pub mod checksum;
pub mod error;
pub mod frames;
pub mod ids;
pub mod limits;

pub use error::{Error, Result};
pub use ids::{Lsn, Oid, PageId, SlotId, TxnId, TypeId, VolumeId};
