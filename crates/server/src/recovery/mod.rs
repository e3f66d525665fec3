//! Recovery methods: how the server turns what clients ship into something it can recover
//! from, how it rolls a transaction back, and how it restarts after a crash. Each method is a
//! sibling behind [`RecoveryMethod`]; the server picks one by name.
//!
//! - `esm`: ARIES-style logging as in the EXODUS Storage Manager (QuickStore section 3.1):
//!   physical update records with before and after bytes, STEAL/NO-FORCE, fuzzy checkpoints,
//!   restart by analysis, redo (repeating history) and undo with compensation records.

mod esm;

use crate::interface::PageUpdate;
use crate::server::{Server, State};
use lodestore_core::{Error, Lsn, PageId, Result, TxnId};
use lodestore_wal::LogEnd;
use serde::Serialize;

/// The recovery methods there are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RecoveryMethodKind {
    #[default]
    Esm,
}

impl RecoveryMethodKind {
    pub const ALL: [RecoveryMethodKind; 1] = [RecoveryMethodKind::Esm];

    pub fn name(self) -> &'static str {
        match self {
            RecoveryMethodKind::Esm => "esm",
        }
    }

    pub(crate) fn build(self) -> Box<dyn RecoveryMethod> {
        match self {
            RecoveryMethodKind::Esm => Box::new(esm::Esm),
        }
    }
}

impl std::str::FromStr for RecoveryMethodKind {
    type Err = Error;

    fn from_str(name: &str) -> Result<Self> {
        RecoveryMethodKind::ALL
            .into_iter()
            .find(|m| m.name() == name)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "unknown recovery method {name:?}; known: {}",
                    RecoveryMethodKind::ALL.map(|m| m.name()).join(", ")
                ))
            })
    }
}

/// What a restart found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct RestartReport {
    pub checkpoint_lsn: u64,
    pub log_end: u64,
    /// Bytes of a torn last log write that were dropped.
    pub discarded_bytes: u64,
    pub records_scanned: u64,
    /// Changes redone (records whose effect the page did not show yet).
    pub redo_applied: u64,
    /// Full-page images installed in place of older or torn pages.
    pub images_installed: u64,
    /// Transactions rolled back because they had not committed.
    pub losers: u64,
    pub records_undone: u64,
    /// Pages past the last checkpoint's end of file that were torn and never used: formatted
    /// free again.
    pub pages_repaired: u64,
    pub elapsed_us: u64,
}

pub(crate) trait RecoveryMethod: Send + Sync {
    fn name(&self) -> &'static str;

    /// A client shipped `image` as the new content of `page` for `txn`: make the change
    /// recoverable and install it in the pool. Returns the page's new LSN.
    fn log_page_change(
        &self,
        server: &Server,
        state: &mut State,
        txn: TxnId,
        page: PageId,
        image: &[u8],
    ) -> Result<Lsn>;

    /// A client shipped log records of its own for `page` (all of `updates` are for it, checked
    /// against the page's bounds and the client's lock): make them recoverable and apply them
    /// to the server's copy. Returns the page's new LSN.
    fn log_client_updates(
        &self,
        server: &Server,
        state: &mut State,
        txn: TxnId,
        page: PageId,
        updates: &[PageUpdate],
    ) -> Result<Lsn>;

    /// A client shipped `image` of `page` after shipping log records for all its changes: make
    /// sure the records describe it. Returns the page's LSN.
    fn accept_logged_page(
        &self,
        server: &Server,
        state: &mut State,
        txn: TxnId,
        page: PageId,
        image: &[u8],
    ) -> Result<Lsn>;

    /// Undoes everything `txn` did.
    fn rollback(&self, server: &Server, state: &mut State, txn: TxnId) -> Result<()>;

    /// Brings the store back to a state with every committed transaction and nothing else,
    /// starting from the checkpoint at `checkpoint`; `end` is where the log ends.
    fn restart(
        &self,
        server: &Server,
        state: &mut State,
        checkpoint: Lsn,
        end: LogEnd,
    ) -> Result<RestartReport>;
}
