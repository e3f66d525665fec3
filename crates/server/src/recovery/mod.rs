//! Recovery methods: how the server turns what clients ship into something it can recover
//! from, how it rolls a transaction back, and how it restarts after a crash. Each method is a
//! sibling behind the crate-internal trait `RecoveryMethod`; the server picks one by name.
//!
//! - `esm`: ARIES-style logging as in the EXODUS Storage Manager (QuickStore section 3.1):
//!   physical update records with before and after bytes, STEAL/NO-FORCE, fuzzy checkpoints,
//!   restart by analysis, redo (repeating history) and undo with compensation records.
//! - `redo`: the same log and restart; clients ship log records only and the server applies
//!   them to its own copy of each page (redo-at-server, QuickStore section 3.5).
//! - `wpl`: whole-page logging (QuickStore section 3.4): the log holds after-images of whole
//!   pages, a page's home location only ever holds committed data, and restart is one backward
//!   pass that rebuilds the WPL table.
//! - `dbcache`: the database-cache method of Hasse & Weikum's L0 log (section 2), built on
//!   whole-page logging: page changes wait in the pool and reach the log as atomic writes of
//!   after-images, the last record flagged end-of-subtransaction (EOS), at a transaction's end,
//!   at a subtransaction's forced end (S2), when a changed page must leave the pool, or at a
//!   checkpoint; under S2/PS a subtransaction's end writes nothing and its parent's end writes
//!   the persistence sphere, flagged EOT.
//! - `dl1p`, `dl2p`, `pl2p`: differential logging (Lee, Kim & Cha), a main-memory method:
//!   every page resident, XOR records (or the baseline's physical ones) in several log
//!   streams, fuzzy ping-pong checkpoints to two backup images, and a restart that replays
//!   the streams from the last complete checkpoint's backup.

pub mod differential;
mod esm;
pub(crate) mod restart;
mod wpl;

use crate::interface::PageUpdate;
use crate::server::{Server, State};
use lodestore_core::{Error, Lsn, PageId, Result, TxnId};
use lodestore_storage::page::{self, PageKind};
use lodestore_storage::superblock::{RECOVERY_METHOD_CODE_DEFAULT, RECOVERY_METHOD_CODE_MAX};

/// Superblock codes of the methods; numbers never change once written.
const RECOVERY_METHOD_ESM: u8 = 0;
const RECOVERY_METHOD_WPL: u8 = 1;
const RECOVERY_METHOD_REDO: u8 = 2;
const RECOVERY_METHOD_DL1P: u8 = 3;
const RECOVERY_METHOD_DL2P: u8 = 4;
const RECOVERY_METHOD_PL2P: u8 = 5;
const RECOVERY_METHOD_DBCACHE: u8 = 6;
const _: () = assert!(
    RECOVERY_METHOD_DBCACHE == RECOVERY_METHOD_CODE_MAX
        && RECOVERY_METHOD_ESM == RECOVERY_METHOD_CODE_DEFAULT
);
use serde::Serialize;

/// The recovery methods there are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RecoveryMethodKind {
    #[default]
    Esm,
    Redo,
    Wpl,
    /// Whole-page logging with deferred, atomic after-image writes (the database-cache method).
    Dbcache,
    /// Differential logging, one-pass restart.
    Dl1p,
    /// Differential logging, two-pass restart.
    Dl2p,
    /// The differential logging paper's baseline: physical logging, two-pass restart.
    Pl2p,
}

impl RecoveryMethodKind {
    pub const ALL: [RecoveryMethodKind; 7] = [
        RecoveryMethodKind::Esm,
        RecoveryMethodKind::Redo,
        RecoveryMethodKind::Wpl,
        RecoveryMethodKind::Dbcache,
        RecoveryMethodKind::Dl1p,
        RecoveryMethodKind::Dl2p,
        RecoveryMethodKind::Pl2p,
    ];

    pub fn name(self) -> &'static str {
        match self {
            RecoveryMethodKind::Esm => "esm",
            RecoveryMethodKind::Redo => "redo",
            RecoveryMethodKind::Wpl => "wpl",
            RecoveryMethodKind::Dbcache => "dbcache",
            RecoveryMethodKind::Dl1p => "dl1p",
            RecoveryMethodKind::Dl2p => "dl2p",
            RecoveryMethodKind::Pl2p => "pl2p",
        }
    }

    /// Does the method keep every page in memory, with backups instead of the data file?
    pub fn is_main_memory(self) -> bool {
        matches!(
            self,
            RecoveryMethodKind::Dl1p | RecoveryMethodKind::Dl2p | RecoveryMethodKind::Pl2p
        )
    }

    /// Do clients ship the pages whose changes they logged? Not to a redo-at-server server,
    /// nor to a main-memory one: the records are all it takes (each applies them to its own
    /// copy).
    pub fn wants_logged_pages(self) -> bool {
        self != RecoveryMethodKind::Redo && !self.is_main_memory()
    }

    /// The superblock's code for this method.
    pub fn code(self) -> u8 {
        match self {
            RecoveryMethodKind::Esm => RECOVERY_METHOD_ESM,
            RecoveryMethodKind::Redo => RECOVERY_METHOD_REDO,
            RecoveryMethodKind::Wpl => RECOVERY_METHOD_WPL,
            RecoveryMethodKind::Dbcache => RECOVERY_METHOD_DBCACHE,
            RecoveryMethodKind::Dl1p => RECOVERY_METHOD_DL1P,
            RecoveryMethodKind::Dl2p => RECOVERY_METHOD_DL2P,
            RecoveryMethodKind::Pl2p => RECOVERY_METHOD_PL2P,
        }
    }

    /// The method with superblock code `code` (the superblock refuses unknown codes).
    pub fn from_code(code: u8) -> RecoveryMethodKind {
        match code {
            RECOVERY_METHOD_WPL => RecoveryMethodKind::Wpl,
            RECOVERY_METHOD_REDO => RecoveryMethodKind::Redo,
            RECOVERY_METHOD_DL1P => RecoveryMethodKind::Dl1p,
            RECOVERY_METHOD_DL2P => RecoveryMethodKind::Dl2p,
            RECOVERY_METHOD_PL2P => RecoveryMethodKind::Pl2p,
            RECOVERY_METHOD_DBCACHE => RecoveryMethodKind::Dbcache,
            _ => RecoveryMethodKind::Esm,
        }
    }

    /// Do the two methods write and read the same log?
    pub fn same_log(self, other: RecoveryMethodKind) -> bool {
        self.log_family() == other.log_family()
    }

    /// Methods of one family read each other's logs.
    fn log_family(self) -> u8 {
        match self {
            RecoveryMethodKind::Esm | RecoveryMethodKind::Redo => 0,
            RecoveryMethodKind::Wpl => 1,
            RecoveryMethodKind::Dl1p | RecoveryMethodKind::Dl2p => 2,
            RecoveryMethodKind::Pl2p => 3,
            RecoveryMethodKind::Dbcache => 4,
        }
    }

    pub(crate) fn build(self) -> Box<dyn RecoveryMethod> {
        match self {
            RecoveryMethodKind::Esm | RecoveryMethodKind::Redo => Box::new(esm::Esm { kind: self }),
            RecoveryMethodKind::Wpl => Box::new(wpl::Wpl { deferred: false }),
            RecoveryMethodKind::Dbcache => Box::new(wpl::Wpl { deferred: true }),
            RecoveryMethodKind::Dl1p | RecoveryMethodKind::Dl2p | RecoveryMethodKind::Pl2p => {
                Box::new(differential::Differential::new(self))
            }
        }
    }
}

impl std::fmt::Display for RecoveryMethodKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
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

/// How much of a main-memory store's restart runs at once: the levels of parallelism of
/// Lee, Kim & Cha's Table 1. Every level gives the same pages; each adds one overlap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub enum RestartLevel {
    /// The backup is loaded, then every stream is read whole on a thread of its own, then the
    /// streams are replayed (DL1P backwards, as Algorithm 3 is written).
    One,
    /// As level 1, but each stream is replayed as it is read (DL1P forwards, record by record,
    /// with the next segments read ahead).
    Two,
    /// The backup and the streams are read at once; the streams replay once the backup is in.
    Three,
    /// The backup is XORed into a zeroed image while the streams are read and replayed into
    /// it at once.
    #[default]
    Four,
}

impl RestartLevel {
    pub fn from_number(level: u8) -> Option<RestartLevel> {
        Some(match level {
            1 => RestartLevel::One,
            2 => RestartLevel::Two,
            3 => RestartLevel::Three,
            4 => RestartLevel::Four,
            _ => return None,
        })
    }

    pub fn number(self) -> u8 {
        match self {
            RestartLevel::One => 1,
            RestartLevel::Two => 2,
            RestartLevel::Three => 3,
            RestartLevel::Four => 4,
        }
    }
}

/// What a restart found and did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct RestartReport {
    pub checkpoint_lsn: u64,
    pub log_end: u64,
    /// Bytes of a torn last log write that were dropped.
    pub discarded_bytes: u64,
    /// Main-memory methods: microseconds loading the backup, reading the log streams, and
    /// replaying them.
    #[serde(default)]
    pub backup_load_us: u64,
    #[serde(default)]
    pub log_read_us: u64,
    #[serde(default)]
    pub replay_us: u64,
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
    /// Pages put home from the double-write file (their home copy was torn or older).
    #[serde(default)]
    pub pages_restored: u64,
    /// The restart left the pages it redid to the next checkpoint (see
    /// `RecoveryMethod::restart_may_defer_checkpoint`) instead of taking one itself.
    #[serde(default)]
    pub checkpoint_deferred: bool,
    pub elapsed_us: u64,
}

impl RestartReport {
    /// Did the restart change the store: was it left by a crash rather than closed cleanly?
    pub fn needed_recovery(&self) -> bool {
        self.discarded_bytes
            + self.redo_applied
            + self.images_installed
            + self.losers
            + self.records_undone
            + self.pages_repaired
            + self.pages_restored
            > 0
    }
}

pub(crate) trait RecoveryMethod: Send + Sync {
    fn kind(&self) -> RecoveryMethodKind;

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
        updates: &[PageUpdate<'_>],
    ) -> Result<Lsn>;

    /// A client shipped `image` of `page` after shipping log records for all its changes: make
    /// sure the records describe it. Returns the page's LSN. Every method applies the records
    /// to its copy as they come, so every method checks the same way.
    fn accept_logged_page(
        &self,
        server: &Server,
        state: &mut State,
        txn: TxnId,
        page: PageId,
        image: &[u8],
    ) -> Result<Lsn> {
        check_logged_page(server, state, txn, page, image)
    }

    /// Undoes everything `txn` did.
    fn rollback(&self, server: &Server, state: &mut State, txn: TxnId) -> Result<()>;

    /// Opens (creating them if need be) the files the method keeps beside the engine's, once
    /// it has become the store's method and before its restart runs.
    fn attach(&self, _server: &Server, _state: &mut State) -> Result<()> {
        Ok(())
    }

    /// The store leaves this method for another, everything committed now at home: the
    /// method removes the files it kept beside the engine's.
    fn detach(&self, _server: &Server) -> Result<()> {
        Ok(())
    }

    /// A checkpoint was asked for (`Server::checkpoint`): a method with checkpoints of its
    /// own takes a whole one now, before the engine's.
    fn checkpoint_asked(&self, _server: &Server, _state: &mut State) -> Result<()> {
        Ok(())
    }

    /// Does every page stay in the pool while the store is open (a main-memory method)? The
    /// pool then never evicts: a store that outgrows it is an error, not paging.
    fn keeps_pages_resident(&self) -> bool {
        false
    }

    /// Does a checkpoint write the pool's dirty pages home? A main-memory method keeps its
    /// own images and writes home only when everything must be there (`install_all`).
    fn checkpoint_writes_home(&self, _install_all: bool) -> bool {
        true
    }

    /// Called first in every checkpoint, under the server's state.
    fn before_checkpoint(
        &self,
        _server: &Server,
        _state: &mut State,
        _install_all: bool,
    ) -> Result<()> {
        Ok(())
    }

    /// Counters of the log streams the method keeps beside the server's log.
    fn stream_stats(&self) -> Vec<lodestore_wal::LogStats> {
        Vec::new()
    }

    /// May new pages of a large shipment go straight to the data file, logged only by number
    /// (`RecordBody::PagesHome`, see `ServerOptions::pages_home_min`)? The method's redo and
    /// undo must then read that record: undo formats the pages free again.
    fn writes_new_pages_home(&self) -> bool {
        false
    }

    /// Do page changes wait in the pool for an atomic write of after-images (the
    /// database-cache method), rather than reach the log as they are shipped?
    fn defers_page_writes(&self) -> bool {
        false
    }

    /// A method that defers page writes writes `sphere` (its pages as the pool holds them,
    /// `evicted` as given: a page already out of the pool) as one atomic write ending with an
    /// EOS record that names the completed subtransactions of the sphere, flagged EOT with
    /// `ends` if given; returns the EOS record's LSN (not forced).
    fn write_sphere(
        &self,
        _server: &Server,
        _state: &mut State,
        sphere: lodestore_multilevel::sphere::Sphere,
        _ends: Option<TxnId>,
        _evicted: Option<(PageId, &[u8])>,
    ) -> Result<Lsn> {
        assert!(
            sphere.is_empty(),
            "only a method that defers page writes writes spheres"
        );
        Ok(Lsn::ZERO)
    }

    /// Has `txn` logged anything its commit must make durable?
    fn has_changes(&self, state: &State, txn: TxnId) -> bool {
        state
            .txns
            .get(&txn)
            .is_some_and(|own| own.last_lsn != Lsn::ZERO)
    }

    /// Appends `txn`'s commit record where the method logs it; `None`: in the server's log,
    /// after the transaction's last record there.
    fn append_commit(
        &self,
        _server: &Server,
        _state: &mut State,
        _txn: TxnId,
    ) -> Result<Option<crate::interface::AppendedCommit>> {
        Ok(None)
    }

    /// Returns once a commit the method appended (in a stream other than the server's log) is
    /// durable; `delay` as for [`lodestore_wal::Log::flush_after`].
    fn flush_commit(
        &self,
        commit: crate::interface::AppendedCommit,
        _delay: std::time::Duration,
    ) -> Result<()> {
        Err(Error::InvalidArgument(format!(
            "commit at LSN {} names log stream {}, and this method keeps no streams",
            commit.lsn, commit.stream
        )))
    }

    /// The state this method keeps beside the engine's (`State::method_state`), fresh.
    fn fresh_state(&self) -> Box<dyn std::any::Any + Send> {
        Box::new(())
    }

    /// Where `page` comes from when the pool misses it: the LSN of a copy in the log newer
    /// than the one at home, if the method keeps one.
    fn newer_copy_in_log(&self, _state: &State, _page: PageId) -> Option<Lsn> {
        None
    }

    /// Must a home write that a crash could tear go through the double-write file? Yes,
    /// unless the log itself keeps a whole copy of every page until its home write is durable
    /// (whole-page logging).
    fn home_writes_need_double_write(&self) -> bool {
        true
    }

    /// How far the log must be durable before `page`, as of `lsn`, is written home.
    fn durable_before_home(&self, _state: &State, _page: PageId, lsn: Lsn) -> Lsn {
        lsn
    }

    /// May dirty `page`, as of `lsn`, leave the pool without going home, the log being durable
    /// before `durable`? Only when a copy the method keeps serves every later read and the
    /// later write home, and writing it now would wait for the log.
    fn may_evict_unwritten(&self, _state: &State, _page: PageId, _lsn: Lsn, _durable: Lsn) -> bool {
        false
    }

    /// `page`, as of `lsn`, was written home.
    fn written_home(&self, _state: &mut State, _page: PageId, _lsn: Lsn) {}

    /// Committed copies in the log that may be written home now, oldest first: the work of
    /// the method's background installer.
    fn installable(&self, _state: &State) -> Vec<(PageId, Lsn)> {
        Vec::new()
    }

    /// The workers the method runs in the background (see [`crate::workers`]).
    fn background_workers(&self) -> Vec<crate::workers::BackgroundWorker> {
        Vec::new()
    }

    /// Pages the method holds in the log but not yet at home.
    fn pages_awaiting_install(&self, _state: &State) -> usize {
        0
    }

    /// `txn`'s commit record was appended at `commit_lsn` (not necessarily durable yet).
    fn committed(&self, _state: &mut State, _txn: TxnId, _commit_lsn: Lsn) {}

    /// A checkpoint that began at `begin` wrote the pool's dirty pages; `previous` is where
    /// the checkpoint before it began. Writes what else the method keeps at checkpoints and
    /// returns the oldest LSN of the log it still needs, if any. `install_all` asks for
    /// everything committed to reach its home location (closing, or changing method).
    fn checkpoint(
        &self,
        _server: &Server,
        _state: &mut State,
        _previous: Lsn,
        _install_all: bool,
    ) -> Result<Option<Lsn>> {
        Ok(None)
    }

    /// The method's part of a restart (see [`restart::run`], which does the rest).
    fn restart_pass(&self) -> Box<dyn restart::RestartPass>;

    /// May a restart leave the pages it redid to the next checkpoint instead of taking one
    /// before the store opens? Only for a method whose restart point stays valid until then:
    /// replaying the same log again after a second crash rebuilds the same pages, and nothing
    /// but the log holds what the restart found (no table of its own to write out).
    fn restart_may_defer_checkpoint(&self) -> bool {
        false
    }

    /// The committed images of `pages`, which the active transaction `txn` changed: each page
    /// as it was before `txn` first changed it (a snapshot taken while `txn` runs needs them).
    fn committed_images(
        &self,
        server: &Server,
        state: &mut State,
        txn: TxnId,
        pages: &[PageId],
    ) -> Result<Vec<Vec<u8>>>;
}

/// The error of a main-memory method whose store no longer fits the server pool.
pub(crate) fn resident_pool_full(page_size: usize, capacity: usize) -> Error {
    Error::InvalidArgument(format!(
        "the store no longer fits the server pool of {capacity} pages ({} MiB): a main-memory \
         recovery method keeps every page resident; reopen with a larger pool",
        (capacity * page_size) >> 20
    ))
}

/// Applies client log records of `page` to `current` in order, checking each record's before
/// bytes against the page with the records before it applied. On a mismatch `current` is left
/// as it was.
pub(crate) fn apply_client_updates(
    txn: TxnId,
    page: PageId,
    current: &mut [u8],
    updates: &[PageUpdate<'_>],
) -> Result<()> {
    for (applied, update) in updates.iter().enumerate() {
        debug_assert_eq!(update.page, page);
        debug_assert_eq!(update.before.len(), update.after.len());
        let range = update.offset as usize..update.offset as usize + update.before.len();
        if current[range.clone()] != update.before[..] {
            revert_client_updates(current, &updates[..applied]);
            // The client's pre-image is not what the server holds: its copy was stale or its
            // detector lost a write. Accepting it would make recovery restore wrong bytes.
            return Err(Error::InvalidArgument(format!(
                "transaction {txn} logged bytes {}..{} of page {page} with before bytes that \
                 differ from the page's current contents",
                range.start, range.end
            )));
        }
        current[range].copy_from_slice(update.after);
    }
    Ok(())
}

/// Undoes [`apply_client_updates`] of `updates` on `current`: their before bytes, last first.
pub(crate) fn revert_client_updates(current: &mut [u8], updates: &[PageUpdate<'_>]) {
    for update in updates.iter().rev() {
        let start = update.offset as usize;
        current[start..start + update.before.len()].copy_from_slice(update.before);
    }
}

/// A client shipped `image` of `page` after shipping log records for all its changes (an
/// empty image under redo-at-server): the server's copy, which the records made, must be what
/// the client holds. Returns the page's LSN.
fn check_logged_page(
    server: &Server,
    state: &mut State,
    txn: TxnId,
    page: PageId,
    image: &[u8],
) -> Result<Lsn> {
    server.cache_page_in_change(state, page)?;
    let current = state.pool.get(page).expect("page just cached");
    if image.is_empty() {
        return Ok(page::lsn(current));
    }
    // A difference is a write the client's detector missed, which a crash would lose.
    if let Some(offset) = first_client_difference(current, image) {
        return Err(Error::InvalidArgument(format!(
            "transaction {txn} shipped page {page} with a change at byte {offset} that no log \
             record describes"
        )));
    }
    Ok(page::lsn(current))
}

/// The first byte where two images of a page differ outside the server's own header fields
/// (checksum and LSN).
fn first_client_difference(server_copy: &[u8], client_copy: &[u8]) -> Option<usize> {
    debug_assert_eq!(server_copy.len(), client_copy.len());
    // Equal pages are the rule: compare at memcmp speed, look for the byte only if not.
    [4..8, 16..server_copy.len()].into_iter().find_map(|range| {
        if server_copy[range.clone()] == client_copy[range.clone()] {
            return None;
        }
        server_copy[range.clone()]
            .iter()
            .zip(&client_copy[range.clone()])
            .position(|(a, b)| a != b)
            .map(|at| range.start + at)
    })
}

/// Checks that the superblock's checkpoint LSN holds a checkpoint begin record, the first
/// record a restart scans.
pub(crate) fn check_checkpoint_record(
    server: &Server,
    checkpoint: Lsn,
    first: Option<&lodestore_wal::Record>,
) -> Result<()> {
    match first {
        Some(record)
            if record.lsn == checkpoint
                && matches!(
                    record.body,
                    lodestore_wal::RecordBody::CheckpointBegin { .. }
                ) =>
        {
            Ok(())
        }
        _ => Err(Error::CorruptLog {
            path: server.log_dir(),
            offset: checkpoint.0,
            reason: format!(
                "the superblock's checkpoint LSN {checkpoint} does not hold a checkpoint"
            ),
        }),
    }
}

/// Pages past the page count of the last checkpoint that are torn were being added when the
/// crash came and hold nothing recovery needs from the data file (the log holds every page it
/// describes): they are formatted free again so the file is whole. Pages of zeros, which the
/// file grew by and nothing wrote, read as free (`Volume::read_page`) and are left to the next
/// checkpoint, so a crash in a bulk load does not make the restart write every page the file
/// had grown by.
pub(crate) fn repair_unrecorded_tail(server: &Server, state: &mut State) -> Result<u64> {
    let recorded = server.volume.superblock().page_count;
    let page_size = server.volume.page_size();
    let mut repaired = 0;
    let mut buf = vec![0u8; page_size];
    for p in recorded..server.volume.page_count() {
        let id = PageId(p);
        if state.pool.contains(id) || server.method.newer_copy_in_log(state, id).is_some() {
            continue;
        }
        // A page of zeros reads as free, and the volume writes it at the next checkpoint.
        if server.volume.read_page_sealed(id, &mut buf).is_ok() {
            continue;
        }
        if lodestore_storage::spacemap::is_map_page(id, page_size) {
            lodestore_storage::spacemap::init(&mut buf, id, server.volume.volume_id());
        } else {
            page::format(&mut buf, PageKind::Free, id, server.volume.volume_id());
        }
        server.volume.write_page(id, &mut buf)?;
        repaired += 1;
    }
    Ok(repaired)
}
