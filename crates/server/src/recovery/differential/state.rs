//! What differential logging keeps beside the engine's state, and its files.

use crate::server::Server;
use lodestore_core::{Lsn, PageId, Result, TxnId};
use lodestore_difflog::anchor::{Anchor, Checkpointed};
use lodestore_difflog::backup::Backup;
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

/// A transaction that logged something: its stream and the first and last LSN there.
#[derive(Clone, Copy, Debug)]
pub struct DlTxn {
    pub stream: usize,
    pub first: Lsn,
    pub last: Lsn,
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
}

impl DlState {
    /// The BackupID a change of `page` carries now.
    pub fn backup_id_of(&self, page: PageId) -> bool {
        self.backup_id
            .get(page.0 as usize)
            .copied()
            .unwrap_or(self.done.backup_id())
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
