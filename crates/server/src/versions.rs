//! The versions hook: a component that sits beside any recovery method and keeps old versions
//! of pages, so that the store can be read as of a snapshot (Thor's snapshots, in the
//! `lodestore-snapshots` crate, are one). The engine does not know how or where versions are
//! kept; it gives the component what only the engine can:
//!
//! - the committed image of a page just before a transaction changes it for the first time,
//!   when the component wants it (the transaction holds the page exclusively, so nobody
//!   else's uncommitted bytes are in it, whatever the recovery method left on disk), and the
//!   committed images of pages active transactions changed without it, when a snapshot is
//!   taken (the recovery method undoes them in memory);
//! - a point in the commit path, before the commit record is appended, where the component
//!   makes durable what the commit would otherwise destroy, with the server's state released;
//! - the cut of a snapshot: a log position taken under the server's state, so every
//!   transaction committed before it, and none after, is in the snapshot;
//! - pages as of a snapshot: the component's copy if it keeps one, else the committed image an
//!   active transaction's first change kept, else the current page (unchanged since).

use lodestore_core::{Lsn, PageId, Result, TxnId};
use std::sync::Arc;

/// A snapshot: the store as it was at `lsn`, holding exactly the transactions whose commit
/// record lies before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// Numbered from 1 in the order taken; never reused.
    pub id: u64,
    /// Microseconds since the Unix epoch, strictly increasing from one snapshot to the next.
    pub time_us: u64,
    /// The cut in the log.
    pub lsn: Lsn,
}

/// A component that keeps old versions of pages.
pub trait PageVersions: Send + Sync {
    /// Would a transaction's commit need the committed image of `page` (a snapshot was taken
    /// since the page's last copy)? Asked under the server's state before a transaction first
    /// changes the page; when not, the image is not kept, and a snapshot taken while the
    /// transaction runs gets it from the recovery method instead (see `Server::take_snapshot`).
    fn wants_pre_image(&self, page: PageId) -> bool;

    /// Does the component keep `txn`'s committed image of `page`?
    fn has_pre_image(&self, txn: TxnId, page: PageId) -> bool;

    /// The committed image of `page`, which `txn` is about to change for the first time (or
    /// changed without the image being kept). Called under the server's state.
    fn first_change(&self, txn: TxnId, page: PageId, committed: &[u8]);

    /// Under the server's state: may `txn`'s commit record be appended now? `false`: run
    /// [`Self::prepare_commit`] first.
    fn commit_ready(&self, txn: TxnId) -> bool;

    /// Without the server's state: makes durable whatever `txn`'s commit needs kept first.
    fn prepare_commit(&self, txn: TxnId) -> Result<()>;

    /// `txn` committed or rolled back, or ended its reading of a snapshot. Called under the
    /// server's state.
    fn ended(&self, txn: TxnId);

    /// Under the server's state: a new snapshot at cut `lsn`, known in memory only.
    fn take_snapshot(&self, lsn: Lsn) -> Result<Snapshot>;

    /// The log is durable up to the snapshot's cut: makes the snapshot durable.
    fn persist_snapshot(&self, snapshot: &Snapshot) -> Result<()>;

    /// `txn` begins reading as of the snapshot numbered `id`, which stays readable until
    /// [`Self::ended`] (it cannot be deleted meanwhile); an error names an unknown id.
    fn begin_read(&self, txn: TxnId, id: u64) -> Result<Snapshot>;

    /// The durable snapshots, oldest first.
    fn list(&self) -> Vec<Snapshot>;

    /// Deletes the snapshots `which` picks (refused while one is read); returns them.
    fn delete(&self, which: &dyn Fn(&Snapshot) -> bool) -> Result<Vec<Snapshot>>;

    /// News of the snapshots taken after `prev_us`, up to a current time no later snapshot
    /// will be at or before (Moh section 2.3).
    fn news_since(&self, prev_us: u64) -> lodestore_protocol::SnapshotNews;

    /// Copies the oldest kept copy of `page` taken at or after `snapshot` into `buf`; `false`
    /// when there is none (the page has not changed since, as far as the component knows).
    fn copy_as_of(&self, page: PageId, snapshot: &Snapshot, buf: &mut [u8]) -> Result<bool>;

    /// Under the server's state: would [`Self::copy_as_of`] find a copy now?
    fn has_copy_as_of(&self, page: PageId, snapshot: &Snapshot) -> bool;

    /// Under the server's state: copies into `buf` the committed image of `page` kept by an
    /// active transaction's first change; `false` when no active transaction changed it.
    fn pre_image(&self, page: PageId, buf: &mut [u8]) -> bool;

    /// One turn of the component's background work (archiving); whether more is waiting.
    fn background_turn(&self) -> Result<bool> {
        Ok(false)
    }

    /// The server is closing: finish what can be finished (the archive takes what waits).
    fn close(&self) -> Result<()> {
        Ok(())
    }
}

/// The versions component a server was given, if any.
pub type Versions = Option<Arc<dyn PageVersions>>;
