//! What differential logging keeps beside the engine's state, and its files.

use crate::server::Server;
use lodestore_core::{Lsn, PageId, Result, TxnId};
use lodestore_difflog::anchor::{Anchor, Checkpointed};
use lodestore_difflog::backup::Backup;
use lodestore_difflog::kinds::PHYSICAL_CHANGES;
use lodestore_difflog::physical::PhysicalRecordBuilder;
use lodestore_difflog::xor::XorRecordBuilder;
use lodestore_storage::directory::DIRECTORY_PAGE;
use lodestore_storage::spacemap;
use lodestore_wal::Log;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Folder of the family's files inside a store.
pub const DIFFERENTIAL_DIR_NAME: &str = "differential";

/// The folder of log stream `s`.
pub fn stream_dir(dir: &Path, s: usize) -> PathBuf {
    dir.join(format!("stream-{s}"))
}

/// The log streams, shared with committers that wait for durability without the state.
pub struct Streams {
    pub logs: Vec<Log>,
}

impl Streams {
    /// The idlest stream for a new transaction (section 4.1): the fewest bytes waiting to be
    /// made durable, then the fewest transactions writing to it, then the lowest number.
    pub fn idlest(&self, writers: &[usize]) -> usize {
        (0..self.logs.len())
            .min_by_key(|&s| {
                let log = &self.logs[s];
                (log.end_lsn().0 - log.durable_lsn().0, writers[s], s)
            })
            .expect("at least one stream")
    }

    pub fn flush_all(&self) -> Result<()> {
        for log in &self.logs {
            log.flush_all()?;
        }
        Ok(())
    }
}

/// A transaction that changed something: its stream, the first and last LSN it appended
/// there (zero before its first append), and the changes it has not appended yet.
pub struct DlTxn {
    pub stream: usize,
    pub first: Lsn,
    pub last: Lsn,
    pub pending: Option<PendingRecord>,
}

/// Most bytes of changes a transaction keeps before appending them (section 3.2: a record
/// reaches the log buffer when the transaction's own buffer overflows or it commits).
pub const PENDING_BYTES_MAX: usize = 64 << 10;

/// A transaction's changes not yet appended: one record, appended whole (with its commit,
/// when it is the last).
pub enum PendingRecord {
    Xor(XorRecordBuilder),
    Physical(PhysicalRecordBuilder),
}

impl PendingRecord {
    pub fn body_len(&self) -> usize {
        match self {
            PendingRecord::Xor(b) => b.body_len(),
            PendingRecord::Physical(b) => b.body_len(),
        }
    }

    /// Appends the record to `log` after `prev`, as the transaction's commit if `commits`;
    /// a physical record takes the next serial number now.
    pub fn append(
        self,
        log: &Log,
        txn: TxnId,
        prev: Lsn,
        commits: bool,
        next_serial: &mut u64,
    ) -> Result<Lsn> {
        match self {
            PendingRecord::Xor(b) => log.append(Some(txn), prev, &b.commits(commits)),
            PendingRecord::Physical(mut b) => {
                b.set_serial(*next_serial);
                *next_serial += 1;
                log.append(Some(txn), prev, &b.commits(commits))
            }
        }
    }

    /// Hands every range to `undo` (page, offset, XOR delta or before bytes), newest first.
    pub fn undo(&self, mut undo: impl FnMut(PageId, usize, &[u8]) -> Result<()>) -> Result<()> {
        let malformed = |reason: String| {
            lodestore_core::Error::InvalidArgument(format!("a pending record: {reason}"))
        };
        match self {
            PendingRecord::Xor(b) => {
                let ranges: Vec<_> = lodestore_difflog::xor::ranges(b.flags(), b.body())
                    .collect::<std::result::Result<_, _>>()
                    .map_err(malformed)?;
                for r in ranges.iter().rev() {
                    undo(r.page, r.offset as usize, r.delta)?;
                }
            }
            PendingRecord::Physical(b) => {
                let (_, ranges) =
                    lodestore_difflog::physical::parse(PHYSICAL_CHANGES, b.flags(), b.body())
                        .map_err(malformed)?;
                for r in ranges.iter().rev() {
                    undo(r.page, r.offset as usize, r.before)?;
                }
            }
        }
        Ok(())
    }
}

/// A checkpoint in progress (Algorithm 2): its number, the next page it visits, and its begin
/// marks' LSNs per stream.
#[derive(Clone, Debug)]
pub struct Running {
    pub checkpoint: u64,
    pub next: u32,
    pub begins: Vec<Lsn>,
    /// Per stream, the oldest LSN a restart from this checkpoint may read: its begin mark, or
    /// the first record of a transaction active there (a loser's changes before the mark are
    /// undone along its chain).
    pub keep_from: Vec<Lsn>,
}

pub struct DlState {
    pub streams: std::sync::Arc<Streams>,
    pub txns: BTreeMap<TxnId, DlTxn>,
    /// Transactions writing to each stream.
    pub writers: Vec<usize>,
    /// Each page's BackupID bit (Algorithm 1), by page number.
    pub backup_id: Vec<bool>,
    /// Pages changed since backup 0 or 1 last received them.
    pub changed: [BTreeSet<PageId>; 2],
    /// Pages each backup holds: a page at or past it is written whatever `changed` says.
    pub backup_pages: [u32; 2],
    pub backups: [Backup; 2],
    pub anchor: Anchor,
    /// The last complete checkpoint.
    pub done: Checkpointed,
    pub running: Option<Running>,
    /// Each stream's end when the last checkpoint began (a checkpoint is due after
    /// `checkpoint_log_bytes` more, all streams together).
    pub ends_at_checkpoint: Vec<Lsn>,
    /// The next page version: what a changed page carries where other methods put its LSN,
    /// so a client's cached copy is known stale (stream LSNs are not comparable).
    pub next_version: u64,
    /// The next serial number of the physical baseline's records.
    pub next_serial: u64,
    /// The pages rebuilt when the store opened, until the restart pass installs them.
    pub recovered: Option<super::restart::Recovered>,
}

impl DlState {
    /// The BackupID a change of `page` carries now.
    pub fn backup_id_of(&self, page: PageId) -> bool {
        self.backup_id
            .get(page.0 as usize)
            .copied()
            .unwrap_or(self.done.backup_id())
    }

    /// Appends `txn`'s pending changes, if any, to its stream.
    pub fn append_pending(&mut self, txn: TxnId) -> Result<()> {
        let Some(t) = self.txns.get_mut(&txn) else {
            return Ok(());
        };
        let Some(pending) = t.pending.take() else {
            return Ok(());
        };
        let log = &self.streams.logs[t.stream];
        let lsn = pending.append(log, txn, t.last, false, &mut self.next_serial)?;
        if t.first == Lsn::ZERO {
            t.first = lsn;
        }
        t.last = lsn;
        Ok(())
    }

    /// Appends every transaction's pending changes (a checkpoint begins: from now on, the
    /// backup may receive any page, so every change must be in a stream first).
    pub fn append_all_pending(&mut self) -> Result<()> {
        let pending: Vec<TxnId> = self
            .txns
            .iter()
            .filter(|(_, t)| t.pending.is_some())
            .map(|(id, _)| *id)
            .collect();
        for txn in pending {
            self.append_pending(txn)?;
        }
        Ok(())
    }

    /// A fresh page version.
    pub fn version(&mut self) -> Lsn {
        let v = self.next_version;
        self.next_version += 1;
        Lsn(v)
    }

    /// Notes that `page` changed: both backups lack the change.
    pub fn changed(&mut self, page: PageId) {
        self.changed[0].insert(page);
        self.changed[1].insert(page);
    }
}

/// Is `page` one that holds data (not a superblock or space map page)?
pub fn is_data_page(page: PageId, page_size: usize) -> bool {
    page.0 >= DIRECTORY_PAGE.0 && !spacemap::is_map_page(page, page_size)
}

/// The data pages of a store of `count` pages.
pub fn data_pages(count: u32, page_size: usize) -> impl Iterator<Item = PageId> {
    (0..count)
        .map(PageId)
        .filter(move |&p| is_data_page(p, page_size))
}

/// Refuses a store whose data pages do not all fit the server pool.
pub fn check_fits(server: &Server, pool_capacity: usize, count: u32) -> Result<()> {
    let page_size = server.volume.page_size();
    let pages = data_pages(count, page_size).count();
    if pages > pool_capacity {
        return Err(lodestore_core::Error::InvalidArgument(format!(
            "{}: the store's {pages} data pages ({} MiB) do not fit the server pool of \
             {pool_capacity} pages; a main-memory recovery method keeps every page resident, \
             so open it with a pool of at least {} MiB",
            server.dir.display(),
            (pages * page_size) >> 20,
            ((pages + 64) * page_size).div_ceil(1 << 20)
        )));
    }
    Ok(())
}
