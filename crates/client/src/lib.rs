//! The client layer: a client cache of page frames (one mmap'd arena) and the object operations
//! a transaction runs against it. The client talks to its server only through `PageServer`.

pub mod cache;
pub mod session;

pub use cache::ClientCache;
pub use session::{ClientSession, ObjectInfo};
