//! The server layer: owns a volume, its buffer pool, the lock table and free-space management,
//! and serves pages to clients through the [`PageServer`] interface. Embedded stores call the
//! in-process [`Server`] directly; a network server will put the same interface on a socket.

pub mod buffer_pool;
pub mod check;
pub mod inspect;
pub mod interface;
pub mod lock_table;
pub mod server;
pub mod space;
pub mod stats;
mod txn_table;

pub use interface::{LockMode, PageServer};
pub use server::{pool_pages, Server, ServerOptions};
pub use stats::ServerStats;
