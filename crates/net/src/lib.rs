//! Lodestore's client-server protocol (QuickStore section 3.1's page server, over TCP): framed,
//! versioned, bounded binary messages; the server loop that serves a store's `Server` to many
//! clients; and `RemotePageServer`, the client's end, which the client cache uses exactly as it
//! uses the in-process server.

pub mod archive;
pub mod auth;
pub mod budget;
mod deadline;
pub mod frame;
pub mod handshake;
pub mod limits;
pub mod message;
mod registry;
pub mod remote;
pub mod serve;
pub mod tls;

pub use archive::{serve_archive, ArchiveNodes};
pub use limits::{ServeLimits, MAX_CONNECTIONS};
pub use remote::RemotePageServer;
pub use serve::{serve, serve_with, serve_with_limits};
pub use tls::{TlsClient, TlsServer};
