//! Snapshot archives over the network (Moh chapter 4): archive nodes that keep page copies
//! ([`node`]), and the archive a store uses to reach several of them with a replication
//! factor ([`nodes`]).

pub mod node;
pub mod nodes;

pub use node::{serve_archive, RunningNode, ARCHIVE_NODE_METHOD};
pub use nodes::ArchiveNodes;
