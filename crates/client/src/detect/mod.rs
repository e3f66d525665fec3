//! Update detection: how a client learns which bytes a transaction changed, and the log records
//! it makes of them.
//!
//! Every write path of a session (typed `get_mut`, byte slices, `write_at` on large objects,
//! allocation, free, resize, roots) calls [`WriteTracker::before_write`] with what it is about
//! to change. The detector decides whether that is a first write, and if so copies the piece's
//! pre-image into the [`RecoveryBuffer`]:
//!
//! | detector | first write is found by | piece copied |
//! |---|---|---|
//! | page protection | a write fault on a read-only frame ([`protection`]) | the page |
//! | sub-page blocks | a byte per block of the page | each block written |
//! | cards | a byte per card (a shift, an index, a store) | each card written |
//! | remembered set | a hash set of modified objects | each object written |
//! | object marking | a dirty bit per object | each object written |
//! | none | nothing: the page is shipped whole | nothing |
//! | written pages | the kernel's written bits, read by one scan at commit ([`written_pages`]) | nothing: the page is shipped whole |
//!
//! A change of a page's structure (an object added, moved, resized or removed) always takes a
//! whole-page pre-image, whatever the detector, because objects move.
//!
//! Log records are generated from the buffer's pieces when the buffer is full (oldest first),
//! when a dirty page leaves the client cache, and at commit; each piece's detector state is
//! then re-armed so a later write copies it again. Lodestore updates objects in place in the
//! client cache (QuickStore's design), so the software detectors copy originals at the first
//! write; Hosking's copying system diffed against originals it kept anyway.

pub mod protection;
pub mod recovery_buffer;
pub mod userfaultfd;
pub mod written_pages;

use crate::cache::{ArenaKind, ClientCache};
use lodestore_core::frames::{FrameId, FrameVec};
use lodestore_core::{Error, Oid, PageId, Result, SlotId, VolumeId};
use lodestore_loggen::{
    Generator, PageBounds, OBJECT_REDO_RECORD_FIXED_BYTES, UPDATE_RECORD_FIXED_BYTES,
};
use lodestore_protocol::{ObjectUpdates, PageUpdates};
use lodestore_storage::page::{self, PageKind};
use lodestore_storage::slotted;
use protection::FaultMechanism;
use recovery_buffer::{EntrySeq, Granule, RecoveryBuffer};
use rustc_hash::FxHashSet;
use serde::Serialize;
use std::collections::BTreeMap;
use std::ops::Range;

/// How a client learns what a transaction changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Detector {
    /// Write faults on read-only frames, delivered by a signal handler or by userfaultfd.
    PageProtection(FaultMechanism),
    /// A software write barrier copying blocks of `block_bytes` (8 to 64) at their first write.
    SubPageBlocks { block_bytes: usize },
    /// A card table of one byte per `card_bytes` (16 to 4096).
    Cards { card_bytes: usize },
    /// A hash set of modified objects.
    RememberedSet,
    /// A dirty bit per object; commit scans every cached object.
    ObjectMarking,
    /// Every page written is dirty as a whole.
    None,
    /// Every page written is dirty as a whole, as the kernel's written bits tell
    /// (asynchronous userfaultfd write protection and PAGEMAP_SCAN): no fault, no barrier.
    WrittenPages,
}

impl Detector {
    /// The memory the detector needs its client cache in.
    pub fn arena_kind(self) -> ArenaKind {
        match self {
            Detector::PageProtection(faults) => ArenaKind::Protected(faults),
            Detector::WrittenPages => ArenaKind::WrittenPages,
            _ => ArenaKind::Plain,
        }
    }

    /// Detectors that find first writes in software and copy pre-images themselves (no
    /// page protection to collect from or lift).
    fn copies_in_software(self) -> bool {
        matches!(
            self,
            Detector::SubPageBlocks { .. }
                | Detector::Cards { .. }
                | Detector::RememberedSet
                | Detector::ObjectMarking
        )
    }

    /// Bytes of the unit a unit-based detector tracks.
    fn unit_bytes(self) -> Option<usize> {
        match self {
            Detector::SubPageBlocks { block_bytes } => Some(block_bytes),
            Detector::Cards { card_bytes } => Some(card_bytes),
            _ => None,
        }
    }
}

/// What a write is about to change.
#[derive(Clone, Debug)]
pub enum Write {
    /// Bytes `range` of the object in `slot`, whose payload is `object` (page offsets).
    Object {
        slot: SlotId,
        object: Range<usize>,
        range: Range<usize>,
    },
    /// Bytes `range` of a page that holds no objects (a large object's data page).
    Bytes { range: Range<usize> },
    /// The page's structure (slot table, records moving): anything on the page.
    Structure,
}

/// Counters of a session's detection and log generation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct DetectionStats {
    /// Write faults taken (page protection).
    pub traps: u64,
    /// Whole pages copied into the recovery buffer.
    pub pages_copied: u64,
    /// Blocks, cards or objects copied into the recovery buffer.
    pub pieces_copied: u64,
    pub bytes_copied: u64,
    /// Bytes compared by diffing.
    pub bytes_compared: u64,
    /// Card table entries scanned at commit.
    pub cards_scanned: u64,
    /// Cached objects scanned for marks at commit.
    pub objects_scanned: u64,
    /// Written pages: pages the kernel's written bits showed dirty.
    pub pages_found_written: u64,
    /// Pieces whose records were generated early because the recovery buffer was full.
    pub buffer_evictions: u64,
    pub log_records: u64,
    /// Bytes of the log records generated (record header, before and after bytes).
    pub log_bytes: u64,
}

impl DetectionStats {
    /// The counts between an `earlier` reading of the same session's counters and this one.
    pub fn since(&self, earlier: &DetectionStats) -> DetectionStats {
        DetectionStats {
            traps: self.traps.saturating_sub(earlier.traps),
            pages_copied: self.pages_copied.saturating_sub(earlier.pages_copied),
            pieces_copied: self.pieces_copied.saturating_sub(earlier.pieces_copied),
            bytes_copied: self.bytes_copied.saturating_sub(earlier.bytes_copied),
            bytes_compared: self.bytes_compared.saturating_sub(earlier.bytes_compared),
            cards_scanned: self.cards_scanned.saturating_sub(earlier.cards_scanned),
            objects_scanned: self.objects_scanned.saturating_sub(earlier.objects_scanned),
            pages_found_written: self
                .pages_found_written
                .saturating_sub(earlier.pages_found_written),
            buffer_evictions: self
                .buffer_evictions
                .saturating_sub(earlier.buffer_evictions),
            log_records: self.log_records.saturating_sub(earlier.log_records),
            log_bytes: self.log_bytes.saturating_sub(earlier.log_bytes),
        }
    }
}

/// Detector state of one frame of the client cache.
#[derive(Clone, Debug, Default)]
struct FrameTrack {
    /// A whole-page pre-image is live in the recovery buffer.
    page_copied: bool,
    /// Unit detectors: non-zero once the unit was copied (blocks) or marked (cards).
    units: Option<Box<[u8]>>,
    /// Object marking: a bit per slot.
    marks: Vec<u64>,
    /// The page is shipped whole and the server diffs it (new pages, detector `None`).
    unlogged: bool,
    /// The page was created in this transaction (so also `unlogged`).
    new: bool,
    /// The frame is on `WriteTracker::touched`.
    listed: bool,
}

/// The track of `frame`, put on `touched` the first time it is changed in a transaction, so
/// the end of a transaction resets the frames it touched instead of walking the whole cache.
fn touch<'a>(
    frames: &'a mut FrameVec<FrameTrack>,
    touched: &mut Vec<FrameId>,
    frame: FrameId,
) -> &'a mut FrameTrack {
    let track = &mut frames[frame];
    if !track.listed {
        track.listed = true;
        touched.push(frame);
    }
    track
}

/// The detector, the recovery buffer and the log generator of one session.
pub struct WriteTracker {
    detector: Detector,
    /// log2 of the unit of a unit detector (blocks, cards), for the write barrier.
    unit_shift: Option<u32>,
    generator: Generator,
    page_size: usize,
    buffer: RecoveryBuffer,
    frames: FrameVec<FrameTrack>,
    /// Frames whose track changed in this transaction (each once).
    touched: Vec<FrameId>,
    /// Modified objects. A fast non-cryptographic hash: the set is probed on every write.
    remembered: FxHashSet<(PageId, SlotId)>,
    /// Live entries of each page.
    by_page: BTreeMap<PageId, Vec<EntrySeq>>,
    /// Log records generated and not yet shipped.
    pending: Vec<RecordRun>,
    pending_bytes: usize,
    /// Volume of the pages, for the OIDs of object redo records.
    volume: VolumeId,
    /// Pages whose first write page protection captured, for the session to mark dirty.
    dirtied: Vec<PageId>,
    /// The record bounds of each frame's page, kept from one diff of it to the next (its
    /// pieces at a commit, and its diffs in later transactions) under the frame's fill number,
    /// and forgotten before a write that changes its structure, so they always describe the
    /// page as it is.
    frame_bounds: FrameVec<PageBounds>,
    /// The ranges of the piece being generated: one vector for every piece, which a commit
    /// diffs by the thousand.
    piece_ranges: Vec<Range<usize>>,
    stats: DetectionStats,
}

impl WriteTracker {
    pub fn new(
        detector: Detector,
        generator: Generator,
        recovery_buffer_bytes: usize,
        page_size: usize,
        frame_count: usize,
        volume: VolumeId,
    ) -> Result<WriteTracker> {
        if recovery_buffer_bytes < page_size {
            return Err(Error::InvalidArgument(format!(
                "the recovery buffer ({recovery_buffer_bytes} bytes) must hold at least one \
                 {page_size}-byte page"
            )));
        }
        if let Some(unit) = detector.unit_bytes() {
            if !unit.is_power_of_two() || unit < 8 || unit > page_size {
                return Err(Error::InvalidArgument(format!(
                    "block or card size {unit} must be a power of two from 8 to the page size"
                )));
            }
        }
        Ok(WriteTracker {
            detector,
            unit_shift: detector.unit_bytes().map(|unit| unit.trailing_zeros()),
            generator,
            page_size,
            buffer: RecoveryBuffer::new(recovery_buffer_bytes, page_size),
            frames: FrameVec::new(frame_count),
            touched: Vec::new(),
            remembered: FxHashSet::default(),
            by_page: BTreeMap::new(),
            pending: Vec::new(),
            pending_bytes: 0,
            volume,
            dirtied: Vec::new(),
            frame_bounds: FrameVec::new(frame_count),
            piece_ranges: Vec::new(),
            stats: DetectionStats::default(),
        })
    }

    pub fn detector(&self) -> Detector {
        self.detector
    }

    pub fn stats(&self, cache: &ClientCache) -> DetectionStats {
        DetectionStats {
            traps: cache.protection().map_or(0, |p| p.traps()),
            ..self.stats
        }
    }

    /// Is `frame` shipped whole, for the server to diff?
    pub fn is_unlogged(&self, frame: FrameId) -> bool {
        self.frames[frame].unlogged
    }

    /// Was the page in `frame` created in this transaction?
    pub fn is_new(&self, frame: FrameId) -> bool {
        self.frames[frame].new
    }

    /// Bytes of log records waiting to be shipped.
    pub fn pending_bytes(&self) -> usize {
        self.pending_bytes
    }

    /// The log records generated since the last call, oldest first.
    pub fn take_pending(&mut self) -> Vec<RecordRun> {
        self.pending_bytes = 0;
        std::mem::take(&mut self.pending)
    }

    /// A page new in this transaction now occupies `frame`: it has no pre-image, it is shipped
    /// whole, and writes to it are not tracked.
    pub fn new_page(&mut self, cache: &mut ClientCache, frame: FrameId) -> Result<()> {
        self.frame_bounds[frame].forget();
        let track = touch(&mut self.frames, &mut self.touched, frame);
        track.unlogged = true;
        track.new = true;
        if let Some(protection) = cache.protection_mut() {
            protection.unprotect(frame)?;
        }
        Ok(())
    }

    /// Called before `write` changes the page in `frame`. Copies pre-images as the detector
    /// requires; may generate log records for older pieces to make room. Returns whether the
    /// page must be shipped at commit (with page protection it is known only once the write
    /// faults: see `collect`).
    pub fn before_write(
        &mut self,
        cache: &mut ClientCache,
        frame: FrameId,
        page: PageId,
        write: Write,
    ) -> Result<bool> {
        if matches!(write, Write::Structure) {
            self.frame_bounds[frame].forget(); // records are about to be added, moved or resized
        }
        if self.seen_already(frame, page, &write) {
            return Ok(true);
        }
        self.collect(cache)?;
        if self.frames[frame].unlogged {
            if let Some(protection) = cache.protection_mut() {
                protection.unprotect(frame)?;
            }
            return Ok(true);
        }
        match (self.detector, write) {
            (Detector::None, _) => {
                touch(&mut self.frames, &mut self.touched, frame).unlogged = true;
                Ok(true)
            }
            // The kernel notes the write; the commit's scan finds it.
            (Detector::WrittenPages, _) => Ok(false),
            (Detector::PageProtection(_), _) => {
                self.arm(cache, frame)?;
                Ok(false)
            }
            (_, Write::Structure) => {
                self.copy_page(cache, frame, page)?;
                Ok(true)
            }
            (_, _) if self.frames[frame].page_copied => Ok(true),
            (Detector::SubPageBlocks { .. } | Detector::Cards { .. }, write) => {
                let range = match write {
                    Write::Object { range, .. } | Write::Bytes { range } => range,
                    Write::Structure => unreachable!("handled above"),
                };
                self.copy_units(cache, frame, page, range)?;
                Ok(true)
            }
            (_, Write::Bytes { .. }) => {
                // Object detectors track objects; a large object's data page is copied whole.
                self.copy_page(cache, frame, page)?;
                Ok(true)
            }
            (Detector::RememberedSet, Write::Object { slot, object, .. }) => {
                if self.remembered.insert((page, slot)) {
                    self.copy_piece(cache, frame, page, Granule::Object(slot), object)?;
                }
                Ok(true)
            }
            (Detector::ObjectMarking, Write::Object { slot, object, .. }) => {
                let (word, bit) = (slot as usize / 64, 1u64 << (slot % 64));
                let marks = &mut touch(&mut self.frames, &mut self.touched, frame).marks;
                if marks.len() <= word {
                    marks.resize(word + 1, 0);
                }
                if marks[word] & bit == 0 {
                    marks[word] |= bit;
                    self.copy_piece(cache, frame, page, Granule::Object(slot), object)?;
                }
                Ok(true)
            }
        }
    }

    /// [`Self::before_write`] for one change that writes several ranges of the object in
    /// `slot` (payload `object`; `ranges` are offsets in the object): a B+-tree insert writes
    /// the node's header, part of its offset array and one entry, and copying the whole node
    /// instead would fill the recovery buffer a hundred times faster. Room for every range is
    /// made first, so that copying one cannot push the copy of another out of the buffer (and
    /// re-arm it) before the change is made.
    pub fn before_write_ranges(
        &mut self,
        cache: &mut ClientCache,
        frame: FrameId,
        page: PageId,
        slot: SlotId,
        object: Range<usize>,
        ranges: &[Range<usize>],
    ) -> Result<bool> {
        debug_assert!(
            ranges
                .iter()
                .all(|r| r.start <= r.end && r.end <= object.len()),
            "ranges lie inside the object"
        );
        let write = |range: &Range<usize>| Write::Object {
            slot,
            object: object.clone(),
            range: object.start + range.start..object.start + range.end,
        };
        let ranges = ranges.iter().filter(|r| !r.is_empty());
        let track = &self.frames[frame];
        if (track.unlogged || track.page_copied) && self.detector.copies_in_software() {
            // A new page (shipped whole) or one copied whole: every range is covered, and a
            // software detector has nothing to collect. A bulk load writes new leaves mostly.
            return Ok(true);
        }
        if ranges
            .clone()
            .all(|range| self.seen_already(frame, page, &write(range)))
        {
            return Ok(true);
        }
        if let Some(unit) = self.detector.unit_bytes() {
            if !self.frames[frame].page_copied && !self.frames[frame].unlogged {
                let shift = unit.trailing_zeros();
                // As `copy_units` counts it: twice each range's units.
                let room: usize = ranges
                    .clone()
                    .map(|r| 2 * (((r.end - 1) >> shift) - (r.start >> shift) + 1) * unit)
                    .sum();
                if room > self.buffer.capacity() {
                    let whole = object.start..object.end;
                    return self.before_write(
                        cache,
                        frame,
                        page,
                        Write::Object {
                            slot,
                            object,
                            range: whole,
                        },
                    );
                }
                self.collect(cache)?;
                while self.buffer.free_bytes() < room && self.buffer.oldest().is_some() {
                    self.evict_oldest(cache)?;
                }
            }
        }
        let mut dirty = false;
        for range in ranges {
            dirty |= self.before_write(cache, frame, page, write(range))?;
        }
        Ok(dirty)
    }

    /// The software barriers' hot write: what it changes was copied (or marked) by an earlier
    /// write of the transaction, so it is dirty and there is nothing to do. Answered before
    /// anything else, as nothing else could change the answer (these detectors have no
    /// protection arena to collect from, and a page copy or an unlogged page says dirty too).
    #[inline]
    fn seen_already(&self, frame: FrameId, page: PageId, write: &Write) -> bool {
        let track = &self.frames[frame];
        match (self.detector, write) {
            (
                Detector::SubPageBlocks { .. } | Detector::Cards { .. },
                Write::Object { range, .. } | Write::Bytes { range },
            ) => {
                let shift = self.unit_shift.expect("a unit detector has a unit");
                track.units.as_ref().is_some_and(|table| {
                    all_units_set(table, range.start >> shift, (range.end - 1) >> shift)
                })
            }
            (Detector::RememberedSet, Write::Object { slot, .. }) => {
                self.remembered.contains(&(page, *slot))
            }
            (Detector::ObjectMarking, Write::Object { slot, .. }) => track
                .marks
                .get(*slot as usize / 64)
                .is_some_and(|word| word & (1u64 << (slot % 64)) != 0),
            _ => false,
        }
    }

    /// Page protection: makes room for a page and arms `frame`, unless it is writable already.
    fn arm(&mut self, cache: &mut ClientCache, frame: FrameId) -> Result<()> {
        let protection = cache.protection().expect("page protection has an arena");
        if protection.is_writable(frame) {
            return Ok(());
        }
        while protection_needs_room(cache) && self.buffer.oldest().is_some() {
            self.evict_oldest(cache)?;
        }
        self.make_room(cache, self.page_size)?;
        let slot = self.buffer.reserve(self.page_size).as_mut_ptr();
        cache
            .protection_mut()
            .expect("page protection has an arena")
            .arm(frame, slot);
        Ok(())
    }

    /// A page whose first write page protection captured (it is dirty now), if any is left.
    pub fn take_dirtied(&mut self) -> Option<PageId> {
        self.dirtied.pop()
    }

    /// Page protection: takes in the pre-image the fault handler captured, if the armed frame
    /// was written; its page goes on the dirtied list.
    pub fn collect(&mut self, cache: &mut ClientCache) -> Result<()> {
        let Some(protection) = cache.protection_mut() else {
            return Ok(());
        };
        let Some(frame) = protection.take_capture() else {
            return Ok(());
        };
        let page = cache.page_of(frame).ok_or_else(|| {
            Error::InvalidArgument(format!("captured frame {frame} holds no page"))
        })?;
        let seq = self
            .buffer
            .push_reserved(page, Granule::Page, 0, self.page_size);
        self.by_page.entry(page).or_default().push(seq);
        touch(&mut self.frames, &mut self.touched, frame).page_copied = true;
        self.stats.pages_copied += 1;
        self.stats.bytes_copied += self.page_size as u64;
        self.dirtied.push(page);
        Ok(())
    }

    /// Copies the whole page as one piece, after generating the records of the smaller pieces
    /// already copied (they would be wrong to diff against a page whose objects move).
    fn copy_page(&mut self, cache: &mut ClientCache, frame: FrameId, page: PageId) -> Result<()> {
        if self.frames[frame].page_copied {
            return Ok(());
        }
        self.flush_page(cache, page)?;
        self.copy_piece(cache, frame, page, Granule::Page, 0..self.page_size)?;
        touch(&mut self.frames, &mut self.touched, frame).page_copied = true;
        Ok(())
    }

    /// Copies the units of `range` not copied yet, each run of them as one piece. Room for the
    /// whole range is made first: making room run by run could evict (and re-arm) a run of
    /// this same write before the write happens. A range the buffer cannot hold takes a page
    /// copy.
    fn copy_units(
        &mut self,
        cache: &mut ClientCache,
        frame: FrameId,
        page: PageId,
        range: Range<usize>,
    ) -> Result<()> {
        let unit = self.detector.unit_bytes().expect("a unit detector");
        debug_assert!(range.start < range.end && range.end <= self.page_size);
        let shift = unit.trailing_zeros();
        let (first, last) = (range.start >> shift, (range.end - 1) >> shift);
        // The common case of a hot loop: every unit is copied already.
        if let Some(table) = &self.frames[frame].units {
            if all_units_set(table, first, last) {
                return Ok(());
            }
        }
        // Twice the range: the runs are placed one after another, and the ring wraps at most
        // once among them, skipping less than one run.
        let room = 2 * (last - first + 1) * unit;
        if room > self.buffer.capacity() {
            return self.copy_page(cache, frame, page);
        }
        while self.buffer.free_bytes() < room {
            self.evict_oldest(cache)?;
        }
        let units_per_page = self.page_size >> shift;
        let table = touch(&mut self.frames, &mut self.touched, frame)
            .units
            .get_or_insert_with(|| vec![0u8; units_per_page].into_boxed_slice());
        // Runs of units not copied yet, each copied as one piece.
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for index in first..=last {
            if table[index] != 0 {
                continue;
            }
            table[index] = 1;
            match runs.last_mut() {
                Some((start, count)) if *start + *count == index => *count += 1,
                _ => runs.push((index, 1)),
            }
        }
        for (start, count) in runs {
            let at = start << shift;
            let granule = Granule::Units {
                first: start as u32,
                count: count as u32,
            };
            debug_assert!(
                self.buffer.has_room(count * unit),
                "room was made for the write"
            );
            self.copy_piece(cache, frame, page, granule, at..at + count * unit)?;
        }
        Ok(())
    }

    /// Copies bytes `range` of the page in `frame` into the buffer, making room first.
    fn copy_piece(
        &mut self,
        cache: &mut ClientCache,
        frame: FrameId,
        page: PageId,
        granule: Granule,
        range: Range<usize>,
    ) -> Result<()> {
        self.make_room(cache, range.len())?;
        let seq = self.buffer.push(
            page,
            granule,
            range.start,
            &cache.frame(frame)[range.clone()],
        );
        self.by_page.entry(page).or_default().push(seq);
        if granule == Granule::Page {
            self.stats.pages_copied += 1;
        } else {
            self.stats.pieces_copied += 1;
        }
        self.stats.bytes_copied += range.len() as u64;
        Ok(())
    }

    /// Generates records for the oldest pieces until `len` bytes fit (FIFO replacement).
    fn make_room(&mut self, cache: &mut ClientCache, len: usize) -> Result<()> {
        while !self.buffer.has_room(len) {
            self.evict_oldest(cache)?;
        }
        Ok(())
    }

    fn evict_oldest(&mut self, cache: &mut ClientCache) -> Result<()> {
        let (seq, entry) = self.buffer.oldest().expect("a full buffer has entries");
        if entry.live {
            self.stats.buffer_evictions += 1;
            self.generate(cache, seq)?;
        }
        self.buffer.pop_oldest();
        Ok(())
    }

    /// Generates the records of live entry `seq`, kills it and re-arms its piece.
    fn generate(&mut self, cache: &mut ClientCache, seq: EntrySeq) -> Result<()> {
        let entry = self.buffer.get(seq).expect("entry in the ring");
        let frame = cache.peek(entry.page).ok_or_else(|| {
            Error::InvalidArgument(format!(
                "page {} has a pre-image but left the client cache",
                entry.page
            ))
        })?;
        self.generate_in(cache, seq, frame)
    }

    /// `generate` for a page known to be in `frame` (the cache may already have given the
    /// frame to another page, when the page is being evicted).
    fn generate_in(
        &mut self,
        cache: &mut ClientCache,
        seq: EntrySeq,
        frame: FrameId,
    ) -> Result<()> {
        let entry = self.buffer.get(seq).expect("entry in the ring");
        debug_assert!(entry.live);
        let before = self.buffer.bytes(&entry);
        let now = cache.frame(frame);
        let at = entry.at as usize;
        let mut ranges = std::mem::take(&mut self.piece_ranges);
        self.generator.piece_ranges_cached(
            now,
            at,
            before,
            &mut self.frame_bounds[frame],
            cache.fill_number(frame),
            &mut ranges,
        );
        if self.generator != Generator::SubPageLog || entry.granule == Granule::Page {
            self.stats.bytes_compared += entry.len as u64;
        }
        let hint = match entry.granule {
            Granule::Object(slot) => Some(slot),
            _ => None,
        };
        // A whole-page piece names objects by a map of the page's objects before and after,
        // built once for the piece (one map for both when the structure did not change).
        let maps = (self.generator == Generator::ObjectRedo && entry.granule == Granule::Page)
            .then(|| ObjectMap::of_both(before, now));
        for range in ranges.drain(..) {
            let len = range.len();
            // Hosking's records name the object; bytes outside every object stay physical. A
            // whole-page piece may span a change of the page's structure: an object record
            // then only where the object lies in the same place before and after, since the
            // server finds it on its copy with the earlier records applied.
            let object = match &maps {
                Some((was, is)) => is.holding(range.clone()).filter(|found| {
                    was.as_ref()
                        .is_none_or(|was| was.holding(range.clone()).as_ref() == Some(found))
                }),
                None if self.generator == Generator::ObjectRedo => {
                    object_holding(now, range.clone(), hint)
                }
                None => None,
            };
            let bytes = match object {
                Some((slot, payload)) => {
                    let oid = Oid::new(self.volume, entry.page, slot);
                    let (offset, after) = ((range.start - payload.start) as u32, &now[range]);
                    match self.pending.last_mut() {
                        Some(RecordRun::Objects(run)) => run.push(oid, offset, after),
                        _ => {
                            let mut run = ObjectUpdates::new();
                            run.push(oid, offset, after);
                            self.pending.push(RecordRun::Objects(run));
                        }
                    }
                    OBJECT_REDO_RECORD_FIXED_BYTES + len
                }
                None => {
                    let before = &before[range.start - at..range.end - at];
                    let (offset, after) = (range.start as u32, &now[range]);
                    match self.pending.last_mut() {
                        Some(RecordRun::Pages(run)) => run.push(entry.page, offset, before, after),
                        _ => {
                            let mut run = PageUpdates::new();
                            run.push(entry.page, offset, before, after);
                            self.pending.push(RecordRun::Pages(run));
                        }
                    }
                    UPDATE_RECORD_FIXED_BYTES + 2 * len
                }
            };
            self.pending_bytes += bytes;
            self.stats.log_records += 1;
            self.stats.log_bytes += bytes as u64;
        }
        self.piece_ranges = ranges;
        self.buffer.kill(seq);
        if let Some(seqs) = self.by_page.get_mut(&entry.page) {
            seqs.retain(|s| *s != seq);
            if seqs.is_empty() {
                self.by_page.remove(&entry.page);
            }
        }
        self.rearm(cache, frame, entry.page, entry.granule)
    }

    /// After a piece's records were generated: its next write must copy it again.
    fn rearm(
        &mut self,
        cache: &mut ClientCache,
        frame: FrameId,
        page: PageId,
        granule: Granule,
    ) -> Result<()> {
        let track = &mut self.frames[frame];
        match granule {
            Granule::Page => {
                track.page_copied = false;
                if let Some(protection) = cache.protection_mut() {
                    protection.protect(frame)?;
                }
            }
            Granule::Units { first, count } => {
                if let Some(table) = track.units.as_mut() {
                    table[first as usize..(first + count) as usize].fill(0);
                }
            }
            Granule::Object(slot) => {
                self.remembered.remove(&(page, slot));
                if let Some(word) = track.marks.get_mut(slot as usize / 64) {
                    *word &= !(1u64 << (slot % 64));
                }
            }
        }
        Ok(())
    }

    /// Generates the records of every piece of `page` (before it is shipped).
    pub fn flush_page(&mut self, cache: &mut ClientCache, page: PageId) -> Result<()> {
        self.collect(cache)?;
        let seqs = self.by_page.get(&page).cloned().unwrap_or_default();
        for seq in seqs {
            self.generate(cache, seq)?;
        }
        debug_assert!(!self.by_page.contains_key(&page));
        Ok(())
    }

    /// Generates the records of every piece of `page`, which is leaving `frame` (the cache
    /// already gave the frame to the next page; its bytes are still the evicted page's).
    pub fn flush_evicted(
        &mut self,
        cache: &mut ClientCache,
        frame: FrameId,
        page: PageId,
    ) -> Result<()> {
        let seqs = self.by_page.get(&page).cloned().unwrap_or_default();
        for seq in seqs {
            self.generate_in(cache, seq, frame)?;
        }
        Ok(())
    }

    /// Written pages: the pages of `frames` written since the last scan become dirty (on
    /// the dirtied list, shipped whole) and are protected again.
    fn scan_written(
        &mut self,
        cache: &mut ClientCache,
        frames: std::ops::Range<FrameId>,
    ) -> Result<()> {
        let Some(arena) = cache.written_pages_mut() else {
            return Ok(());
        };
        for frame in arena.take_written(frames)? {
            if let Some(page) = cache.page_of(frame) {
                touch(&mut self.frames, &mut self.touched, frame).unlogged = true;
                self.dirtied.push(page);
                self.stats.pages_found_written += 1;
            }
        }
        Ok(())
    }

    /// Written pages: was the page leaving `frame` written since the last scan? (The cache
    /// gave the frame to the next page already; its bytes are still the evicted page's.)
    pub fn evicted_was_written(&mut self, cache: &mut ClientCache, frame: FrameId) -> Result<bool> {
        let Some(arena) = cache.written_pages_mut() else {
            return Ok(false);
        };
        let written = !arena.take_written(frame..frame + 1)?.is_empty();
        if written {
            touch(&mut self.frames, &mut self.touched, frame).unlogged = true;
            self.stats.pages_found_written += 1;
        }
        Ok(written)
    }

    /// Generates the records of every live piece (at commit), page by page and oldest first
    /// within a page, so a page's object bounds are read once for all its pieces; then runs
    /// the commit-time scans of the card and marking detectors.
    pub fn flush_all(&mut self, cache: &mut ClientCache) -> Result<()> {
        self.collect(cache)?;
        self.scan_written(cache, 0..cache.frames_used())?;
        let mut live: Vec<(PageId, EntrySeq)> = self
            .buffer
            .live()
            .map(|(seq, entry)| (entry.page, seq))
            .collect();
        live.sort_by_key(|&(page, _)| page); // stable: pieces of a page stay in order
        for (_, seq) in live {
            self.generate(cache, seq)?;
        }
        self.commit_scans(cache);
        Ok(())
    }

    /// Hosking's commit work that does not depend on what was written: cards scans the card
    /// table of every page it touched, object marking scans every cached object's mark.
    fn commit_scans(&mut self, cache: &ClientCache) {
        match self.detector {
            Detector::Cards { .. } => {
                for &frame in &self.touched {
                    if let Some(table) = self.frames[frame].units.as_mut() {
                        self.stats.cards_scanned += table.len() as u64;
                        table.fill(0);
                    }
                }
            }
            Detector::ObjectMarking => {
                for (_, frame) in cache.pages() {
                    let image = cache.frame(frame);
                    if page::kind(image) != Some(PageKind::Slotted) {
                        continue;
                    }
                    let marks = &mut self.frames[frame].marks;
                    for slot in slotted::live_slots(image) {
                        self.stats.objects_scanned += 1;
                        if let Some(word) = marks.get_mut(slot as usize / 64) {
                            *word &= !(1u64 << (slot % 64));
                        }
                    }
                }
            }
            _ => {}
        }
    }

    /// `frame` stops holding its page (dropped, or shipped and given up): its pieces are
    /// discarded without records and its detector state reset.
    pub fn forget_frame(
        &mut self,
        cache: &mut ClientCache,
        frame: FrameId,
        page: PageId,
    ) -> Result<()> {
        self.frame_bounds[frame].forget();
        self.collect(cache)?;
        if let Some(seqs) = self.by_page.remove(&page) {
            for seq in seqs {
                self.buffer.kill(seq);
            }
        }
        self.remembered.retain(|(p, _)| *p != page);
        // Still on `touched` if it was: keep saying so, so it is not listed twice.
        let listed = self.frames[frame].listed;
        self.frames[frame] = FrameTrack {
            listed,
            ..FrameTrack::default()
        };
        if let Some(protection) = cache.protection_mut() {
            protection.protect(frame)?;
        }
        if let Some(arena) = cache.written_pages_mut() {
            arena.take_written(frame..frame + 1)?; // protected again, the writes forgotten
        }
        Ok(())
    }

    /// The transaction ended (its records shipped, or it aborted): every frame is read-only
    /// and clean of detector state again, and the buffer is empty.
    pub fn end_transaction(&mut self, cache: &mut ClientCache) -> Result<()> {
        if let Some(protection) = cache.protection_mut() {
            let _ = protection.take_capture();
            protection.protect_all()?;
        }
        let used = cache.frames_used();
        if let Some(arena) = cache.written_pages_mut() {
            // After an abort, pages written since the commit scan: protected again, forgotten.
            arena.take_written(0..used)?;
        }
        self.buffer.clear();
        self.by_page.clear();
        self.remembered.clear();
        for frame in self.touched.drain(..) {
            self.frames[frame] = FrameTrack::default();
        }
        self.pending.clear();
        self.pending_bytes = 0;
        self.dirtied.clear();
        Ok(())
    }
}

/// Are units `first..=last` all set in `table` (a byte per unit, nonzero once copied or
/// marked)? How many units a write spans varies from object to object (a 72-byte record spans
/// one 256-byte card or two), and a loop over them mispredicted its exit in hot loops: up to
/// eight are read as one word and tested with no branch on their number.
#[inline]
fn all_units_set(table: &[u8], first: usize, last: usize) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    debug_assert!(first <= last && last < table.len());
    let count = last - first + 1;
    if count <= 8 {
        if let Some(window) = table.get(first..first + 8) {
            let word = u64::from_le_bytes(window.try_into().expect("an 8-byte window"));
            // Bytes past the span count as set; then the span is set when no byte is zero.
            let word = word | u64::MAX.checked_shl(8 * count as u32).unwrap_or(0);
            return word.wrapping_sub(ONES) & !word & HIGHS == 0;
        }
    }
    table[first..=last].iter().all(|&unit| unit != 0)
}

/// Log records a client generated, a run of one kind: physical records (page, offset, before,
/// after) or, from Hosking's generator, object redo records (OID, offset in the object,
/// after). Runs come in generation order, and each is shipped in one call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordRun {
    Pages(PageUpdates),
    Objects(ObjectUpdates),
}

/// The object whose payload holds all of `range` on slotted `page`, as its slot and payload;
/// `hint` is tried first.
fn object_holding(
    page: &[u8],
    range: Range<usize>,
    hint: Option<SlotId>,
) -> Option<(SlotId, Range<usize>)> {
    if page::kind(page) != Some(PageKind::Slotted) {
        return None;
    }
    let holds = |slot: SlotId| {
        let record = slotted::record(page, slot).ok().flatten()?;
        let payload = record.payload();
        (payload.start <= range.start && range.end <= payload.end).then_some((slot, payload))
    };
    hint.and_then(holds)
        .or_else(|| slotted::live_slots(page).find_map(holds))
}

/// The objects of a slotted page by payload, for finding the object that holds a range.
struct ObjectMap(Vec<(Range<usize>, SlotId)>);

impl ObjectMap {
    fn of(page: &[u8]) -> ObjectMap {
        let mut objects = Vec::new();
        if page::kind(page) == Some(PageKind::Slotted) {
            for slot in slotted::live_slots(page) {
                if let Ok(Some(record)) = slotted::record(page, slot) {
                    objects.push((record.payload(), slot));
                }
            }
        }
        objects.sort_unstable_by_key(|(payload, _)| payload.start);
        ObjectMap(objects)
    }

    /// The maps of a page's earlier and current images: the earlier one `None` when it would
    /// equal the current one, because everything [`ObjectMap::of`] reads (the kind, the slot
    /// table, each header's length word) reads the same in both, as after updates in place.
    fn of_both(before: &[u8], now: &[u8]) -> (Option<ObjectMap>, ObjectMap) {
        let is = ObjectMap::of(now);
        if same_layout(before, now) {
            (None, is)
        } else {
            (Some(ObjectMap::of(before)), is)
        }
    }

    fn holding(&self, range: Range<usize>) -> Option<(SlotId, Range<usize>)> {
        let after = self
            .0
            .partition_point(|(payload, _)| payload.start <= range.start);
        let (payload, slot) = self.0.get(after.checked_sub(1)?)?;
        (range.end <= payload.end).then(|| (*slot, payload.clone()))
    }
}

/// Do two images of a page hold their objects in the same places, as far as
/// [`slotted::record`] can tell: the same kind, slot count and slot table, and the same
/// length word in every header a slot points to?
fn same_layout(before: &[u8], now: &[u8]) -> bool {
    if before.len() != now.len() || page::kind(before) != page::kind(now) {
        return false;
    }
    if page::kind(now) != Some(PageKind::Slotted) {
        return true; // no objects in either
    }
    let count = slotted::slot_count(now);
    if slotted::slot_count(before) != count {
        return false;
    }
    let table = slotted::SLOT_TABLE_AT
        ..(slotted::SLOT_TABLE_AT + slotted::SLOT_BYTES * count).min(now.len());
    if before[table.clone()] != now[table.clone()] {
        return false;
    }
    now[table].chunks_exact(slotted::SLOT_BYTES).all(|entry| {
        let length_word = u16::from_le_bytes([entry[0], entry[1]]) as usize + 4;
        match now.get(length_word..length_word + 4) {
            Some(word) => before[length_word..length_word + 4] == *word,
            None => true, // past the page: no record in either
        }
    })
}

/// Page protection: are as many frames writable as the arena allows?
fn protection_needs_room(cache: &ClientCache) -> bool {
    cache
        .protection()
        .is_some_and(|p| p.writable_frames() >= p.writable_frames_max())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lodestore_core::TypeId;
    use proptest::prelude::*;

    /// A generated record of either kind, borrowed from its run.
    enum TestRecord<'a> {
        Page(lodestore_protocol::PageUpdate<'a>),
        Object(lodestore_protocol::ObjectUpdate<'a>),
    }

    const PAGE: usize = 4096;
    const PAGES: usize = 3;
    const OBJECT_BYTES: usize = 200;

    #[test]
    fn counts_since_an_earlier_reading_are_the_differences() {
        let earlier = DetectionStats {
            traps: 2,
            pages_copied: 3,
            log_records: 10,
            log_bytes: 400,
            ..DetectionStats::default()
        };
        let later = DetectionStats {
            traps: 7,
            pages_copied: 3,
            pieces_copied: 5,
            log_records: 16,
            log_bytes: 1000,
            ..DetectionStats::default()
        };
        let since = later.since(&earlier);
        assert_eq!(
            since,
            DetectionStats {
                traps: 5,
                pages_copied: 0,
                pieces_copied: 5,
                log_records: 6,
                log_bytes: 600,
                ..DetectionStats::default()
            }
        );
        assert_eq!(later.since(&later), DetectionStats::default());
    }

    proptest! {
        /// The word-wide test of a write's units says what testing them one by one says, for
        /// any span, anywhere in tables of any size (a window past the end falls back).
        #[test]
        fn units_are_set_exactly_when_each_is(
            table in proptest::collection::vec(prop_oneof![1 => Just(0u8), 9 => Just(1u8)], 1..40),
            first in 0usize..40,
            count in 1usize..12,
        ) {
            let first = first % table.len();
            let last = (first + count - 1).min(table.len() - 1);
            let each = table[first..=last].iter().all(|&unit| unit != 0);
            prop_assert_eq!(all_units_set(&table, first, last), each);
        }
    }

    fn detectors() -> impl Strategy<Value = Detector> {
        prop_oneof![
            Just(Detector::PageProtection(FaultMechanism::Signal)),
            Just(Detector::PageProtection(FaultMechanism::Userfaultfd)),
            prop_oneof![Just(8usize), Just(16), Just(64)]
                .prop_map(|block_bytes| Detector::SubPageBlocks { block_bytes }),
            prop_oneof![Just(16usize), Just(256), Just(1024), Just(4096)]
                .prop_map(|card_bytes| Detector::Cards { card_bytes }),
            Just(Detector::RememberedSet),
            Just(Detector::ObjectMarking),
            Just(Detector::None),
            Just(Detector::WrittenPages),
        ]
    }

    fn generators() -> impl Strategy<Value = Generator> {
        prop_oneof![
            Just(Generator::PageDiff),
            Just(Generator::SubPageDiff),
            Just(Generator::SubPageLog),
            Just(Generator::WholePage),
            Just(Generator::ObjectRedo),
        ]
    }

    /// A write of the test: an object's bytes, or the page's structure (bytes anywhere).
    #[derive(Clone, Debug)]
    enum TestWrite {
        Object {
            page: usize,
            slot: u16,
            at: usize,
            len: usize,
            value: u8,
        },
        Structure {
            page: usize,
            at: usize,
            len: usize,
            value: u8,
        },
    }

    fn writes() -> impl Strategy<Value = Vec<TestWrite>> {
        let object = (0..PAGES, 0u16..8, 0..OBJECT_BYTES, 1usize..64, any::<u8>()).prop_map(
            |(page, slot, at, len, value)| TestWrite::Object {
                page,
                slot,
                at,
                len,
                value,
            },
        );
        let structure =
            (0..PAGES, 16..PAGE, 1usize..64, any::<u8>()).prop_map(|(page, at, len, value)| {
                TestWrite::Structure {
                    page,
                    at,
                    len,
                    value,
                }
            });
        proptest::collection::vec(prop_oneof![8 => object, 1 => structure], 1..60)
    }

    /// A slotted page of eight 200-byte objects.
    fn initial_page(number: usize) -> Vec<u8> {
        let mut page = vec![0u8; PAGE];
        slotted::init(&mut page, PageId(number as u32 + 10), 0);
        for slot in 0..8 {
            slotted::insert(&mut page, TypeId(1), OBJECT_BYTES, false);
            let payload = slotted::record(&page, slot).unwrap().unwrap().payload();
            page[payload].fill(slot as u8 * 3);
        }
        page
    }

    /// A page's bounds kept from one transaction are not taken for those of new contents of
    /// its frame (as a revalidation fetches when another client changed the page): where the
    /// page now has two objects, a block's changes on both sides of the bound between them
    /// make two records, though the kept bounds knew one object there.
    #[test]
    fn kept_bounds_are_not_taken_for_a_new_fill() {
        let detector = Detector::SubPageBlocks { block_bytes: 64 };
        let mut cache = ClientCache::new(PAGE, PAGES, detector.arena_kind()).unwrap();
        let mut tracker =
            WriteTracker::new(detector, Generator::SubPageDiff, 4 * PAGE, PAGE, PAGES, 0).unwrap();
        let page = PageId(10);
        let (frame, _) = cache.assign(page).unwrap();
        let with_objects = |sizes: &[usize]| {
            let mut image = vec![0u8; PAGE];
            slotted::init(&mut image, page, 0);
            for &len in sizes {
                slotted::insert(&mut image, TypeId(1), len, false).unwrap();
            }
            image
        };
        // Object 1 of 200 bytes, then in its place (records fill the page from its end)
        // object 1 of 92 bytes above object 2 of 96, the bound between them inside a block.
        cache
            .fill_mut(frame)
            .copy_from_slice(&with_objects(&[200, 200, 200, 200]));
        let object = |cache: &ClientCache, slot: SlotId| {
            slotted::record(cache.frame(frame), slot)
                .unwrap()
                .unwrap()
                .payload()
        };
        let write = |tracker: &mut WriteTracker, cache: &mut ClientCache, slot: SlotId, at| {
            let object = object(cache, slot);
            let range = object.start + at..object.start + at + 1;
            let write = Write::Object {
                slot,
                object,
                range: range.clone(),
            };
            tracker.before_write(cache, frame, page, write).unwrap();
            cache.frame_mut(frame)[range]
                .iter_mut()
                .for_each(|byte| *byte ^= 1);
        };
        // Two neighbouring fields of object 1: the page's bounds are read, and kept.
        write(&mut tracker, &mut cache, 1, 8);
        write(&mut tracker, &mut cache, 1, 16);
        tracker.flush_all(&mut cache).unwrap();
        tracker.take_pending();
        tracker.end_transaction(&mut cache).unwrap();
        cache
            .fill_mut(frame)
            .copy_from_slice(&with_objects(&[200, 92, 96, 200]));
        let bound = object(&cache, 2).end;
        assert_eq!(
            object(&cache, 1).start,
            bound + 8,
            "object 1 lies right above object 2"
        );
        // The last byte of object 2 and the first of object 1: 9 bytes apart, one block.
        assert_eq!((bound - 1) / 64, (bound + 8) / 64);
        write(&mut tracker, &mut cache, 2, 95);
        write(&mut tracker, &mut cache, 1, 0);
        tracker.flush_all(&mut cache).unwrap();
        let records: Vec<Range<usize>> = tracker
            .take_pending()
            .iter()
            .flat_map(|run| match run {
                RecordRun::Pages(records) => records
                    .iter()
                    .map(|r| r.offset as usize..r.offset as usize + r.after.len())
                    .collect(),
                RecordRun::Objects(_) => Vec::new(),
            })
            .collect();
        assert_eq!(records, vec![bound - 1..bound, bound + 8..bound + 9]);
        tracker.end_transaction(&mut cache).unwrap();
    }

    #[test]
    fn updates_in_place_share_one_object_map() {
        let before = initial_page(0);
        let mut now = before.clone();
        let payload = slotted::record(&now, 3).unwrap().unwrap().payload();
        now[payload].fill(0xEE);
        let (was, is) = ObjectMap::of_both(&before, &now);
        assert!(was.is_none(), "the layout did not change");
        assert_eq!(is.0.len(), 8);
        slotted::resize(&mut now, 5, 8);
        assert!(
            ObjectMap::of_both(&before, &now).0.is_some(),
            "a record was resized"
        );
    }

    proptest! {
        /// The earlier image's map is left out only when it equals the current one.
        #[test]
        fn one_object_map_serves_both_images_only_when_they_agree(
            remove in proptest::option::of(0u16..8),
            edits in proptest::collection::vec((16..PAGE, 1usize..16, any::<u8>()), 0..6),
        ) {
            let before = initial_page(0);
            let mut now = before.clone();
            if let Some(slot) = remove {
                slotted::remove(&mut now, slot);
            }
            for (at, len, value) in edits {
                let end = (at + len).min(PAGE);
                now[at..end].fill(value);
            }
            let (was, is) = ObjectMap::of_both(&before, &now);
            prop_assert_eq!(&is.0, &ObjectMap::of(&now).0);
            let was = was.unwrap_or(is);
            prop_assert_eq!(was.0, ObjectMap::of(&before).0);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        /// For every detector and generator: replaying the generated records on the
        /// pre-images (each record's before bytes matching what it replaces, as the server
        /// checks), plus the pages shipped whole, yields the after-images; in each of several
        /// transactions, the after-images of one the pre-images of the next (what the tracker
        /// keeps of a page from one transaction to the next must not lead it astray).
        #[test]
        fn replaying_generated_records_on_the_pre_images_yields_the_after_images(
            detector in detectors(),
            generator in generators(),
            buffer_pages in 1usize..3,
            transactions in proptest::collection::vec(writes(), 1..3),
        ) {
            let mut cache = ClientCache::new(PAGE, PAGES, detector.arena_kind()).unwrap();
            let mut tracker =
                WriteTracker::new(detector, generator, buffer_pages * PAGE, PAGE, PAGES, 0).unwrap();
            let mut frames = Vec::new();
            let mut before = Vec::new();
            for number in 0..PAGES {
                let (frame, _) = cache.assign(PageId(number as u32 + 10)).unwrap();
                let image = initial_page(number);
                cache.fill_mut(frame).copy_from_slice(&image);
                frames.push(frame);
                before.push(image);
            }
            let initial = before.clone();
            for writes in &transactions {
                for write in writes {
                    let (page, range, value, barrier) = match *write {
                        TestWrite::Object { page, slot, at, len, value } => {
                            // Structure writes may garble the slot table: objects are where they
                            // were at the start.
                            let object =
                                slotted::record(&initial[page], slot).unwrap().unwrap().payload();
                            let start = object.start + at;
                            let end = (start + len).min(object.end);
                            let write = Write::Object { slot, object, range: start..end };
                            (page, start..end, value, write)
                        }
                        TestWrite::Structure { page, at, len, value } => {
                            (page, at..(at + len).min(PAGE), value, Write::Structure)
                        }
                    };
                    let id = PageId(page as u32 + 10);
                    tracker.before_write(&mut cache, frames[page], id, barrier).unwrap();
                    cache.frame_mut(frames[page])[range].fill(value);
                }
                tracker.flush_all(&mut cache).unwrap();
                let mut replayed = before.clone();
                let runs = tracker.take_pending();
                // Runs alternate in kind: each call ships as much as one run can hold.
                let kind = std::mem::discriminant::<RecordRun>;
                prop_assert!(runs.windows(2).all(|pair| kind(&pair[0]) != kind(&pair[1])));
                let records = runs.iter().flat_map(|run| -> Vec<TestRecord<'_>> {
                    match run {
                        RecordRun::Pages(records) => records.iter().map(TestRecord::Page).collect(),
                        RecordRun::Objects(records) => {
                            records.iter().map(TestRecord::Object).collect()
                        }
                    }
                });
                for record in records {
                    match record {
                        TestRecord::Page(record) => {
                            let image = &mut replayed[record.page.0 as usize - 10];
                            let range =
                                record.offset as usize..record.offset as usize + record.after.len();
                            prop_assert_eq!(&image[range.clone()], record.before, "before bytes");
                            image[range].copy_from_slice(record.after);
                        }
                        TestRecord::Object(record) => {
                            // As the server does: the object on the page as it is now.
                            let image = &mut replayed[record.oid.page().0 as usize - 10];
                            let payload = slotted::record(image, record.oid.slot())
                                .unwrap()
                                .expect("the record's object exists")
                                .payload();
                            let start = payload.start + record.offset as usize;
                            let end = start + record.after.len();
                            prop_assert!(end <= payload.end, "inside its object");
                            image[start..end].copy_from_slice(record.after);
                        }
                    }
                }
                for (page, frame) in frames.iter().enumerate() {
                    let after = cache.frame(*frame);
                    if tracker.is_unlogged(*frame) {
                        // Shipped whole: the server diffs it.
                        replayed[page].copy_from_slice(after);
                    }
                    prop_assert_eq!(&replayed[page][16..], &after[16..], "page {}", page);
                    prop_assert_eq!(&replayed[page][4..8], &after[4..8], "page {}", page);
                }
                tracker.end_transaction(&mut cache).unwrap();
                for (page, frame) in frames.iter().enumerate() {
                    before[page].copy_from_slice(cache.frame(*frame));
                }
            }
        }
    }
}
