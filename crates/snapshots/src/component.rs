//! The snapshot component: the versions hook of the engine, filled in Thor's way at the page
//! level (Moh chapters 2 and 3).
//!
//! - **Coordinator.** Taking a snapshot assigns it a time, strictly later than every time
//!   recorded before, and the engine's cut in the log; it is acknowledged once the history
//!   file holds it (after the log is durable up to the cut).
//! - **Pre-images** (Thor's Anti-MOB, per transaction). The first time a transaction changes a
//!   page that a snapshot taken since the page's last copy needs, the page's committed image
//!   is kept in memory until the transaction ends. When a snapshot is taken, the engine hands
//!   over the committed images of the pages running transactions changed without one.
//! - **Copies, made eagerly at commit.** Before a transaction's commit record is appended, every
//!   page it changed whose newest copy is older than the newest snapshot gets one: its
//!   pre-image, labelled with that snapshot, made durable in the snapshot log. The snapshot
//!   page map (newest copy time per page) keeps it to one copy per page per snapshot interval
//!   in which the page changed, and none when nothing changed it.
//! - **Archiving.** A background turn moves staged copies of durable snapshots from the
//!   snapshot log to the archive, and empties the log when nothing waits.
//! - **Reading as of a snapshot.** The oldest copy at or after the snapshot (staged or
//!   archived) holds the page as it was; with none, the page has not changed since, and the
//!   engine serves the pre-image of the active transaction changing it, or the current page.
//! - **Retention.** Deleting a snapshot records it in the history, then drops every copy no
//!   remaining snapshot reads: a copy made at time t serves each snapshot after the page's
//!   previous copy and at or before t, so it stays while one of those remains. A snapshot
//!   being read cannot be deleted.

use crate::archive::local::{LocalArchive, LOCAL_LOCATION};
use crate::archive::{Archive, PageCopy};
use crate::history::HistoryFile;
use crate::snapshot_log::SnapshotLog;
use lodestore_core::{Error, Lsn, PageId, Result, TxnId};
use lodestore_protocol::SnapshotNews;
use lodestore_server::versions::{PageVersions, Snapshot};
use lodestore_storage::FileSystem;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

/// Folder of the snapshot files inside a store.
pub const SNAPSHOTS_DIR_NAME: &str = "snapshots";
const HISTORY_FILE: &str = "history";
const SNAPSHOT_LOG_FILE: &str = "log";
const LOCAL_ARCHIVE_FILE: &str = "archive";
/// Where the store's snapshot pages are archived (see `crate::location`).
const ARCHIVE_LOCATION_FILE: &str = "archive-location";
/// Copies one archiving turn moves at most.
const ARCHIVE_BATCH_COPIES: usize = 64;
/// Times a read as of a snapshot looks for a copy that moves from the snapshot log to the
/// archive while it reads (once each way is the most a move can take).
const COPY_LOOKUPS_MAX: usize = 4;

/// The snapshot component of one store.
pub struct Snapshots {
    /// Lock order: `archiving`, then `log`, then `inner`, then `history`.
    log: Mutex<SnapshotLog>,
    /// Held through a turn of archiving, from choosing the staged copies to marking them
    /// archived: two turns at once (the background thread's and `archive_all`'s) would put
    /// the same copies twice, and `archive_all` could return while the other turn's copies
    /// were still on their way to the archive.
    archiving: Mutex<()>,
    inner: Mutex<Inner>,
    history: Mutex<HistoryFile>,
    archive: Arc<dyn Archive>,
    page_size: usize,
    /// The page map knows every copy (the archive listed its own when opened): a page it
    /// has no copy of for a snapshot has none anywhere, and the archive is not asked (Thor's
    /// snapshot page map, section 3.3.1).
    map_complete: bool,
}

struct Inner {
    /// Every snapshot taken and not deleted, oldest first; `durable` says which the history
    /// file holds.
    snapshots: Vec<Taken>,
    id_max: u64,
    time_max: u64,
    /// Newest copy time of each page with a copy (the snapshot page map).
    page_map: HashMap<PageId, u64>,
    /// Committed images kept by active transactions' first changes.
    pre_images: HashMap<TxnId, HashMap<PageId, Box<[u8]>>>,
    /// Which active transaction changed a page (an exclusive lock admits one at a time).
    changed_by: HashMap<PageId, TxnId>,
    /// Transactions reading as of a snapshot, and which.
    readers: HashMap<TxnId, u64>,
}

#[derive(Clone, Copy, Debug)]
struct Taken {
    snapshot: Snapshot,
    durable: bool,
}

/// Figures of a snapshot component.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotStats {
    pub snapshots: usize,
    /// Copies in the snapshot log, waiting for the archive.
    pub staged_copies: usize,
    pub snapshot_log_bytes: u64,
    pub archive_bytes: u64,
    /// Pages whose committed image active transactions keep.
    pub pre_images: usize,
    /// Why the archive cannot serve, when it cannot: reads of the past then fail.
    pub archive_unavailable: Option<String>,
}

impl Snapshots {
    /// Opens the snapshot files of the store in `store_dir` (creating them if missing), with
    /// the local archive beside them unless `archive` names another.
    pub fn open(
        fs: Arc<dyn FileSystem>,
        store_dir: &Path,
        page_size: usize,
        archive: Option<Arc<dyn Archive>>,
    ) -> Result<Snapshots> {
        let dir = store_dir.join(SNAPSHOTS_DIR_NAME);
        fs.create_dir_all(&dir)?;
        let (history, recorded) = HistoryFile::open(fs.as_ref(), &dir.join(HISTORY_FILE))?;
        // Once snapshots were taken, a missing snapshot log or local archive is damage: made
        // afresh, it would answer reads of the past with the present. Without the snapshot
        // log the store does not open (copies of committed work may be lost with it); without
        // the archive it does, and reads of the past fail naming it.
        let damage = || {
            format!(
                "missing, though the store has taken {} snapshots whose pages it holds",
                recorded.id_max
            )
        };
        let log_path = dir.join(SNAPSHOT_LOG_FILE);
        if recorded.id_max > 0 && !fs.exists(&log_path) {
            return Err(Error::CorruptFile {
                reason: damage(),
                path: log_path,
            });
        }
        let archive_path = dir.join(LOCAL_ARCHIVE_FILE);
        let archive = match archive {
            None if recorded.id_max > 0 && !fs.exists(&archive_path) => {
                tracing::error!(path = %archive_path.display(), "the snapshot archive is missing; reads as of a snapshot will fail");
                Some(Arc::new(crate::archive::UnavailableArchive {
                    reason: damage(),
                    path: archive_path.clone(),
                    location: LOCAL_LOCATION.into(),
                }) as Arc<dyn Archive>)
            }
            other => other,
        };
        let (log, opened) = SnapshotLog::open(
            fs.as_ref(),
            &dir.join(SNAPSHOT_LOG_FILE),
            page_size,
            |time| recorded.ever_taken.contains(&time),
        )?;
        if opened.dropped > 0 {
            tracing::info!(
                copies = opened.dropped,
                "left out page copies of snapshots whose taking never completed"
            );
        }
        let archive: Arc<dyn Archive> = match archive {
            Some(archive) => archive,
            None => match LocalArchive::open(fs.clone(), &archive_path, page_size) {
                Ok(local) => Arc::new(local),
                // A damaged archive is left as it is for salvage; the store serves the present,
                // and reads of the past fail naming it.
                Err(
                    e @ (Error::CorruptFile { .. }
                    | Error::UnsupportedFormat { .. }
                    | Error::CorruptArchive { .. }),
                ) => {
                    tracing::error!(error = %e, "the snapshot archive is damaged; reads as of a snapshot will fail");
                    Arc::new(crate::archive::UnavailableArchive {
                        reason: format!("damaged: {e}"),
                        path: archive_path,
                        location: LOCAL_LOCATION.into(),
                    })
                }
                Err(e) => return Err(e),
            },
        };
        let archive = Self::archive_where_recorded(fs.as_ref(), &dir, archive, recorded.id_max)?;
        let listed = archive.newest_times();
        let map_complete = listed.is_some();
        let mut page_map: HashMap<PageId, u64> = listed.unwrap_or_default().into_iter().collect();
        for (page, time, _) in log.staged() {
            let newest = page_map.entry(page).or_insert(time);
            *newest = (*newest).max(time);
        }
        let inner = Inner {
            snapshots: recorded
                .snapshots
                .iter()
                .map(|&snapshot| Taken {
                    snapshot,
                    durable: true,
                })
                .collect(),
            id_max: recorded.id_max,
            time_max: recorded.time_max.max(opened.time_max),
            page_map,
            pre_images: HashMap::new(),
            changed_by: HashMap::new(),
            readers: HashMap::new(),
        };
        let snapshots = Snapshots {
            log: Mutex::new(log),
            archiving: Mutex::new(()),
            inner: Mutex::new(inner),
            history: Mutex::new(history),
            archive,
            page_size,
            map_complete,
        };
        // Copies that deletions before a crash left behind go now.
        snapshots.collect_garbage()?;
        Ok(snapshots)
    }

    /// Deletes the snapshots `which` picks; returns them. Refused, deleting nothing, when a
    /// transaction is reading one of them. Then drops the copies no remaining snapshot reads.
    pub fn delete(&self, which: &dyn Fn(&Snapshot) -> bool) -> Result<Vec<Snapshot>> {
        let doomed: Vec<Snapshot> = {
            let mut inner = self.inner();
            let doomed: Vec<Snapshot> = inner
                .snapshots
                .iter()
                .filter(|t| t.durable && which(&t.snapshot))
                .map(|t| t.snapshot)
                .collect();
            if let Some((txn, id)) = inner
                .readers
                .iter()
                .find(|(_, id)| doomed.iter().any(|s| s.id == **id))
            {
                return Err(Error::InvalidArgument(format!(
                    "snapshot {id} cannot be deleted: transaction {txn} is reading it"
                )));
            }
            // Gone from the list first, so nobody begins reading one being deleted.
            inner
                .snapshots
                .retain(|t| !doomed.iter().any(|s| s.id == t.snapshot.id));
            doomed
        };
        let recorded = {
            let mut history = self
                .history
                .lock()
                .expect("snapshot history poisoned by an earlier panic");
            doomed
                .iter()
                .try_for_each(|snapshot| history.deleted(snapshot))
        };
        if let Err(e) = recorded {
            // Not recorded: as far as the next open knows they still exist, so they do.
            let mut inner = self.inner();
            for snapshot in &doomed {
                inner.snapshots.push(Taken {
                    snapshot: *snapshot,
                    durable: true,
                });
            }
            inner.snapshots.sort_by_key(|t| t.snapshot.id);
            return Err(e);
        }
        self.collect_garbage()?;
        Ok(doomed)
    }

    /// Drops every copy no remaining snapshot reads, from the snapshot log and the archive,
    /// and lowers the page map to the copies left.
    fn collect_garbage(&self) -> Result<()> {
        // The archive is listed before the locks are taken: a remote listing may take
        // seconds, and commits staging copies need the log. A copy archived meanwhile is in
        // neither the listing nor the log; it is left alone (space, not a wrong page: the
        // decision on each copy seen depends only on the snapshots and the copies older than
        // it), and the page map is never lowered below a newer copy staged since.
        let archived = self.archive.list();
        let listed = archived.is_some();
        let mut log = self.log();
        let mut inner = self.inner();
        let mut times: Vec<u64> = inner.snapshots.iter().map(|t| t.snapshot.time_us).collect();
        times.sort_unstable();
        let mut by_page: HashMap<PageId, Vec<(u64, bool)>> = HashMap::new();
        for (page, time, _) in log.staged() {
            by_page.entry(page).or_default().push((time, true));
        }
        for (page, time) in archived.unwrap_or_default() {
            by_page.entry(page).or_default().push((time, false));
        }
        let (mut from_log, mut from_archive) = (Vec::new(), Vec::new());
        for (page, mut copies) in by_page {
            copies.sort_unstable();
            let newest_seen = copies.last().map(|&(time, _)| time);
            let copy_times: Vec<u64> = copies.iter().map(|&(time, _)| time).collect();
            let mut newest_kept = None;
            for ((time, staged), read) in copies.into_iter().zip(copies_read(&copy_times, &times)) {
                if read {
                    newest_kept = Some(time);
                } else if staged {
                    from_log.push((page, time));
                } else {
                    from_archive.push((page, time));
                }
            }
            let newer_since = inner
                .page_map
                .get(&page)
                .is_some_and(|&mapped| Some(mapped) > newest_seen);
            if listed && !newer_since {
                match newest_kept {
                    Some(time) => inner.page_map.insert(page, time),
                    None => inner.page_map.remove(&page),
                };
            }
        }
        drop(inner);
        if !from_log.is_empty() {
            log.forget(&from_log)?;
        }
        drop(log);
        if !from_archive.is_empty() {
            self.archive.remove(&from_archive)?;
        }
        Ok(())
    }

    /// Where the local archive of the store in `store_dir` lies.
    pub fn local_archive_path(store_dir: &Path) -> std::path::PathBuf {
        store_dir.join(SNAPSHOTS_DIR_NAME).join(LOCAL_ARCHIVE_FILE)
    }

    /// Does the store in `store_dir` keep snapshots (was it ever opened with them on)?
    pub fn exist_in(fs: &dyn FileSystem, store_dir: &Path) -> bool {
        fs.is_dir(&store_dir.join(SNAPSHOTS_DIR_NAME))
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .expect("snapshot state poisoned by an earlier panic")
    }

    fn log(&self) -> MutexGuard<'_, SnapshotLog> {
        self.log
            .lock()
            .expect("snapshot log poisoned by an earlier panic")
    }

    /// The durable snapshots, oldest first.
    pub fn list(&self) -> Vec<Snapshot> {
        self.inner()
            .snapshots
            .iter()
            .filter(|t| t.durable)
            .map(|t| t.snapshot)
            .collect()
    }

    pub fn stats(&self) -> SnapshotStats {
        // The archive is asked first, without the locks: a remote one may take seconds.
        let archive_bytes = self.archive.bytes();
        let archive_unavailable = self.archive.unavailable();
        let log = self.log();
        let inner = self.inner();
        SnapshotStats {
            snapshots: inner.snapshots.iter().filter(|t| t.durable).count(),
            staged_copies: log.len(),
            snapshot_log_bytes: log.bytes(),
            archive_bytes,
            pre_images: inner.pre_images.values().map(HashMap::len).sum(),
            archive_unavailable,
        }
    }

    /// `archive`, if the store's pages were archived there (or no snapshot was ever taken: the
    /// location is recorded now); else an archive that refuses every read of the past with
    /// an error naming both places, since the pages are not where it would look.
    fn archive_where_recorded(
        fs: &dyn FileSystem,
        dir: &Path,
        archive: Arc<dyn Archive>,
        snapshots_ever: u64,
    ) -> Result<Arc<dyn Archive>> {
        let path = dir.join(ARCHIVE_LOCATION_FILE);
        let here = archive.location();
        let recorded = match crate::location::read(fs, &path) {
            Ok(recorded) => recorded,
            Err(e @ (Error::CorruptFile { .. } | Error::UnsupportedFormat { .. })) => {
                // Left as it is: which archive holds the pages is not known any more.
                tracing::error!(error = %e, "the record of where snapshot pages are archived is damaged; reads of the past will fail");
                return Ok(Arc::new(crate::archive::UnavailableArchive {
                    reason: format!("the record of where its pages are archived is damaged: {e}"),
                    path,
                    location: here,
                }));
            }
            Err(e) => return Err(e),
        };
        match recorded {
            Some(recorded) if recorded == here => Ok(archive),
            Some(recorded) if snapshots_ever > 0 => {
                tracing::error!(%recorded, opened_with = %here, "the store was opened with another snapshot archive than its pages went to; reads of the past will fail");
                Ok(Arc::new(crate::archive::UnavailableArchive {
                    reason: format!(
                        "this store's snapshot pages were archived at {recorded}, and it was \
                         opened with the archive at {here}: open it with the archive at \
                         {recorded} to read its past"
                    ),
                    path,
                    location: recorded,
                }))
            }
            _ => {
                crate::location::write(fs, &path, &here)?;
                Ok(archive)
            }
        }
    }

    /// The archive's name (its path, for the local one).
    pub fn archive_name(&self) -> String {
        self.archive.name()
    }

    /// Moves every staged copy of a durable snapshot to the archive.
    pub fn archive_all(&self) -> Result<()> {
        while self.background_turn()? {}
        Ok(())
    }

    /// The newest snapshot, durable or not, and the pages of `txn` that need a copy for it.
    fn copies_needed(&self, inner: &Inner, txn: TxnId) -> Option<(Snapshot, Vec<PageId>)> {
        let newest = inner.snapshots.last()?.snapshot;
        let pages = inner.pre_images.get(&txn)?;
        let needed: Vec<PageId> = pages
            .keys()
            .filter(|page| inner.page_map.get(page).is_none_or(|&t| t < newest.time_us))
            .copied()
            .collect();
        Some((newest, needed))
    }
}

/// Which of a page's copies (their times, ascending; a copy both staged and archived appears
/// twice) some snapshot still reads: a copy made at time t serves the snapshots after the
/// page's previous copy and at or before t (`snapshots`: their times, ascending).
pub(crate) fn copies_read(copies: &[u64], snapshots: &[u64]) -> Vec<bool> {
    let mut previous = 0;
    let mut read = false;
    copies
        .iter()
        .map(|&time| {
            if time != previous {
                let first_after = snapshots.partition_point(|&t| t <= previous);
                read = snapshots.get(first_after).is_some_and(|&t| t <= time);
                previous = time;
            }
            read
        })
        .collect()
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

impl PageVersions for Snapshots {
    fn wants_pre_image(&self, page: PageId) -> bool {
        let inner = self.inner();
        match inner.snapshots.last() {
            Some(newest) => inner
                .page_map
                .get(&page)
                .is_none_or(|&t| t < newest.snapshot.time_us),
            None => false,
        }
    }

    fn has_pre_image(&self, txn: TxnId, page: PageId) -> bool {
        self.inner()
            .pre_images
            .get(&txn)
            .is_some_and(|kept| kept.contains_key(&page))
    }

    fn first_change(&self, txn: TxnId, page: PageId, committed: &[u8]) {
        debug_assert_eq!(committed.len(), self.page_size);
        let mut inner = self.inner();
        let kept = inner.pre_images.entry(txn).or_default();
        if let std::collections::hash_map::Entry::Vacant(slot) = kept.entry(page) {
            slot.insert(committed.into());
            inner.changed_by.insert(page, txn);
        }
    }

    fn commit_ready(&self, txn: TxnId) -> bool {
        let inner = self.inner();
        self.copies_needed(&inner, txn)
            .is_none_or(|(_, needed)| needed.is_empty())
    }

    fn prepare_commit(&self, txn: TxnId) -> Result<()> {
        let (snapshot, images) = {
            let inner = self.inner();
            let Some((snapshot, needed)) = self.copies_needed(&inner, txn) else {
                return Ok(());
            };
            let kept = &inner.pre_images[&txn];
            let images: Vec<(PageId, Box<[u8]>)> = needed
                .into_iter()
                .map(|page| (page, kept[&page].clone()))
                .collect();
            (snapshot, images)
        };
        if images.is_empty() {
            return Ok(());
        }
        let mut log = self.log();
        let copies: Vec<(PageId, &[u8])> = images.iter().map(|(p, i)| (*p, &i[..])).collect();
        log.stage(snapshot.time_us, &copies)?;
        let mut inner = self.inner();
        for (page, _) in &images {
            let newest = inner.page_map.entry(*page).or_insert(snapshot.time_us);
            *newest = (*newest).max(snapshot.time_us);
        }
        Ok(())
    }

    fn ended(&self, txn: TxnId) {
        let mut inner = self.inner();
        inner.readers.remove(&txn);
        if let Some(pages) = inner.pre_images.remove(&txn) {
            for page in pages.keys() {
                inner.changed_by.remove(page);
            }
        }
    }

    fn take_snapshot(&self, lsn: Lsn) -> Result<Snapshot> {
        let mut inner = self.inner();
        let snapshot = Snapshot {
            id: inner.id_max + 1,
            time_us: now_us().max(inner.time_max + 1),
            lsn,
        };
        inner.id_max = snapshot.id;
        inner.time_max = snapshot.time_us;
        inner.snapshots.push(Taken {
            snapshot,
            durable: false,
        });
        Ok(snapshot)
    }

    fn persist_snapshot(&self, snapshot: &Snapshot) -> Result<()> {
        self.history
            .lock()
            .expect("snapshot history poisoned by an earlier panic")
            .taken(snapshot)?;
        let mut inner = self.inner();
        if let Some(taken) = inner
            .snapshots
            .iter_mut()
            .find(|t| t.snapshot.id == snapshot.id)
        {
            taken.durable = true;
        }
        Ok(())
    }

    fn list(&self) -> Vec<Snapshot> {
        Snapshots::list(self)
    }

    fn delete(&self, which: &dyn Fn(&Snapshot) -> bool) -> Result<Vec<Snapshot>> {
        Snapshots::delete(self, which)
    }

    fn news_since(&self, prev_us: u64) -> SnapshotNews {
        let mut inner = self.inner();
        // Announce only durable snapshots, and promise that none still to come is at or
        // before the current time: a snapshot being taken bounds it, and the next time
        // handed out is after it.
        let pending = inner
            .snapshots
            .iter()
            .filter(|t| !t.durable)
            .map(|t| t.snapshot.time_us)
            .min();
        let curr_us = match pending {
            Some(time) => time - 1,
            None => {
                let now = now_us().max(inner.time_max);
                inner.time_max = now;
                now
            }
        }
        .max(prev_us);
        let taken = inner
            .snapshots
            .iter()
            .filter(|t| t.durable && t.snapshot.time_us > prev_us && t.snapshot.time_us <= curr_us)
            .map(|t| (t.snapshot.id, t.snapshot.time_us))
            .collect();
        SnapshotNews {
            prev_us,
            taken,
            curr_us,
        }
    }

    fn begin_read(&self, txn: TxnId, id: u64) -> Result<Snapshot> {
        let mut inner = self.inner();
        let snapshot = inner
            .snapshots
            .iter()
            .find(|t| t.durable && t.snapshot.id == id)
            .map(|t| t.snapshot)
            .ok_or_else(|| Error::NoSuchSnapshot {
                reason: format!("no snapshot numbered {id}"),
            })?;
        inner.readers.insert(txn, id);
        Ok(snapshot)
    }

    fn copy_as_of(&self, page: PageId, snapshot: &Snapshot, buf: &mut [u8]) -> Result<bool> {
        if self.map_complete && !self.has_copy_as_of(page, snapshot) {
            return Ok(false);
        }
        // Staged first, then the archive: a copy leaves the log only after the archive holds
        // it, so looking in this order never misses one on its way. The archive is asked
        // without the log's lock: a remote archive may take seconds, and a commit that stages
        // copies (under the server's state) needs that lock.
        let mut staged = self.log().oldest_at_or_after(page, snapshot.time_us);
        for _ in 0..COPY_LOOKUPS_MAX {
            let archived = self.archive.get(page, snapshot.time_us, buf)?;
            let Some((time, _)) = staged else {
                return Ok(archived.is_some());
            };
            if archived.is_some_and(|a| a <= time) {
                return Ok(true);
            }
            // The staged copy is the one, if it is still staged; one that left the log since
            // is in the archive now, and the archive is asked again.
            let log = self.log();
            match log.oldest_at_or_after(page, snapshot.time_us) {
                Some((now, offset)) if now == time => {
                    log.read(page, time, offset, buf)?;
                    return Ok(true);
                }
                other => staged = other,
            }
        }
        Err(Error::Io {
            path: self.archive.name().into(),
            operation: "read as of a snapshot",
            source: std::io::Error::other(format!(
                "the copy of page {page} for the snapshot at {} moved between the snapshot log \
                 and the archive {COPY_LOOKUPS_MAX} times while read",
                snapshot.time_us
            )),
        })
    }

    fn has_copy_as_of(&self, page: PageId, snapshot: &Snapshot) -> bool {
        self.inner()
            .page_map
            .get(&page)
            .is_some_and(|&t| t >= snapshot.time_us)
    }

    fn pre_image(&self, page: PageId, buf: &mut [u8]) -> bool {
        let inner = self.inner();
        let Some(txn) = inner.changed_by.get(&page) else {
            return false;
        };
        buf.copy_from_slice(&inner.pre_images[txn][&page]);
        true
    }

    fn background_turn(&self) -> Result<bool> {
        let _turn = self.archiving.lock().unwrap_or_else(|e| e.into_inner());
        let (batch, images) = {
            let log = self.log();
            let inner = self.inner();
            // Copies of a snapshot whose taking is not durable yet wait: a crash would make
            // them orphans, which the archive must never hold.
            let pending: HashSet<u64> = inner
                .snapshots
                .iter()
                .filter(|t| !t.durable)
                .map(|t| t.snapshot.time_us)
                .collect();
            drop(inner);
            let batch: Vec<(PageId, u64, u64)> = log
                .staged()
                .filter(|(_, time, _)| !pending.contains(time))
                .take(ARCHIVE_BATCH_COPIES)
                .collect();
            let mut images = vec![0u8; batch.len() * self.page_size];
            for ((page, time, offset), image) in
                batch.iter().zip(images.chunks_exact_mut(self.page_size))
            {
                log.read(*page, *time, *offset, image)?;
            }
            (batch, images)
        };
        if batch.is_empty() {
            return Ok(false);
        }
        let copies: Vec<PageCopy<'_>> = batch
            .iter()
            .zip(images.chunks_exact(self.page_size))
            .map(|((page, time_us, _), image)| PageCopy {
                page: *page,
                time_us: *time_us,
                image,
            })
            .collect();
        self.archive.put(&copies)?;
        let done: Vec<(PageId, u64)> = batch.iter().map(|(p, t, _)| (*p, *t)).collect();
        self.log().archived(&done)?;
        Ok(batch.len() == ARCHIVE_BATCH_COPIES)
    }

    fn close(&self) -> Result<()> {
        // An archive that cannot take them now (a node down, a full disk) does not hold the
        // store open: the copies are durable in the snapshot log, staged again at the next
        // open and archived then.
        if let Err(e) = self.archive_all() {
            tracing::warn!(archive = %self.archive.name(), error = %e, "page copies left in the snapshot log at close; archived after the next open");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::copies_read;
    use proptest::prelude::*;

    /// The copy a read as of `snapshot` gets: the oldest at or after it.
    fn answer(copies: &[u64], snapshot: u64) -> Option<u64> {
        copies.iter().copied().filter(|&t| t >= snapshot).min()
    }

    proptest! {
        /// Retention keeps exactly what the remaining snapshots read: every one of them gets
        /// the same copy from what is kept as from everything, and every copy kept is some
        /// remaining snapshot's answer.
        #[test]
        fn retention_keeps_exactly_what_remaining_snapshots_read(
            copies in proptest::collection::btree_set(1u64..200, 0..20),
            snapshots in proptest::collection::btree_set(1u64..200, 0..20),
            deleted in proptest::collection::vec(any::<bool>(), 20),
        ) {
            let copies: Vec<u64> = copies.into_iter().collect();
            let remaining: Vec<u64> = snapshots
                .iter()
                .zip(&deleted)
                .filter(|(_, gone)| !**gone)
                .map(|(t, _)| *t)
                .collect();
            let read = copies_read(&copies, &remaining);
            let kept: Vec<u64> = copies
                .iter()
                .zip(&read)
                .filter(|(_, r)| **r)
                .map(|(t, _)| *t)
                .collect();
            for &snapshot in &remaining {
                prop_assert_eq!(answer(&kept, snapshot), answer(&copies, snapshot));
            }
            for &copy in &kept {
                prop_assert!(remaining.iter().any(|&s| answer(&copies, s) == Some(copy)));
            }
        }
    }
}
