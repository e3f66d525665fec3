//! The log manager: appends records to an in-memory buffer, makes them durable with group
//! commit, and reads them back by LSN.
//!
//! Group commit: a committer appends its commit record and calls `flush(lsn)`. If no flush is
//! running it becomes the leader: it writes everything buffered so far in one write (per
//! segment) and syncs once, while later committers keep appending and wait. When its sync
//! returns it wakes exactly the waiters that round covered (each parked thread is unparked on
//! its own, so nobody wakes up only to sleep again) and hands leadership to one waiter still
//! uncovered. Nobody waits for a timer.
//!
//! At most one write to the log is ever unsynced: the flusher syncs a segment before it writes
//! the next one. So a crash can only tear the last write, which is what the reader relies on to
//! tell a torn tail from damage.

use crate::anchor::Anchor;
use crate::reader::{LogEnd, ScanBuffer, Segments, PREFETCH_SEGMENTS};
use crate::record::{self, Body, Invalid, Record, RecordBody, RecordFormat, RECORD_HEADER_BYTES};
use crate::segment::{self, SEGMENT_BYTES_MAX, SEGMENT_BYTES_MIN, SEGMENT_HEADER_BYTES};
use lodestore_core::{Error, Lsn, Result, TxnId};
use lodestore_storage::{FileSystem, OpenMode, Storage};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Log settings.
#[derive(Clone, Debug)]
pub struct LogOptions {
    /// LSN span of one segment file.
    pub segment_bytes: u64,
    /// Buffered bytes past which an appender flushes before going on.
    pub buffer_bytes_max: usize,
    /// Old segments kept for reuse instead of deleted.
    pub spare_segments_max: usize,
    /// Largest page any record may describe (bounds decoding).
    pub page_size_max: usize,
    /// How a log created with these options frames its records. A log opened keeps the
    /// format its segments record (and its `options()` say so).
    pub record_format: RecordFormat,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            segment_bytes: 1 << 20,
            buffer_bytes_max: 4 << 20,
            spare_segments_max: 2,
            page_size_max: 65536,
            record_format: RecordFormat::Aligned,
        }
    }
}

/// Counters of the log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LogStats {
    pub records: u64,
    pub bytes_appended: u64,
    pub flushes: u64,
    pub bytes_flushed: u64,
    pub segments_created: u64,
    pub segments_reused: u64,
    /// Time flush leaders spent before their rounds' writes, gathering committers or waiting
    /// out a commit delay, in nanoseconds, summed over rounds.
    pub gather_ns: u64,
    /// Time the rounds' writes and syncs took, in nanoseconds, summed over rounds. With
    /// `gather_ns` and the rounds' rate it splits a round: gathering, I/O, and the rest
    /// (committers coming back between rounds).
    pub flush_ns: u64,
}

impl LogStats {
    /// The counters of two logs together (a server's log and its method's streams).
    pub fn add(&mut self, other: &LogStats) {
        self.records += other.records;
        self.bytes_appended += other.bytes_appended;
        self.flushes += other.flushes;
        self.bytes_flushed += other.bytes_flushed;
        self.segments_created += other.segments_created;
        self.segments_reused += other.segments_reused;
        self.gather_ns += other.gather_ns;
        self.flush_ns += other.flush_ns;
    }
}

pub struct Log {
    shared: Arc<Shared>,
}

/// What the log and its flusher thread share.
struct Shared {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    /// Its `record_format` is the one of this log's segments.
    options: LogOptions,
    inner: Mutex<Inner>,
    /// Written only by the flush leader when it opens a new segment.
    anchor: Mutex<Anchor>,
    /// The segment the flush leader writes last, and how far into it zeros or records are
    /// known to have been written (see [`segment::ZEROS_AHEAD_BYTES`]). Only the flush leader
    /// uses it.
    zeroed: Mutex<(u64, u64)>,
    /// `Inner::durable`, readable without the lock by committers waiting for a round.
    durable_seen: AtomicU64,
    /// `Inner::flushing`, likewise: a waiter stops spinning when the leader has gone, to lead
    /// the next round itself.
    flushing_seen: AtomicBool,
    /// How long a round (write and sync) takes, nanoseconds, a moving average: how long a
    /// waiter spins.
    round_ns: AtomicU64,
    /// How many committers are in `Inner::waiters`: a gathering leader stops when the last
    /// round's number are back.
    waiting: AtomicU64,
}

struct Inner {
    /// Bytes of LSNs `buffer_start..end` not yet durable: first those the flush leader is
    /// writing (`in_flight`), then those appended since (`buffer`). The leader takes the buffer
    /// whole instead of copying it, so a large commit's records are not copied once more.
    in_flight: Arc<Vec<u8>>,
    buffer: Vec<u8>,
    /// An emptied buffer of an earlier round, kept for its capacity (up to
    /// [`SPARE_BUFFER_BYTES_MAX`]) so appends after a round do not grow a new one.
    spare: Vec<u8>,
    buffer_start: u64,
    end: u64,
    durable: u64,
    flushing: bool,
    /// Committers waiting for durability up to their target, woken one by one when a round
    /// covers them (waking them all would cost a futile context switch each).
    waiters: Vec<(u64, std::thread::Thread)>,
    /// Commits the last round made durable (its leader's and its waiters'): when more than
    /// one, the next leader gathers before it writes.
    last_carried: usize,
    failed: Option<String>,
    segments: BTreeMap<u64, Arc<dyn Storage>>,
    spares: Vec<PathBuf>,
    stats: LogStats,
    /// The opening scan's buffer, with the last segment it read, for the scan that follows
    /// it (a restart's). Taken by that scan, and freed with it; its contents are used only
    /// while the log still ends at `scan_buffer_end` (nothing appended since).
    scan_buffer: ScanBuffer,
    scan_buffer_end: u64,
}

/// The longest a committer spins for a round before it parks. A committer waits for the round
/// in flight and then for its own, about two rounds: it spins for that long when two rounds fit
/// in this bound (a fast disk), and parks at once on a disk so slow that a wake-up is cheap
/// beside its sync.
const WAIT_SPIN_MAX: Duration = Duration::from_millis(1);

/// The longest a leader gathers. Committers that one round woke all come back at about the
/// same time, a little after the next round has started, and wait for the round after it: two
/// cohorts take turns and each commit waits about two rounds (two committing threads
/// alternated, one commit per sync). So, when the last round carried more than one commit
/// and no commit delay is set, the leader first spins, yielding its CPU, until as many
/// committers wait as the last round carried or half a round (the moving average) has passed,
/// which lets the woken cohort into its round; when half a round is longer than this bound (a
/// slow disk, whose rounds gather many commits anyway) it does not gather. A committer alone,
/// or one at a time (transactions serialised on a lock held to their commit), never waits.
const GATHER_MAX: Duration = Duration::from_micros(500);

/// Largest emptied buffer kept for the next round; a larger one (after a very large commit)
/// is given back to the allocator.
const SPARE_BUFFER_BYTES_MAX: usize = 16 << 20;

impl Log {
    /// Creates an empty log in `dir`. The first record will get LSN `segment_bytes`.
    pub fn create(fs: Arc<dyn FileSystem>, dir: &Path, options: LogOptions) -> Result<Log> {
        check_options(&options)?;
        fs.create_dir_all(dir)?;
        let format = options.record_format;
        let first = segment::create(fs.as_ref(), dir, 1, options.segment_bytes, format)?;
        let anchor = Anchor::create(fs.as_ref(), dir, 1)?;
        let start = options.segment_bytes;
        let mut segments = BTreeMap::new();
        segments.insert(1, first);
        Ok(Log::with(
            fs,
            dir,
            options,
            anchor,
            segments,
            Vec::new(),
            start,
        ))
    }

    /// Opens the log in `dir` and finds its end by scanning from `from` (the last checkpoint).
    pub fn open(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        options: LogOptions,
        from: Lsn,
    ) -> Result<(Log, LogEnd)> {
        Log::open_visiting(fs, dir, options, from, |_| Ok(()))
    }

    /// [`Log::open`], handing `visit` every valid record from `from` to the end as the opening
    /// scan finds it, so a recovery that needs them reads the log once.
    pub fn open_visiting(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        options: LogOptions,
        from: Lsn,
        visit: impl FnMut(Record) -> Result<()>,
    ) -> Result<(Log, LogEnd)> {
        Log::open_scanning(fs, dir, options, from, Some(from), |segments, buffer| {
            segments.scan_into(from, buffer, visit)
        })
    }

    /// [`Log::open`] for a caller that scans the whole log from `from` itself right after (a
    /// restart): the end is found from the start of the newest segment that begins with a
    /// valid record, since a crash damages only the last write. Damage further back is not
    /// looked for here; the caller's scan reports it as [`Log::open`] would.
    pub fn open_at_end(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        options: LogOptions,
        from: Lsn,
    ) -> Result<(Log, LogEnd)> {
        Log::open_scanning(fs, dir, options, from, None, |segments, buffer| {
            segments.find_end(from, buffer)
        })
    }

    /// Opens the segments of the log in `dir` (checking that none is missing from the one
    /// holding `from` on) and finds the end with `find_end`, which reads every segment from
    /// `scan_from` on when that is given.
    fn open_scanning(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        options: LogOptions,
        from: Lsn,
        scan_from: Option<Lsn>,
        find_end: impl FnOnce(&Segments<'_>, &mut ScanBuffer) -> Result<LogEnd>,
    ) -> Result<(Log, LogEnd)> {
        check_options(&options)?;
        if !fs.is_dir(dir) {
            return Err(Error::CorruptLog {
                path: dir.to_path_buf(),
                offset: 0,
                reason: "the log folder is missing".into(),
            });
        }
        let mut found = Vec::new();
        let mut spares = Vec::new();
        for path in fs.list(dir)? {
            if let Some(index) = segment::segment_index(&path) {
                found.push((index, path));
            } else if segment::spare_index(&path).is_some() {
                spares.push(path);
            } else if path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("creating-"))
            {
                fs.remove(&path)?;
            }
        }
        let (segments, formats) = open_segment_files(
            fs.as_ref(),
            found,
            OpenMode::Existing,
            options.segment_bytes,
            scan_from,
        )?;
        let anchor = Anchor::open(fs.as_ref(), dir)?;
        let indices: Vec<u64> = segments.keys().copied().collect();
        let highest_present = indices.last().copied().unwrap_or(0);
        if highest_present < anchor.highest_segment() {
            let missing = (highest_present + 1).max(from.0 / options.segment_bytes);
            return Err(Error::CorruptLog {
                path: segment::segment_path(dir, missing),
                offset: 0,
                reason: format!(
                    "segment {missing} is missing: the log anchor records that segments up to {} \
                     were opened, and records in them may be lost",
                    anchor.highest_segment()
                ),
            });
        }
        for pair in indices.windows(2) {
            if pair[1] != pair[0] + 1 {
                return Err(Error::CorruptLog {
                    path: segment::segment_path(dir, pair[0] + 1),
                    offset: 0,
                    reason: format!(
                        "segment {} is missing between segments {} and {}",
                        pair[0] + 1,
                        pair[0],
                        pair[1]
                    ),
                });
            }
        }
        let first_needed = from.0 / options.segment_bytes;
        if !segments.contains_key(&first_needed) {
            return Err(Error::CorruptLog {
                path: segment::segment_path(dir, first_needed),
                offset: 0,
                reason: format!(
                    "segment {first_needed} is missing: it holds LSN {from}, the last checkpoint, \
                     where recovery must start"
                ),
            });
        }
        let format = one_format(dir, &formats)?.unwrap_or(options.record_format);
        let options = LogOptions {
            record_format: format,
            ..options
        };
        let mut buffer = ScanBuffer::default();
        let end = find_end(
            &Segments {
                files: &segments,
                segment_bytes: options.segment_bytes,
                page_size_max: options.page_size_max,
                format,
            },
            &mut buffer,
        )?;
        let log = Log::with(fs, dir, options, anchor, segments, spares, end.end.0);
        log.lock().scan_buffer = buffer;
        Ok((log, end))
    }

    /// Visits every valid record of the log in `dir` from `from` to its end without opening it
    /// for writing (inspection tools): segment files are opened read-only and their headers
    /// checked; the anchor is not read.
    pub fn scan_read_only(
        fs: &dyn FileSystem,
        dir: &Path,
        options: &LogOptions,
        from: Lsn,
        visit: impl FnMut(Record) -> Result<()>,
    ) -> Result<LogEnd> {
        check_options(options)?;
        let found = fs
            .list(dir)?
            .into_iter()
            .filter_map(|path| segment::segment_index(&path).map(|index| (index, path)))
            .collect();
        let (segments, formats) = open_segment_files(
            fs,
            found,
            OpenMode::ReadOnly,
            options.segment_bytes,
            Some(from),
        )?;
        Segments {
            files: &segments,
            segment_bytes: options.segment_bytes,
            page_size_max: options.page_size_max,
            format: one_format(dir, &formats)?.unwrap_or(options.record_format),
        }
        .scan(from, visit)
    }

    fn with(
        fs: Arc<dyn FileSystem>,
        dir: &Path,
        options: LogOptions,
        anchor: Anchor,
        segments: BTreeMap<u64, Arc<dyn Storage>>,
        spares: Vec<PathBuf>,
        end: u64,
    ) -> Log {
        let shared = Arc::new(Shared {
            fs,
            dir: dir.to_path_buf(),
            options,
            anchor: Mutex::new(anchor),
            // Nothing known: the first write fills zeros ahead of itself.
            zeroed: Mutex::new((0, 0)),
            durable_seen: AtomicU64::new(end),
            flushing_seen: AtomicBool::new(false),
            round_ns: AtomicU64::new(0),
            waiting: AtomicU64::new(0),
            inner: Mutex::new(Inner {
                in_flight: Arc::default(),
                buffer: Vec::new(),
                spare: Vec::new(),
                buffer_start: end,
                end,
                durable: end,
                flushing: false,
                waiters: Vec::new(),
                last_carried: 0,
                failed: None,
                segments,
                spares,
                stats: LogStats::default(),
                scan_buffer: ScanBuffer::default(),
                scan_buffer_end: end,
            }),
        });
        Log { shared }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.shared.lock()
    }

    /// The log's folder.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    pub fn options(&self) -> &LogOptions {
        &self.shared.options
    }

    /// The LSN the next record gets.
    pub fn end_lsn(&self) -> Lsn {
        Lsn(self.lock().end)
    }

    /// Every record before this LSN is durable.
    pub fn durable_lsn(&self) -> Lsn {
        Lsn(self.lock().durable)
    }

    pub fn stats(&self) -> LogStats {
        self.lock().stats
    }

    /// Appends a record and returns its LSN. It is durable only after `flush` covers it.
    pub fn append(
        &self,
        txn: Option<TxnId>,
        prev: Lsn,
        body: &(impl Body + ?Sized),
    ) -> Result<Lsn> {
        let len = self.shared.options.record_format.encoded_len_max(body) as u64;
        let size = self.shared.options.segment_bytes;
        assert!(
            len <= size / 2,
            "record of {len} bytes is too large for the log"
        );
        let (lsn, buffered) = {
            let mut inner = self.lock();
            if let Some(reason) = &inner.failed {
                return Err(self.shared.failed_error(reason));
            }
            let lsn = inner.push(self.shared.options.record_format, size, txn, prev, body);
            (lsn, inner.buffer.len())
        };
        if buffered > self.shared.options.buffer_bytes_max {
            self.flush(lsn)?;
        }
        Ok(lsn)
    }

    /// Returns when every record up to and including the one at `upto` is durable.
    pub fn flush(&self, upto: Lsn) -> Result<()> {
        self.flush_after(upto, Duration::ZERO)
    }

    /// [`Log::flush`], where a caller that becomes the flush leader first waits `delay`
    /// (without the log's lock), so that commits arriving meanwhile share its sync: the
    /// adaptive commit delay. Followers never wait for it on their own. Without a delay, a
    /// leader whose last round carried more than one commit gathers first, for half a round
    /// at most (see `GATHER_MAX` in the source).
    pub fn flush_after(&self, upto: Lsn, delay: Duration) -> Result<()> {
        let shared = &self.shared;
        let mut inner = self.lock();
        let target = (upto.0 + 1).min(inner.end);
        loop {
            if let Some(reason) = &inner.failed {
                return Err(shared.failed_error(reason));
            }
            if inner.durable >= target {
                return Ok(());
            }
            if inner.flushing {
                // A waiter that stopped spinning when a leader left may find a new leader and
                // wait again: once in the list is enough.
                let me = std::thread::current();
                if !inner.waiters.iter().any(|(_, t)| t.id() == me.id()) {
                    inner.waiters.push((target, me));
                    shared
                        .waiting
                        .store(inner.waiters.len() as u64, Ordering::Relaxed);
                }
                drop(inner);
                shared.await_round(target);
                inner = self.lock();
                continue;
            }
            inner.flushing = true;
            shared.flushing_seen.store(true, Ordering::Relaxed);
            if !delay.is_zero() {
                drop(inner);
                let start = Instant::now();
                std::thread::sleep(delay);
                inner = self.lock();
                inner.stats.gather_ns += start.elapsed().as_nanos() as u64;
            } else if inner.last_carried >= 2 {
                // The committers the last round woke are coming back: wait for as many as it
                // carried, for half a round at most, so they join this round instead of the
                // next (see `GATHER_MAX`).
                let gather = Duration::from_nanos(shared.round_ns.load(Ordering::Relaxed) / 2);
                if gather <= GATHER_MAX {
                    let expected = inner.last_carried as u64;
                    drop(inner);
                    let start = Instant::now();
                    while start.elapsed() < gather
                        && shared.waiting.load(Ordering::Relaxed) + 1 < expected
                    {
                        std::thread::yield_now();
                    }
                    inner = self.lock();
                    inner.stats.gather_ns += start.elapsed().as_nanos() as u64;
                }
            }
            // Woken after the lock is released: a thread woken while the leader still holds
            // it would only block on the lock and need waking a second time.
            let mut wake = Vec::new();
            while inner.failed.is_none() && inner.durable < target {
                inner = shared.flush_round(inner, &mut wake);
            }
            inner.flushing = false;
            shared.flushing_seen.store(false, Ordering::Release);
            // Anyone still waiting needs a new leader: wake one (or all, if the log failed).
            if inner.failed.is_some() {
                wake.extend(inner.waiters.drain(..).map(|(_, thread)| thread));
            } else if let Some((_, thread)) = inner.waiters.pop() {
                wake.push(thread);
            }
            shared
                .waiting
                .store(inner.waiters.len() as u64, Ordering::Relaxed);
            drop(inner);
            for thread in wake {
                thread.unpark();
            }
            inner = self.lock();
        }
    }

    /// Makes everything appended so far durable.
    pub fn flush_all(&self) -> Result<()> {
        let end = self.end_lsn();
        if end.0 == 0 {
            return Ok(());
        }
        self.flush(Lsn(end.0 - 1))
    }
    /// Reads the record at `lsn` (durable or still buffered).
    pub fn read(&self, lsn: Lsn) -> Result<Record> {
        let page_size_max = self.shared.options.page_size_max;
        let size = self.shared.options.segment_bytes;
        let file = {
            let inner = self.lock();
            if lsn.0 >= inner.end {
                return Err(Error::InvalidArgument(format!(
                    "LSN {lsn} is past the end of the log ({})",
                    inner.end
                )));
            }
            if lsn.0 >= inner.buffer_start {
                let at = (lsn.0 - inner.buffer_start) as usize;
                // A batch ends with its flush mark, so no record straddles the two.
                let flying = inner.in_flight.len();
                let bytes = if at < flying {
                    &inner.in_flight[at..]
                } else {
                    &inner.buffer[at - flying..]
                };
                return decode_at(bytes, lsn, page_size_max).map_err(|reason| Error::CorruptLog {
                    path: self.shared.dir.clone(),
                    offset: lsn.0,
                    reason: format!("buffered record: {reason}"),
                });
            }
            inner.segments.get(&(lsn.0 / size)).cloned()
        };
        let file = file.ok_or_else(|| Error::CorruptLog {
            path: segment::segment_path(&self.shared.dir, lsn.0 / size),
            offset: 0,
            reason: format!("segment holding LSN {lsn} is missing"),
        })?;
        let offset = SEGMENT_HEADER_BYTES + lsn.0 % size;
        let room = (size - lsn.0 % size) as usize;
        // Enough for any header (a compact record near a segment's end may be shorter).
        let mut header = [0u8; RECORD_HEADER_BYTES];
        let header = &mut header[..room.min(RECORD_HEADER_BYTES)];
        file.read_at(offset, header)?;
        let corrupt = |reason: String| Error::CorruptLog {
            path: file.path().to_path_buf(),
            offset,
            reason,
        };
        let len = match record::header(header, lsn, room) {
            Ok(h) => h.len,
            Err(e) => return Err(corrupt(describe(e))),
        };
        let mut bytes = vec![0u8; len];
        file.read_at(offset, &mut bytes)?;
        record::decode(&bytes, lsn, page_size_max).map_err(|e| corrupt(describe(e)))
    }

    /// Visits every durable record from `from` to the end of the log.
    pub fn scan(&self, from: Lsn, visit: impl FnMut(Record) -> Result<()>) -> Result<LogEnd> {
        self.flush_all()?;
        let (segments, mut buffer) = {
            let mut inner = self.lock();
            let mut buffer = std::mem::take(&mut inner.scan_buffer);
            if inner.end != inner.scan_buffer_end {
                buffer.forget_contents();
            }
            (inner.segments.clone(), buffer)
        };
        Segments {
            files: &segments,
            segment_bytes: self.shared.options.segment_bytes,
            page_size_max: self.shared.options.page_size_max,
            format: self.shared.options.record_format,
        }
        .scan_into(from, &mut buffer, visit)
    }

    /// Deletes the spare segments (a closed store needs none; a writer creates segments as it
    /// needs them).
    pub fn remove_spares(&self) -> Result<()> {
        let spares = std::mem::take(&mut self.lock().spares);
        for spare in spares {
            self.shared.fs.remove(&spare)?;
        }
        Ok(())
    }

    /// Segments wholly before `lsn` are no longer needed: keep a few as spares, delete the rest.
    pub fn recycle_before(&self, lsn: Lsn) -> Result<usize> {
        let size = self.shared.options.segment_bytes;
        let old: Vec<u64> = {
            let inner = self.lock();
            inner
                .segments
                .keys()
                .copied()
                .filter(|&i| (i + 1) * size <= lsn.0)
                .collect()
        };
        for &index in &old {
            let path = segment::segment_path(&self.shared.dir, index);
            let keep = self.lock().spares.len() < self.shared.options.spare_segments_max;
            self.lock().segments.remove(&index);
            if keep {
                let spare = segment::spare_path(&self.shared.dir, index);
                self.shared.fs.rename(&path, &spare)?;
                self.lock().spares.push(spare);
            } else {
                self.shared.fs.remove(&path)?;
            }
        }
        Ok(old.len())
    }

    /// Number of segment files in use.
    pub fn segment_count(&self) -> usize {
        self.lock().segments.len()
    }
}

impl Inner {
    /// Encodes a record at the end of the buffer and returns its LSN. Records never span
    /// segments: the rest of a segment too small for the record is padded.
    fn push(
        &mut self,
        format: RecordFormat,
        segment_bytes: u64,
        txn: Option<TxnId>,
        prev: Lsn,
        body: &(impl Body + ?Sized),
    ) -> Lsn {
        let mut len = format.encoded_len(Lsn(self.end), prev, txn, body) as u64;
        let room = segment_bytes - self.end % segment_bytes;
        if room < len {
            let at = self.end;
            if room >= format.smallest_record() as u64 {
                let mut skip = Vec::new();
                format.encode(Lsn(at), Lsn(0), None, &RecordBody::Skip, &mut skip);
                skip.resize(room as usize, 0);
                self.buffer.extend_from_slice(&skip);
            } else {
                let padded = self.buffer.len() + room as usize;
                self.buffer.resize(padded, 0);
            }
            self.end += room;
            // A compact record's length depends on its position (the distance back).
            len = format.encoded_len(Lsn(self.end), prev, txn, body) as u64;
        }
        let lsn = Lsn(self.end);
        let before = self.buffer.len();
        format.encode(lsn, prev, txn, body, &mut self.buffer);
        debug_assert_eq!((self.buffer.len() - before) as u64, len);
        self.end += len;
        self.stats.records += 1;
        self.stats.bytes_appended += len;
        lsn
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One round of the leader: write out the buffer and sync it, without holding the lock
    /// during the I/O; adds the waiters it covered to `wake`, for the leader to wake once it
    /// has let go of the lock.
    fn flush_round<'a>(
        &'a self,
        mut inner: MutexGuard<'a, Inner>,
        wake: &mut Vec<std::thread::Thread>,
    ) -> MutexGuard<'a, Inner> {
        // The batch ends with a mark, so damage to its last real record is followed by a valid
        // record: the reader then reports it instead of taking it for a torn tail.
        inner.push(
            self.options.record_format,
            self.options.segment_bytes,
            None,
            Lsn(0),
            &RecordBody::FlushMark,
        );
        let start = inner.buffer_start;
        debug_assert!(inner.in_flight.is_empty(), "one flush round at a time");
        let fresh = std::mem::take(&mut inner.spare);
        let bytes = Arc::new(std::mem::replace(&mut inner.buffer, fresh));
        inner.in_flight = Arc::clone(&bytes);
        drop(inner);
        let began = Instant::now();
        let result = self.write_out(start, &bytes);
        let took = began.elapsed().as_nanos() as u64;
        let average = self.round_ns.load(Ordering::Relaxed);
        // Only the leader writes it: a moving average over about eight rounds.
        self.round_ns.store(
            if average == 0 {
                took
            } else {
                (average * 7 + took) / 8
            },
            Ordering::Relaxed,
        );
        inner = self.lock();
        inner.in_flight = Arc::default();
        // Readers clone nothing out of the lock, so the round holds the only reference.
        let mut bytes = Arc::try_unwrap(bytes).unwrap_or_else(|shared| (*shared).clone());
        match result {
            Ok(()) => {
                inner.buffer_start += bytes.len() as u64;
                inner.durable = inner.buffer_start;
                self.durable_seen.store(inner.durable, Ordering::Release);
                inner.stats.flushes += 1;
                inner.stats.bytes_flushed += bytes.len() as u64;
                inner.stats.flush_ns += took;
                if bytes.capacity() <= SPARE_BUFFER_BYTES_MAX {
                    bytes.clear();
                    inner.spare = bytes;
                }
            }
            Err(e) => {
                // The log's state on disk is unknown now; refuse everything after. The bytes
                // stay buffered, in order, for reads of records not yet durable.
                bytes.extend_from_slice(&inner.buffer);
                inner.buffer = bytes;
                inner.failed = Some(e.to_string());
            }
        }
        let durable = inner.durable;
        let before = wake.len();
        let mut i = 0;
        while i < inner.waiters.len() {
            if inner.waiters[i].0 <= durable {
                wake.push(inner.waiters.swap_remove(i).1);
            } else {
                i += 1;
            }
        }
        inner.last_carried = wake.len() - before + 1;
        self.waiting
            .store(inner.waiters.len() as u64, Ordering::Relaxed);
        inner
    }

    /// Waits for the leader's round to make `target` durable, or for the leader to leave (the
    /// waiter may have to lead the next round): first by yielding the CPU for about two rounds
    /// (see [`WAIT_SPIN_MAX`]; a parked thread costs the leader a wake-up, and on a virtual
    /// machine an idle CPU takes tens of microseconds to come back), then parked. The leader
    /// unparks every waiter it covers either way; a waiter not yet parked only keeps the token
    /// for its next park, which returns at once, and the caller checks again under the lock.
    fn await_round(&self, target: u64) {
        let spin = Duration::from_nanos(2 * self.round_ns.load(Ordering::Relaxed));
        let spin = if spin <= WAIT_SPIN_MAX {
            spin
        } else {
            Duration::ZERO
        };
        let start = Instant::now();
        while start.elapsed() < spin {
            if self.durable_seen.load(Ordering::Acquire) >= target
                || !self.flushing_seen.load(Ordering::Acquire)
            {
                return;
            }
            std::thread::yield_now();
        }
        std::thread::park();
    }

    fn failed_error(&self, reason: &str) -> Error {
        Error::io(
            &self.dir,
            "log write",
            std::io::Error::other(format!("an earlier log write failed: {reason}")),
        )
    }

    /// Writes `bytes` (LSNs from `start`), one write and one sync per segment touched.
    fn write_out(&self, start: u64, bytes: &[u8]) -> Result<()> {
        let size = self.options.segment_bytes;
        let mut position = start;
        let mut done = 0usize;
        while done < bytes.len() {
            let index = position / size;
            let offset = position % size;
            let n = ((size - offset) as usize).min(bytes.len() - done);
            let file = self.segment_for_write(index)?;
            file.write_at(SEGMENT_HEADER_BYTES + offset, &bytes[done..done + n])?;
            self.zeros_ahead(file.as_ref(), index, offset + n as u64)?;
            file.sync()?;
            done += n;
            position += n as u64;
        }
        Ok(())
    }

    /// Fills segment `index` with zeros from `written` (where the records just written end) to
    /// [`segment::ZEROS_AHEAD_BYTES`] past it, unless that is done already, so that the next
    /// commits overwrite allocated blocks. The bytes past the log's end are never part of it,
    /// so overwriting them is safe; the sync that follows covers them with the records.
    fn zeros_ahead(&self, file: &dyn Storage, index: u64, written: u64) -> Result<()> {
        let size = self.options.segment_bytes;
        let mut zeroed = self.zeroed.lock().unwrap_or_else(|e| e.into_inner());
        if zeroed.0 != index {
            // A segment this writer did not open (the last one before a restart): nothing known.
            *zeroed = (index, 0);
        }
        let known = zeroed.1.max(written);
        // Topped up when less than half the distance is left, so a commit rarely pays for it.
        if known < (written + segment::ZEROS_AHEAD_BYTES / 2).min(size) {
            let to = (written + segment::ZEROS_AHEAD_BYTES).min(size);
            let zeros = vec![0u8; (to - known) as usize];
            file.write_at(SEGMENT_HEADER_BYTES + known, &zeros)?;
            zeroed.1 = to;
        } else {
            zeroed.1 = known;
        }
        Ok(())
    }

    fn segment_for_write(&self, index: u64) -> Result<Arc<dyn Storage>> {
        let spare = {
            let mut inner = self.lock();
            if let Some(file) = inner.segments.get(&index) {
                return Ok(file.clone());
            }
            inner.spares.pop()
        };
        let size = self.options.segment_bytes;
        let format = self.options.record_format;
        let reused = spare.is_some();
        let file = match spare {
            Some(path) => segment::reuse(self.fs.as_ref(), &path, &self.dir, index, size, format)?,
            None => segment::create(self.fs.as_ref(), &self.dir, index, size, format)?,
        };
        // Recorded before any record goes into the segment: from now on, its loss is found.
        self.anchor
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .record(index)?;
        // A recycled segment is allocated throughout; a new one only where written.
        *self.zeroed.lock().unwrap_or_else(|e| e.into_inner()) =
            (index, if reused { size } else { 0 });
        let mut inner = self.lock();
        if reused {
            inner.stats.segments_reused += 1;
        } else {
            inner.stats.segments_created += 1;
        }
        inner.segments.insert(index, file.clone());
        Ok(file)
    }
}

fn decode_at(bytes: &[u8], lsn: Lsn, page_size_max: usize) -> std::result::Result<Record, String> {
    let header = record::header(bytes, lsn, bytes.len()).map_err(describe)?;
    record::decode(&bytes[..header.len], lsn, page_size_max).map_err(describe)
}

fn describe(invalid: Invalid) -> String {
    match invalid {
        Invalid::NewerVersion(v) => format!("record format version {v} is newer than this build"),
        Invalid::Damaged(reason) => reason,
    }
}

/// Opened log segment files by index, with the record format each header names.
type SegmentFiles = (BTreeMap<u64, Arc<dyn Storage>>, BTreeMap<u64, RecordFormat>);

/// Opens the segment files `found` (index and path) in `mode` and checks their headers. Every
/// header is asked for before the first is read, and for a scan from `scan_from` the first
/// segments it reads are asked for whole: on a cold disk, opening a log of many segments then
/// waits for one round of reads, not for one small read after another.
fn open_segment_files(
    fs: &dyn FileSystem,
    found: Vec<(u64, PathBuf)>,
    mode: OpenMode,
    segment_bytes: u64,
    scan_from: Option<Lsn>,
) -> Result<SegmentFiles> {
    let mut files = BTreeMap::new();
    for (index, path) in found {
        files.insert(index, fs.open(&path, mode)?);
    }
    // The headers first: the reads of whole segments queue behind them.
    for file in files.values() {
        file.prefetch(0, SEGMENT_HEADER_BYTES);
    }
    if let Some(from) = scan_from {
        let first = from.0 / segment_bytes;
        for file in files
            .range(first..first.saturating_add(PREFETCH_SEGMENTS))
            .map(|(_, f)| f)
        {
            file.prefetch(SEGMENT_HEADER_BYTES, segment_bytes);
        }
    }
    let mut formats = BTreeMap::new();
    for (&index, file) in &files {
        formats.insert(
            index,
            segment::check_header(file.as_ref(), index, segment_bytes)?,
        );
    }
    Ok((files, formats))
}

/// The one record format of a log's segments (`None`: no segments).
fn one_format(dir: &Path, formats: &BTreeMap<u64, RecordFormat>) -> Result<Option<RecordFormat>> {
    let mut all = formats.iter();
    let Some((_, &first)) = all.next() else {
        return Ok(None);
    };
    match all.find(|(_, &format)| format != first) {
        None => Ok(Some(first)),
        Some((index, format)) => Err(Error::CorruptLog {
            path: segment::segment_path(dir, *index),
            offset: 0,
            reason: format!(
                "segment {index} holds {format:?} records, the log's first segment {first:?} ones: \
                 a log never mixes the two"
            ),
        }),
    }
}

fn check_options(options: &LogOptions) -> Result<()> {
    let size = options.segment_bytes;
    if !(SEGMENT_BYTES_MIN..=SEGMENT_BYTES_MAX).contains(&size) || !size.is_multiple_of(4096) {
        return Err(Error::InvalidArgument(format!(
            "log segment size {size} must be a multiple of 4096 from {SEGMENT_BYTES_MIN} to {SEGMENT_BYTES_MAX}"
        )));
    }
    if options.page_size_max as u64 * 2 + 64 > size / 2 {
        return Err(Error::InvalidArgument(format!(
            "log segment size {size} is too small for pages of {} bytes",
            options.page_size_max
        )));
    }
    Ok(())
}
