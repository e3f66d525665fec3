//! The write-ahead log: an append-only sequence of checksummed records in segment files. A
//! record's LSN is its logical byte position in the log, so an LSN alone says where to read it.
//!
//! - [`record`]: the record format and the engine's record kinds.
//! - [`kinds`]: the registry of kind numbers, a range per family.
//! - [`segment`]: segment files (pre-written, recycled) and the mapping from LSN to file.
//! - [`anchor`]: the highest segment opened, so a missing last segment is found.
//! - [`log`]: the log manager: append, group commit, random reads, truncation.
//! - [`reader`]: scanning from an LSN to the end of the log, telling a torn tail (truncated and
//!   reported) from damage before the end (an error).

pub mod anchor;
pub mod kinds;
pub mod log;
pub mod reader;
pub mod record;
pub mod segment;

pub use log::{Log, LogOptions, LogStats};
pub use reader::LogEnd;
pub use record::{
    ActiveTxn, Body, FamilyRef, LoggedPage, Record, RecordBody, UpdateRef, RECORD_HEADER_BYTES,
};
