//! Restart under differential logging (Lee, Kim & Cha, sections 3.4 and 4.2). When the store
//! opens, [`open_and_replay`] opens every stream on a thread of its own; the opening scan that
//! finds a stream's end hands over its records, so the log is read once, each record checked.
//! How much overlaps is the store's [`RestartLevel`] (Table 1): at level 4, the default, the
//! last complete checkpoint's backup is XORed into a zeroed image on another thread while
//! each stream thread replays its records into the same image as it reads them (DL1P record
//! by record, [`OnePassForward`]); level 3 reads the backup and the streams at once and
//! replays after; level 2 loads the backup first and replays each stream as it is read;
//! level 1 loads, then reads, then replays (DL1P backwards, as Algorithm 3 is written). The
//! physical baseline always loads the backup first and merges the streams by serial number on
//! one thread: as they are read at levels 2 and 4, after all are read at levels 1 and 3. The
//! restart pass then moves every page into the pool, resident from then on.

use super::state::{check_fits, data_pages, is_data_page, Streams};
use super::{dl, dl_mut, RecoveryMethodKind};
use crate::recovery::restart::{Replayed, RestartPass};
use crate::recovery::{RestartLevel, RestartReport};
use crate::server::{Server, State};
use lodestore_core::{Lsn, PageId, Result};
use lodestore_difflog::anchor::Checkpointed;
use lodestore_difflog::backup::Backup;
use lodestore_difflog::kinds::{PHYSICAL_CHANGES, PHYSICAL_COMPENSATION, XOR_CHANGES};
use lodestore_difflog::restart::parallel::{replay_streams, XorRestart};
use lodestore_difflog::restart::{
    one_pass, physical_redo_merging, physical_two_pass, physical_undo_after_merge, two_pass, Image,
    MemoryImage, OnePassForward, Replay, StreamTail,
};
use lodestore_difflog::{physical, xor};
use lodestore_storage::page;
use lodestore_wal::{Log, LogOptions, Record, RecordBody};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Instant;

/// Records read ahead of PL2P's merge per stream at most: enough to keep the readers busy
/// while the merge waits on the slowest stream, bounded so memory does not follow the log.
const MERGE_QUEUE_RECORDS: usize = 4096;

/// The store's pages rebuilt in memory when it opened, waiting for the restart pass.
pub(crate) struct Recovered {
    image: MemoryImage,
    /// Pages past the backup that PL2P's replay laid on their grown format already.
    grown_formatted: BTreeSet<PageId>,
    named: Named,
    replay: Replay,
    backup_load_us: u64,
    /// The longest stream's opening read.
    log_read_us: u64,
    /// Log processing after the last read ended.
    replay_us: u64,
}

/// What the streams need to open and replay.
pub(crate) struct StreamsAt<'a> {
    pub dir: &'a Path,
    pub options: &'a LogOptions,
    pub done: &'a Checkpointed,
}

/// Opens every stream of an existing store (a thread each) and rebuilds the store's pages
/// from `backup` and the streams, as the module's documentation says.
pub(crate) fn open_and_replay(
    kind: RecoveryMethodKind,
    server: &Server,
    capacity: usize,
    at: StreamsAt<'_>,
    backup: &Backup,
) -> Result<(Vec<Log>, Recovered)> {
    let page_size = server.volume.page_size();
    let done = at.done;
    let first_lsn = Lsn(at.options.segment_bytes);
    let known = done.page_count.max(server.volume.page_count());
    // Large enough for every page the pool may hold; untouched pages take no memory.
    let image_owned = new_image(
        page_number_bound(capacity, page_size).max(known) as usize,
        page_size,
    )?;
    let image_pages = image_owned.page_count() as u32;
    let level = server.options().restart_level;
    let pl2p = kind == RecoveryMethodKind::Pl2p;
    let grown = GrownPagesFormatted {
        image: &image_owned,
        volume: &server.volume,
        from: done.page_count,
        formatted: Mutex::default(),
    };
    // The XOR methods' deltas commute with the grown format, XORed in after them; PL2P's
    // after-images must land on it.
    let image: &dyn Image = if pl2p { &grown } else { &image_owned };
    // PL2P's images must land on the backup's bytes in order, so it loads first; the XOR
    // methods may take the backup in at any moment (levels 3 and 4).
    let backup_beside = !pl2p && matches!(level, RestartLevel::Three | RestartLevel::Four);
    // Each stream replayed by its own thread as soon as it is read (levels 2 and 4; DL1P
    // record by record as the scan reads them).
    let replay_at_once = !pl2p && matches!(level, RestartLevel::Two | RestartLevel::Four);
    // The baseline pipelines too (the paper's Table 2): a merging thread redoes changes in
    // serial order as the streams' records arrive, and undoes the losers once all are read.
    let merging = pl2p && matches!(level, RestartLevel::Two | RestartLevel::Four);
    let dirs: Vec<PathBuf> = (0..done.windows.len())
        .map(|s| super::state::stream_dir(at.dir, s))
        .collect();
    let load = || -> Result<u64> {
        let started = Instant::now();
        load_backup(backup, done.page_count, page_size, &image_owned)?;
        Ok(started.elapsed().as_micros() as u64)
    };
    let checkpoint_id = done.backup_id();
    let stream = |s: usize, feed: Option<SyncSender<Record>>| -> Result<StreamOutcome> {
        let window = done.windows[s];
        let from = if window.begin == Lsn::ZERO {
            first_lsn
        } else {
            window.begin
        };
        let dir = &dirs[s];
        let reading = Instant::now();
        let mut records = Vec::new();
        let mut named = Named::default();
        let mut forward = (replay_at_once && kind == RecoveryMethodKind::Dl1p)
            .then(|| OnePassForward::new(dir, window, checkpoint_id, image));
        // A store grown past what the pool can hold is named as such, not as a bad record.
        let past_pool = |pages_end: u32| -> Result<()> {
            if pages_end > image_pages {
                check_fits(server, capacity, pages_end)?;
                return Err(lodestore_core::Error::InvalidArgument(format!(
                    "{}: a record names page {}, past the {image_pages} pages the pool can hold",
                    dir.display(),
                    pages_end - 1
                )));
            }
            Ok(())
        };
        let (log, _) =
            Log::open_visiting(server.fs.clone(), dir, at.options.clone(), from, |record| {
                if let Some(pass) = forward.as_mut() {
                    // The pass parses each change once and counts its pages itself.
                    named.add_txn(&record);
                    let pushed = pass.push(record);
                    past_pool(pass.pages_end())?;
                    return pushed;
                }
                named.add(&record);
                past_pool(named.pages_end)?;
                match &feed {
                    Some(feed) => feed.send(record).map_err(|_| {
                        lodestore_core::Error::InvalidArgument(format!(
                            "{}: the merge of the streams stopped",
                            dir.display()
                        ))
                    })?,
                    None => records.push(record),
                }
                Ok(())
            })?;
        // Replayed as read, the stream's reading and replaying are one span, counted as read.
        let read_us = reading.elapsed().as_micros() as u64;
        let mut replay = Replay::default();
        if let Some(mut pass) = forward {
            let read = |lsn| log.read(lsn);
            let finished = pass.finish(&read);
            past_pool(pass.pages_end())?;
            named.pages_end = named.pages_end.max(pass.pages_end());
            replay = finished?;
        } else if replay_at_once {
            let read = |lsn| log.read(lsn);
            let tail = StreamTail {
                path: log.dir(),
                records: &records,
                window,
                read: &read,
            };
            replay = match kind {
                RecoveryMethodKind::Dl2p => two_pass(&tail, checkpoint_id, image)?,
                _ => one_pass(&tail, checkpoint_id, image)?,
            };
            records = Vec::new();
        }
        Ok(StreamOutcome {
            log,
            records,
            named,
            read_us,
            replay,
        })
    };
    let (backup_load_us, processing_started, outcomes, merged) = std::thread::scope(|scope| {
        let loader = backup_beside.then(|| scope.spawn(load));
        let loaded_first = (!backup_beside).then(load);
        let processing_started = Instant::now();
        let mut feeds = Vec::new();
        let merger = merging.then(|| {
            let mut arriving = Vec::new();
            for (s, dir) in dirs.iter().enumerate() {
                let (send, receive) = sync_channel(MERGE_QUEUE_RECORDS);
                feeds.push(send);
                arriving.push((dir.as_path(), done.windows[s], receive));
            }
            scope.spawn(move || physical_redo_merging(arriving, image))
        });
        let mut feeds = feeds.into_iter();
        let streams: Vec<_> = (0..done.windows.len())
            .map(|s| {
                let feed = feeds.next();
                scope.spawn(move || stream(s, feed))
            })
            .collect();
        let outcomes: Vec<Result<StreamOutcome>> = streams
            .into_iter()
            .map(|t| t.join().expect("a restart stream thread panicked"))
            .collect();
        let merged = merger.map(|t| t.join().expect("the restart's merging thread panicked"));
        let backup_load_us = match (loader, loaded_first) {
            (Some(t), _) => t.join().expect("the backup loader panicked"),
            (None, Some(loaded)) => loaded,
            (None, None) => unreachable!("the backup loads one way or the other"),
        };
        (backup_load_us, processing_started, outcomes, merged)
    });
    let backup_load_us = backup_load_us?;
    // A merge that failed stopped the streams feeding it: its error is the cause.
    let merged = merged.transpose()?;
    let outcomes: Vec<StreamOutcome> = outcomes.into_iter().collect::<Result<_>>()?;
    let log_read_us = outcomes.iter().map(|o| o.read_us).max().unwrap_or(0);
    let mut replay = Replay::default();
    if replay_at_once {
        for o in &outcomes {
            replay.add(&o.replay);
        }
    } else {
        // Levels 1 and 3, and the baseline: every stream read, the backup in; now the replay.
        let readers: Vec<_> = outcomes
            .iter()
            .map(|o| move |lsn| o.log.read(lsn))
            .collect();
        let tails: Vec<StreamTail<'_>> = outcomes
            .iter()
            .zip(&readers)
            .enumerate()
            .map(|(s, (o, read))| StreamTail {
                path: o.log.dir(),
                records: merged
                    .as_ref()
                    .map_or(&o.records, |(records, _)| &records[s]),
                window: done.windows[s],
                read,
            })
            .collect();
        replay = match (kind, &merged) {
            // The baseline merges the streams by serial number, on one thread: as they were
            // read (levels 2 and 4), or now.
            (RecoveryMethodKind::Pl2p, Some((_, pass_one))) => {
                physical_undo_after_merge(&tails, image, pass_one.clone())?
            }
            (RecoveryMethodKind::Pl2p, None) => physical_two_pass(&tails, image)?,
            (RecoveryMethodKind::Dl2p, _) => replay_streams(
                XorRestart::TwoPass,
                &tails,
                checkpoint_id,
                image,
                tails.len(),
            )?,
            _ => replay_streams(
                XorRestart::OnePass,
                &tails,
                checkpoint_id,
                image,
                tails.len(),
            )?,
        };
    }
    let processing_us = processing_started.elapsed().as_micros() as u64;
    let mut named = Named::default();
    for o in &outcomes {
        named.merge(&o.named);
    }
    let logs = outcomes.into_iter().map(|o| o.log).collect();
    let grown_formatted = grown
        .formatted
        .into_inner()
        .unwrap_or_else(|e| e.into_inner());
    Ok((
        logs,
        Recovered {
            image: image_owned,
            grown_formatted,
            named,
            replay,
            backup_load_us,
            log_read_us,
            replay_us: processing_us.saturating_sub(log_read_us),
        },
    ))
}

/// The restart pass: installs the pages [`open_and_replay`] rebuilt (or, for a store that has
/// just taken the method, its backup as written moments ago).
pub(crate) struct DlRestart {
    pub streams: Arc<Streams>,
}

impl RestartPass for DlRestart {
    /// The server's own log holds only its checkpoints under this method.
    fn scanned(&mut self, _record: Record) {}

    fn replay(
        self: Box<Self>,
        server: &Server,
        state: &mut State,
        report: &mut RestartReport,
    ) -> Result<Replayed> {
        let page_size = server.volume.page_size();
        let done = dl(state).done.clone();
        let capacity = state.pool.capacity();
        let recovered = match dl_mut(state).recovered.take() {
            Some(recovered) => recovered,
            None => {
                let known = done.page_count.max(server.volume.page_count());
                let image = new_image(known as usize, page_size)?;
                let started = Instant::now();
                load_backup(
                    &dl(state).backups[done.backup()],
                    done.page_count,
                    page_size,
                    &image,
                )?;
                Recovered {
                    image,
                    grown_formatted: BTreeSet::new(),
                    named: Named::default(),
                    replay: Replay::default(),
                    backup_load_us: started.elapsed().as_micros() as u64,
                    log_read_us: 0,
                    replay_us: 0,
                }
            }
        };
        report.backup_load_us = recovered.backup_load_us;
        report.log_read_us = recovered.log_read_us;
        report.replay_us = recovered.replay_us;
        let mut image = recovered.image;
        let replay = recovered.replay;
        let pages_end = recovered
            .named
            .pages_end
            .max(done.page_count)
            .max(server.volume.page_count());
        check_fits(server, capacity, pages_end)?;
        server.volume.extend_to(pages_end)?;
        // Pages past the backup as a file extension writes them, XORed in like the backup
        // (PL2P's replay laid the pages it wrote on that format already).
        let mut fresh = vec![0u8; page_size];
        for p in data_pages(pages_end, page_size)
            .filter(|p| p.0 >= done.page_count && !recovered.grown_formatted.contains(p))
        {
            server.volume.format_new_page(p, &mut fresh);
            image.xor_page(p.0 as usize, &fresh);
        }
        report.records_scanned += replay.records;
        report.redo_applied += replay.ranges_redone;
        report.records_undone += replay.ranges_undone;
        report.losers += replay.rolled_back;

        // Every page resident, with a version above any a client may have seen before the
        // crash: each change since the checkpoint took one and logged at least a byte.
        let first_lsn = server.log.options().segment_bytes;
        let logged: u64 = self
            .streams
            .logs
            .iter()
            .zip(&done.windows)
            .map(|(log, w)| log.end_lsn().0.saturating_sub(w.begin.0.max(first_lsn)))
            .sum();
        let mut version = (0..pages_end as usize)
            .map(|p| image.with_page(p, |bytes| page::lsn(bytes).0))
            .max()
            .unwrap_or(0)
            + logged
            + 1;
        let touched: BTreeSet<PageId> = data_pages(pages_end, page_size).collect();
        // The image's memory goes back to the system a run of pages at a time as the pages
        // move into the pool, so the store is not held twice.
        let mut released = 0;
        for &p in &touched {
            let bytes = image.page_mut(p.0 as usize);
            page::set_lsn(bytes, Lsn(version));
            if state.pool.contains(p) {
                server.put_changed(state, p, bytes, Lsn(version));
            } else {
                server.install(state, p, bytes)?;
                state.pool.mark_dirty(p, Lsn(version));
            }
            version += 1;
            let installed = p.0 as usize + 1;
            if installed - released >= IMAGE_RELEASE_PAGES {
                image.release(released..installed);
                released = installed;
            }
        }
        drop(image);

        let dl = dl_mut(state);
        dl.backup_id = vec![done.backup_id(); pages_end as usize];
        // Both backups lack what the replay changed; the other one may be half written.
        dl.changed = [touched.clone(), touched.clone()];
        dl.backup_pages = [0, 0];
        dl.backup_pages[done.backup()] = done.page_count;
        dl.next_version = version;
        dl.next_serial = recovered.named.serial_max + 1;
        dl.ends_at_checkpoint = self.streams.logs.iter().map(|l| l.end_lsn()).collect();
        Ok(Replayed {
            touched,
            txn_max: recovered.named.txn_max,
            install_all: false,
        })
    }
}

/// What one stream's thread opened, read and did.
struct StreamOutcome {
    log: Log,
    /// Kept for the physical baseline's merge; dropped once a stream replayed them.
    records: Vec<Record>,
    named: Named,
    read_us: u64,
    replay: Replay,
}

/// What a stream's records name: the pages a restart must hold, the highest transaction and
/// serial number.
#[derive(Default)]
struct Named {
    pages_end: u32,
    txn_max: u64,
    serial_max: u64,
}

impl Named {
    fn merge(&mut self, other: &Named) {
        self.pages_end = self.pages_end.max(other.pages_end);
        self.txn_max = self.txn_max.max(other.txn_max);
        self.serial_max = self.serial_max.max(other.serial_max);
    }

    /// The record's transaction only (its pages are counted elsewhere).
    fn add_txn(&mut self, record: &Record) {
        self.txn_max = self.txn_max.max(record.txn.map_or(0, |t| t.0));
    }

    fn add(&mut self, record: &Record) {
        self.add_txn(record);
        if let RecordBody::Family { kind, flags, body } = &record.body {
            match *kind {
                XOR_CHANGES => {
                    for range in xor::ranges(*flags, body).flatten() {
                        self.pages_end = self.pages_end.max(range.page.0.saturating_add(1));
                    }
                }
                PHYSICAL_CHANGES | PHYSICAL_COMPENSATION => {
                    if let Ok((serial, ranges)) = physical::parse(*kind, *flags, body) {
                        self.serial_max = self.serial_max.max(serial);
                        for range in ranges {
                            self.pages_end = self.pages_end.max(range.page.0.saturating_add(1));
                        }
                    }
                }
                _ => {}
            }
        }
    }
}

/// Pages of the restart image handed to the pool before their memory is given back at once.
const IMAGE_RELEASE_PAGES: usize = 256;

/// Pages read at once while loading a backup.
const BACKUP_RUN_PAGES: u32 = 64;

/// XORs every data page of `backup` below `page_count` into `image` (zeros there, so this
/// copies them, in whatever order the streams' changes arrive), a run of pages per read.
fn load_backup(
    backup: &Backup,
    page_count: u32,
    page_size: usize,
    image: &MemoryImage,
) -> Result<()> {
    let mut run = vec![0u8; BACKUP_RUN_PAGES as usize * page_size];
    let mut first = 0;
    while first < page_count {
        let count = (page_count - first).min(BACKUP_RUN_PAGES);
        let buf = &mut run[..count as usize * page_size];
        backup.read_run(PageId(first), buf)?;
        for (i, bytes) in buf.chunks_exact(page_size).enumerate() {
            let p = PageId(first + i as u32);
            if is_data_page(p, page_size) {
                backup.verify(p, bytes)?;
                image.xor_page(p.0 as usize, bytes);
            }
        }
        first += count;
    }
    Ok(())
}

/// PL2P's view of the restart image: a page past the backup gets the format the file's
/// growth gives it (`Volume::format_new_page`) before the first after-image lands on it, as
/// the page the change was made to held. The XOR methods need no such view: their deltas
/// commute with the format, which the restart pass XORs in after them.
struct GrownPagesFormatted<'a> {
    image: &'a MemoryImage,
    volume: &'a lodestore_storage::Volume,
    /// The backup's page count: pages from here on were added after its checkpoint.
    from: u32,
    /// The pages formatted so far.
    formatted: Mutex<BTreeSet<PageId>>,
}

impl GrownPagesFormatted<'_> {
    fn format_once(&self, page: PageId) -> Result<(), String> {
        let mut formatted = self.formatted.lock().unwrap_or_else(|e| e.into_inner());
        if formatted.contains(&page) {
            return Ok(());
        }
        let mut fresh = vec![0u8; self.volume.page_size()];
        self.volume.format_new_page(page, &mut fresh);
        self.image.write(page, 0, &fresh)?;
        formatted.insert(page);
        Ok(())
    }
}

impl Image for GrownPagesFormatted<'_> {
    fn xor(&self, page: PageId, offset: usize, delta: &[u8]) -> Result<(), String> {
        self.image.xor(page, offset, delta)
    }

    fn write(&self, page: PageId, offset: usize, bytes: &[u8]) -> Result<(), String> {
        if page.0 >= self.from && is_data_page(page, self.volume.page_size()) {
            self.format_once(page)?;
        }
        self.image.write(page, offset, bytes)
    }

    fn prefetch(&self, page: PageId, offset: usize, len: usize) {
        self.image.prefetch(page, offset, len);
    }
}

/// An image of `count` zeroed pages, or an error naming its size.
fn new_image(count: usize, page_size: usize) -> Result<MemoryImage> {
    MemoryImage::try_zeroed(count, page_size).map_err(|error| {
        lodestore_core::Error::InvalidArgument(format!(
            "no memory for a restart image of {count} pages of {page_size} bytes: {error}"
        ))
    })
}

/// The smallest page number past `capacity` data pages: an image that large holds any store
/// the pool can.
fn page_number_bound(capacity: usize, page_size: usize) -> u32 {
    let capacity = u32::try_from(capacity).unwrap_or(u32::MAX);
    let mut end = capacity;
    loop {
        let data = data_pages(end, page_size).count() as u32;
        if data >= capacity {
            return end;
        }
        end = end.saturating_add(capacity - data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lodestore_storage::sim::SimFileSystem;
    use lodestore_storage::Volume;

    const PAGE: usize = 8192;

    /// A PL2P after-image that covers part of a page past the backup (here bytes 100..200)
    /// lands on the page as the file's growth formatted it, so the rest of the page (its
    /// header among it) is that format, not zeros; the page is formatted once, so a later
    /// image keeps the first; a page inside the backup is never formatted (its images land on
    /// the backup's bytes), nor is a page that holds no data.
    #[test]
    fn physical_images_past_the_backup_land_on_the_grown_format_once() {
        let fs = SimFileSystem::new();
        let volume = Volume::create(&fs, Path::new("/v"), PAGE).unwrap();
        let count = 24u32;
        let image = MemoryImage::zeroed(count as usize, PAGE);
        let data: Vec<PageId> = data_pages(count, PAGE).collect();
        let (inside, past) = (data[0], data[4]);
        let grown = GrownPagesFormatted {
            image: &image,
            volume: &volume,
            from: past.0,
            formatted: Mutex::default(),
        };
        let mut expected = vec![0u8; PAGE];
        volume.format_new_page(past, &mut expected);
        assert!(
            expected[..page::PAGE_HEADER_BYTES].iter().any(|&b| b != 0),
            "the grown format is not zeros where the image does not reach"
        );

        grown.write(past, 100, &[0xAB; 100]).unwrap();
        expected[100..200].fill(0xAB);
        assert_eq!(image.page(past.0 as usize), expected);

        grown.write(past, 4000, &[0xCD; 8]).unwrap();
        expected[4000..4008].fill(0xCD);
        assert_eq!(
            image.page(past.0 as usize),
            expected,
            "a second image lands on the first, not on a new format"
        );

        grown.write(inside, 100, &[0xEF; 4]).unwrap();
        let mut inside_expected = vec![0u8; PAGE];
        inside_expected[100..104].fill(0xEF);
        assert_eq!(image.page(inside.0 as usize), inside_expected);

        assert_eq!(
            *grown.formatted.lock().unwrap(),
            BTreeSet::from([past]),
            "only the page past the backup was formatted, once"
        );

        // A view whose backup is empty: every page lies past it, and still the superblock and
        // the space-map page get no data page's format.
        let empty_backup = MemoryImage::zeroed(count as usize, PAGE);
        let all_grown = GrownPagesFormatted {
            image: &empty_backup,
            volume: &volume,
            from: 0,
            formatted: Mutex::default(),
        };
        for not_data in [PageId(0), lodestore_storage::spacemap::FIRST_MAP_PAGE] {
            assert!(!is_data_page(not_data, PAGE));
            all_grown.write(not_data, 100, &[1; 4]).unwrap();
            let mut untouched = vec![0u8; PAGE];
            untouched[100..104].fill(1);
            assert_eq!(empty_backup.page(not_data.0 as usize), untouched);
        }
        assert!(all_grown.formatted.lock().unwrap().is_empty());
    }
}
