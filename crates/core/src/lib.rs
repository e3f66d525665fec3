//! Lodestore's shared vocabulary: identifiers, the one `Error` enum, checksums and the limits
//! every layer agrees on, with the two pieces both caches share (the page table with clock
//! replacement, and the memory a closed store leaves to the next). Everything above depends on
//! this crate; it depends on nothing of ours.

pub mod checksum;
pub mod error;
pub mod frames;
pub mod ids;
pub mod limits;
pub mod spare_memory;

pub use error::{Error, Result};
pub use ids::{Lsn, Oid, PageId, SlotId, TxnId, TypeId, VolumeId};
