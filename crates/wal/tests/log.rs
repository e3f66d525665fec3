//! The log manager against an in-memory file system (and, for damage from outside, the
//! crash-simulating one and real files): round trips across segments, torn tails,
//! damage before the end, missing segments, newer formats, concurrent group commit, and damage
//! anywhere (a property test).

use lodestore_core::{Error, Lsn, PageId, TxnId};
use lodestore_storage::{FileSystem, MemoryFileSystem};
use lodestore_wal::segment::{segment_path, SEGMENT_HEADER_BYTES};
use lodestore_wal::{Log, LogOptions, RecordBody};
use proptest::prelude::*;
use std::path::Path;
use std::sync::Arc;

const SEGMENT: u64 = 256 << 10;

fn options() -> LogOptions {
    LogOptions {
        segment_bytes: SEGMENT,
        buffer_bytes_max: 64 << 10,
        spare_segments_max: 1,
        page_size_max: 8192,
        ..LogOptions::default()
    }
}

fn update(i: u32) -> RecordBody {
    RecordBody::Update {
        page: PageId(i),
        offset: i % 100,
        before: Some(vec![i as u8; 50 + (i as usize % 700)]),
        after: vec![!(i as u8); 50 + (i as usize % 700)],
    }
}

fn write_many(log: &Log, count: u32) -> Vec<Lsn> {
    let mut lsns = Vec::new();
    let mut prev = Lsn(0);
    for i in 0..count {
        prev = log.append(Some(TxnId(1)), prev, &update(i)).unwrap();
        lsns.push(prev);
    }
    log.flush_all().unwrap();
    lsns
}

fn fs() -> Arc<MemoryFileSystem> {
    Arc::new(MemoryFileSystem::new())
}

#[test]
fn records_round_trip_across_segments_and_reopen() {
    let fs = fs();
    let dir = Path::new("/s/log");
    let log = Log::create(fs.clone(), dir, options()).unwrap();
    let lsns = write_many(&log, 2000);
    assert!(log.segment_count() > 3, "{} segments", log.segment_count());
    for (i, &lsn) in lsns.iter().enumerate().step_by(37) {
        let record = log.read(lsn).unwrap();
        assert_eq!(record.body, update(i as u32));
        assert_eq!(record.txn, Some(TxnId(1)));
    }
    let end = log.end_lsn();
    drop(log);
    let (log, found) = Log::open(fs.clone(), dir, options(), Lsn(SEGMENT)).unwrap();
    assert_eq!(found.end, end);
    assert_eq!(found.discarded_bytes, 0);
    let mut seen = Vec::new();
    log.scan(Lsn(SEGMENT), |r| {
        if r.body != RecordBody::FlushMark {
            seen.push(r.lsn);
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(seen.len(), lsns.len());
    assert!(
        seen == lsns,
        "scan returned other records than were written"
    );
    // Appending after reopening continues the same sequence.
    let next = log.append(None, Lsn(0), &RecordBody::Commit).unwrap();
    assert_eq!(next, end);
    log.flush(next).unwrap();
    // Recycling keeps one spare and deletes the rest; the spare is reused for new segments.
    let recycled = log.recycle_before(lsns[1500]).unwrap();
    assert!(recycled >= 2);
    write_many(&log, 600);
    assert!(log.stats().segments_reused >= 1);
}

#[test]
fn stale_records_of_a_recycled_segment_are_not_reported_as_torn() {
    let fs = fs();
    let dir = Path::new("/s/log");
    let log = Log::create(fs.clone(), dir, options()).unwrap();
    let lsns = write_many(&log, 50);
    let end = log.end_lsn();
    drop(log);
    // A recycled segment still holds records of an older LSN past the end: copy the first
    // record (which names its own LSN, not the end's) to where the log ends.
    let file = segment_path(dir, end.0 / SEGMENT);
    let first = (SEGMENT_HEADER_BYTES + lsns[0].0 % SEGMENT) as usize;
    let at = (SEGMENT_HEADER_BYTES + end.0 % SEGMENT) as usize;
    assert_eq!(
        lsns[0].0 / SEGMENT,
        end.0 / SEGMENT,
        "one segment in this test"
    );
    fs.with_file(&file, |bytes| {
        let stale = bytes[first..first + 64].to_vec();
        bytes[at..at + 64].copy_from_slice(&stale);
    })
    .unwrap();
    let (_log, found) = Log::open(fs.clone(), dir, options(), Lsn(SEGMENT)).unwrap();
    assert_eq!(found.end, end);
    assert_eq!(found.discarded_bytes, 0, "{found:?}");
}

#[test]
fn torn_tail_is_discarded_and_reported() {
    let fs = fs();
    let dir = Path::new("/s/log");
    let log = Log::create(fs.clone(), dir, options()).unwrap();
    let lsns = write_many(&log, 50);
    let last = *lsns.last().unwrap();
    let end = log.end_lsn();
    drop(log);
    // Tear the last write inside its last record: its first 20 bytes stay, everything after
    // them (the rest of the record and the batch's flush mark) is garbage, as a torn write
    // leaves it.
    let file = segment_path(dir, last.0 / SEGMENT);
    let at = (SEGMENT_HEADER_BYTES + last.0 % SEGMENT) as usize;
    fs.with_file(&file, |bytes| {
        for b in &mut bytes[at + 20..at + 4096] {
            *b = 0xA5;
        }
    })
    .unwrap();
    let (log, found) = Log::open(fs.clone(), dir, options(), Lsn(SEGMENT)).unwrap();
    assert_eq!(found.end, last, "ends before the torn record");
    assert!(found.discarded_bytes >= 4000, "{found:?}");
    assert!(found.end < end);
    let mut count = 0;
    log.scan(Lsn(SEGMENT), |r| {
        count += u32::from(r.body != RecordBody::FlushMark);
        Ok(())
    })
    .unwrap();
    assert_eq!(count, 49);
    // New records overwrite the torn tail and survive another reopen.
    let lsn = log.append(None, Lsn(0), &RecordBody::Commit).unwrap();
    log.flush(lsn).unwrap();
    drop(log);
    let (log, found) = Log::open(fs, dir, options(), Lsn(SEGMENT)).unwrap();
    assert_eq!(log.read(lsn).unwrap().body, RecordBody::Commit);
    assert_eq!(
        found.end.0,
        lsn.0 + 80,
        "the commit and its batch's flush mark"
    );
}

#[test]
fn damage_before_the_end_is_an_error_naming_segment_and_offset() {
    let fs = fs();
    let dir = Path::new("/s/log");
    let log = Log::create(fs.clone(), dir, options()).unwrap();
    let lsns = write_many(&log, 50);
    drop(log);
    let victim = lsns[10];
    let file = segment_path(dir, victim.0 / SEGMENT);
    let at = (SEGMENT_HEADER_BYTES + victim.0 % SEGMENT) as usize + 45;
    fs.with_file(&file, |bytes| bytes[at] ^= 0x04).unwrap();
    match Log::open(fs, dir, options(), Lsn(SEGMENT)) {
        Err(Error::CorruptLog {
            path,
            offset,
            reason,
        }) => {
            assert_eq!(path, file);
            assert_eq!(offset, SEGMENT_HEADER_BYTES + victim.0 % SEGMENT);
            assert!(reason.contains("valid record follows"), "{reason}");
        }
        Ok(_) => panic!("damage before the end went unnoticed"),
        Err(other) => panic!("unexpected error {other}"),
    }
}

#[test]
fn missing_segment_and_newer_formats_are_named() {
    let fs = fs();
    let dir = Path::new("/s/log");
    let log = Log::create(fs.clone(), dir, options()).unwrap();
    write_many(&log, 2000);
    drop(log);
    fs.remove(&segment_path(dir, 2)).unwrap();
    match Log::open(fs.clone(), dir, options(), Lsn(SEGMENT)) {
        Err(Error::CorruptLog { reason, .. }) => assert!(reason.contains("missing"), "{reason}"),
        other => panic!("expected a missing segment, got {:?}", other.err()),
    }
    match Log::open(fs.clone(), dir, options(), Lsn(2 * SEGMENT)) {
        Err(Error::CorruptLog { reason, .. }) => assert!(reason.contains("missing"), "{reason}"),
        other => panic!("expected a missing segment, got {:?}", other.err()),
    }

    let fs = self::fs();
    let log = Log::create(fs.clone(), dir, options()).unwrap();
    write_many(&log, 10);
    drop(log);
    fs.with_file(&segment_path(dir, 1), |bytes| bytes[4] = 9)
        .unwrap();
    assert!(matches!(
        Log::open(fs.clone(), dir, options(), Lsn(SEGMENT)),
        Err(Error::UnsupportedFormat { found: 9, .. })
    ));
    // Version 0 under a valid checksum is no format at all, not an older one.
    fs.with_file(&segment_path(dir, 1), |bytes| {
        bytes[4] = 0;
        let crc = lodestore_core::checksum::crc32c(&bytes[4..4096]);
        bytes[0..4].copy_from_slice(&crc.to_le_bytes());
    })
    .unwrap();
    match Log::open(fs, dir, options(), Lsn(SEGMENT)) {
        Err(Error::CorruptLog { reason, .. }) => assert!(reason.contains("version 0"), "{reason}"),
        other => panic!("expected version 0 refused, got {:?}", other.err()),
    }
}

#[test]
fn concurrent_committers_share_flushes() {
    let fs = fs();
    let log = Arc::new(Log::create(fs, Path::new("/s/log"), options()).unwrap());
    let threads: Vec<_> = (0..8u64)
        .map(|t| {
            let log = log.clone();
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                for i in 0..200u32 {
                    let lsn = log.append(Some(TxnId(t + 1)), Lsn(0), &update(i)).unwrap();
                    let commit = log
                        .append(Some(TxnId(t + 1)), lsn, &RecordBody::Commit)
                        .unwrap();
                    log.flush(commit).unwrap();
                    assert!(log.durable_lsn() > commit);
                    mine.push((lsn, i));
                }
                mine
            })
        })
        .collect();
    for thread in threads {
        for (lsn, i) in thread.join().unwrap() {
            assert_eq!(log.read(lsn).unwrap().body, update(i));
        }
    }
    let stats = log.stats();
    // Every flush adds one flush mark.
    assert_eq!(stats.records - stats.flushes, 8 * 400);
    assert!(stats.flushes <= 8 * 200, "{stats:?}");
}

/// The adaptive commit delay: a leader that waits before its sync carries the commit that
/// arrived while it waited, in one flush; without the wait it would have flushed alone first.
#[test]
fn a_delayed_leader_carries_commits_that_arrive_while_it_waits() {
    let log = Arc::new(Log::create(fs(), Path::new("/s/log"), options()).unwrap());
    let first = log
        .append(Some(TxnId(1)), Lsn(0), &RecordBody::Commit)
        .unwrap();
    let leader = {
        let log = log.clone();
        std::thread::spawn(move || {
            log.flush_after(first, std::time::Duration::from_millis(300))
                .unwrap()
        })
    };
    // Well inside the leader's wait (had it not waited, it would have flushed by now).
    std::thread::sleep(std::time::Duration::from_millis(60));
    let second = log
        .append(Some(TxnId(2)), Lsn(0), &RecordBody::Commit)
        .unwrap();
    log.flush(second).unwrap();
    leader.join().unwrap();
    assert!(log.durable_lsn() > second);
    let stats = log.stats();
    assert_eq!(stats.flushes, 1, "{stats:?}");
    // The delay is the round's gathering time, and the round's write took time of its own.
    assert!(stats.gather_ns >= 300_000_000, "{stats:?}");
    assert!(stats.flush_ns > 0, "{stats:?}");
}

/// One committer at a time never gathers: its rounds' time is all write and sync.
#[test]
fn a_lone_committer_does_not_gather() {
    let log = Log::create(fs(), Path::new("/s/log"), options()).unwrap();
    for i in 0..20u64 {
        let commit = log
            .append(Some(TxnId(i + 1)), Lsn(0), &RecordBody::Commit)
            .unwrap();
        log.flush(commit).unwrap();
    }
    let stats = log.stats();
    assert_eq!(stats.flushes, 20, "{stats:?}");
    assert_eq!(stats.gather_ns, 0, "{stats:?}");
    assert!(stats.flush_ns > 0, "{stats:?}");
}

/// Damage to the last real record of a durable batch (say, a commit) must not pass for a torn
/// tail: the batch's flush mark follows it, so the reader reports the damage.
#[test]
fn damaged_last_commit_is_reported_not_truncated() {
    let fs = fs();
    let dir = Path::new("/s/log");
    let log = Log::create(fs.clone(), dir, options()).unwrap();
    let update = log.append(Some(TxnId(1)), Lsn(0), &update(1)).unwrap();
    let commit = log
        .append(Some(TxnId(1)), update, &RecordBody::Commit)
        .unwrap();
    log.flush(commit).unwrap();
    drop(log);
    let file = segment_path(dir, commit.0 / SEGMENT);
    let at = (SEGMENT_HEADER_BYTES + commit.0 % SEGMENT) as usize + 33;
    fs.with_file(&file, |bytes| bytes[at] ^= 0x01).unwrap();
    match Log::open(fs, dir, options(), Lsn(SEGMENT)) {
        Err(Error::CorruptLog { reason, .. }) => {
            assert!(reason.contains("valid record follows"), "{reason}")
        }
        Err(other) => panic!("unexpected error {other}"),
        Ok((_, end)) => panic!(
            "damaged commit taken for a torn tail, log ends at {}",
            end.end
        ),
    }
}

/// One way to damage a log's files: overwrite bytes, cut a file short, or remove it.
#[derive(Clone, Debug)]
enum Damage {
    Overwrite {
        segment: u64,
        at: usize,
        len: usize,
        value: u8,
    },
    Cut {
        segment: u64,
        at: usize,
    },
    Remove {
        segment: u64,
    },
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        8 => (0u64..4, 0usize..600_000, 1usize..64, any::<u8>())
            .prop_map(|(segment, at, len, value)| Damage::Overwrite { segment, at, len, value }),
        1 => (0u64..4, 0usize..600_000).prop_map(|(segment, at)| Damage::Cut { segment, at }),
        1 => (0u64..4).prop_map(|segment| Damage::Remove { segment }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// A log damaged anywhere opens to an error, or to a prefix of the records written (never
    /// a record that was not), and then goes on taking records that survive another open.
    /// The fuzz target `log_open` runs the same check on inputs it chooses.
    #[test]
    fn a_damaged_log_opens_to_an_error_or_a_prefix(
        count in 1u32..400,
        damages in proptest::collection::vec(damage(), 1..4),
    ) {
        let fs = fs();
        let dir = Path::new("/s/log");
        let log = Log::create(fs.clone(), dir, options()).unwrap();
        write_many(&log, count);
        let segments = log.segment_count() as u64;
        drop(log);
        for damage in damages {
            let path = |segment: u64| segment_path(dir, 1 + segment % segments);
            match damage {
                Damage::Overwrite { segment, at, len, value } => {
                    fs.with_file(&path(segment), |bytes| {
                        let start = at % bytes.len().max(1);
                        let end = (start + len).min(bytes.len());
                        bytes[start..end].fill(value);
                    });
                }
                Damage::Cut { segment, at } => {
                    fs.with_file(&path(segment), |bytes| bytes.truncate(at % (bytes.len() + 1)));
                }
                Damage::Remove { segment } => {
                    let _ = fs.remove(&path(segment));
                }
            }
        }
        let Ok((log, _)) = Log::open(fs.clone(), dir, options(), Lsn(SEGMENT)) else {
            return Ok(());
        };
        let mut found = Vec::new();
        log.scan(Lsn(SEGMENT), |record| {
            if record.body != RecordBody::FlushMark {
                found.push(record.body);
            }
            Ok(())
        })
        .unwrap();
        prop_assert!(found.len() <= count as usize);
        for (i, body) in found.iter().enumerate() {
            prop_assert_eq!(body, &update(i as u32), "record {} was not written", i);
        }
        let lsn = log.append(None, Lsn(0), &RecordBody::Abort).unwrap();
        log.flush(lsn).unwrap();
        drop(log);
        let (log, _) = Log::open(fs, dir, options(), Lsn(SEGMENT)).unwrap();
        prop_assert_eq!(log.read(lsn).unwrap().body, RecordBody::Abort);
    }
}

/// One way a log's files may be damaged from outside, as a hostile tester would.
#[derive(Clone, Copy, Debug)]
enum Outside {
    CutLast(u64),
    RemoveFirst,
    RemoveMiddle,
    RemoveLast,
    SwapLastTwo,
    EmptyLast,
}

/// Writes records over four segments, damages the files as `outside` says, and returns what
/// opening from the first segment said: every case is an error naming a file, never a log
/// that silently ends early.
fn open_after(fs: Arc<dyn FileSystem>, dir: &Path, outside: Outside) -> Error {
    let log = Log::create(fs.clone(), dir, options()).unwrap();
    write_many(&log, 1200);
    let last = log.end_lsn().0 / SEGMENT;
    assert!(last >= 4, "the log spans {last} segments");
    drop(log);
    let path = |index| segment_path(dir, index);
    match outside {
        Outside::CutLast(keep) => {
            let file = fs
                .open(&path(last), lodestore_storage::OpenMode::Existing)
                .unwrap();
            file.set_len(keep).unwrap();
        }
        Outside::EmptyLast => {
            let file = fs
                .open(&path(last), lodestore_storage::OpenMode::Existing)
                .unwrap();
            file.set_len(0).unwrap();
        }
        Outside::RemoveFirst => fs.remove(&path(1)).unwrap(),
        Outside::RemoveMiddle => fs.remove(&path(2)).unwrap(),
        Outside::RemoveLast => fs.remove(&path(last)).unwrap(),
        Outside::SwapLastTwo => {
            let spare = dir.join("swap");
            fs.rename(&path(last), &spare).unwrap();
            fs.rename(&path(last - 1), &path(last)).unwrap();
            fs.rename(&spare, &path(last - 1)).unwrap();
        }
    }
    match Log::open(fs, dir, options(), Lsn(SEGMENT)) {
        Err(error) => error,
        Ok((_, end)) => panic!("{outside:?}: the log opened and ends at {}", end.end),
    }
}

const OUTSIDE: [Outside; 7] = [
    Outside::CutLast(3000),
    Outside::CutLast(SEGMENT_HEADER_BYTES + SEGMENT - 1),
    Outside::EmptyLast,
    Outside::RemoveFirst,
    Outside::RemoveMiddle,
    Outside::RemoveLast,
    Outside::SwapLastTwo,
];

fn assert_named(outside: Outside, error: &Error) {
    let Error::CorruptLog { path, reason, .. } = error else {
        panic!("{outside:?}: expected a damaged log, got {error}");
    };
    assert!(
        path.to_string_lossy().contains("segment-"),
        "{outside:?}: {error} names no segment file"
    );
    let expected = match outside {
        Outside::CutLast(_) | Outside::EmptyLast => "bytes",
        Outside::RemoveFirst | Outside::RemoveMiddle | Outside::RemoveLast => "missing",
        Outside::SwapLastTwo => "header says segment",
    };
    assert!(reason.contains(expected), "{outside:?}: {error}");
}

#[test]
fn shortened_missing_and_reordered_segments_are_errors_naming_the_file() {
    for outside in OUTSIDE {
        let fs = fs();
        let error = open_after(fs, Path::new("/s/log"), outside);
        assert_named(outside, &error);
    }
}

#[test]
fn shortened_missing_and_reordered_segments_on_real_files() {
    for outside in OUTSIDE {
        let dir = tempfile::tempdir().unwrap();
        let log_dir = dir.path().join("log");
        let error = open_after(
            Arc::new(lodestore_storage::RealFileSystem),
            &log_dir,
            outside,
        );
        assert_named(outside, &error);
    }
}

#[test]
fn shortened_missing_and_reordered_segments_on_the_crash_simulating_file_system() {
    for outside in OUTSIDE {
        let fs = Arc::new(lodestore_storage::SimFileSystem::new());
        let error = open_after(fs, Path::new("/s/log"), outside);
        assert_named(outside, &error);
    }
}

#[test]
fn a_log_whose_anchor_is_gone_is_refused_by_name() {
    let fs = fs();
    let dir = Path::new("/s/log");
    let log = Log::create(fs.clone(), dir, options()).unwrap();
    write_many(&log, 10);
    drop(log);
    fs.remove(&lodestore_wal::anchor::anchor_path(dir)).unwrap();
    match Log::open(fs, dir, options(), Lsn(SEGMENT)) {
        Err(Error::CorruptLog { path, reason, .. }) => {
            assert!(path.ends_with("anchor"), "{path:?}");
            assert!(reason.contains("missing"), "{reason}");
        }
        other => panic!("expected a missing anchor, got {:?}", other.err()),
    }
}

#[test]
fn removing_spares_leaves_a_log_that_reopens_and_creates_segments_again() {
    let fs = fs();
    let dir = Path::new("/s/log");
    let log = Log::create(fs.clone(), dir, options()).unwrap();
    let lsns = write_many(&log, 1500);
    assert!(log.recycle_before(lsns[1400]).unwrap() >= 2);
    let spares = |fs: &MemoryFileSystem| {
        fs.list(dir)
            .unwrap()
            .iter()
            .filter(|p| p.to_string_lossy().contains("spare-"))
            .count()
    };
    assert_eq!(spares(&fs), 1, "recycling keeps one spare here");
    log.remove_spares().unwrap();
    assert_eq!(spares(&fs), 0);
    let end = log.end_lsn();
    drop(log);
    let (log, found) = Log::open(fs.clone(), dir, options(), lsns[1400]).unwrap();
    assert_eq!(found.end, end);
    // With no spare left, the next segments are created, not reused.
    let created = log.stats().segments_created;
    write_many(&log, 600);
    assert!(log.stats().segments_created > created);
    assert_eq!(log.stats().segments_reused, 0);
}

/// `Log::open_at_end` finds the end `Log::open` finds (a torn tail in the last segment
/// included) without reading the segments before the last; damage in those is left to the
/// scan a restart makes next, which reports it as `Log::open` does.
#[test]
fn opening_at_the_end_finds_the_same_end_and_leaves_older_damage_to_the_scan() {
    let fs = fs();
    let dir = Path::new("/s/log");
    let log = Log::create(fs.clone(), dir, options()).unwrap();
    let lsns = write_many(&log, 2000);
    assert!(log.segment_count() > 3, "{} segments", log.segment_count());
    let last = *lsns.last().unwrap();
    drop(log);
    let (_, whole) = Log::open(fs.clone(), dir, options(), Lsn(SEGMENT)).unwrap();
    let (_, at_end) = Log::open_at_end(fs.clone(), dir, options(), Lsn(SEGMENT)).unwrap();
    assert_eq!(at_end, whole);

    // A torn last write: both stop before it and drop the same bytes.
    let file = segment_path(dir, last.0 / SEGMENT);
    let at = (SEGMENT_HEADER_BYTES + last.0 % SEGMENT) as usize;
    fs.with_file(&file, |bytes| bytes[at + 20..at + 4096].fill(0xA5))
        .unwrap();
    let (_, whole) = Log::open(fs.clone(), dir, options(), Lsn(SEGMENT)).unwrap();
    let (_, at_end) = Log::open_at_end(fs.clone(), dir, options(), Lsn(SEGMENT)).unwrap();
    assert_eq!(whole.end, last);
    assert_eq!(at_end, whole);

    // The newest segment beginning with a damaged record (valid ones after it): both refuse,
    // open_at_end having gone back to the segment before.
    let newest = segment_path(dir, last.0 / SEGMENT);
    let head = SEGMENT_HEADER_BYTES as usize + 45;
    fs.with_file(&newest, |bytes| bytes[head] ^= 0x10).unwrap();
    for opened in [
        Log::open(fs.clone(), dir, options(), Lsn(SEGMENT)),
        Log::open_at_end(fs.clone(), dir, options(), Lsn(SEGMENT)),
    ] {
        match opened {
            Err(Error::CorruptLog { path, reason, .. }) => {
                assert_eq!(path, newest);
                assert!(reason.contains("valid record follows"), "{reason}");
            }
            other => panic!("a damaged segment start went unnoticed: {:?}", other.err()),
        }
    }
    fs.with_file(&newest, |bytes| bytes[head] ^= 0x10).unwrap();

    // A flipped bit in the first segment: open_at_end does not read it, the scan finds it.
    let victim = lsns[10];
    assert!(victim.0 / SEGMENT < last.0 / SEGMENT);
    let first = segment_path(dir, victim.0 / SEGMENT);
    let at = (SEGMENT_HEADER_BYTES + victim.0 % SEGMENT) as usize + 45;
    fs.with_file(&first, |bytes| bytes[at] ^= 0x04).unwrap();
    assert!(Log::open(fs.clone(), dir, options(), Lsn(SEGMENT)).is_err());
    let (log, at_end) = Log::open_at_end(fs.clone(), dir, options(), Lsn(SEGMENT)).unwrap();
    assert_eq!(at_end.end, last);
    match log.scan(Lsn(SEGMENT), |_| Ok(())) {
        Err(Error::CorruptLog { path, reason, .. }) => {
            assert_eq!(path, first);
            assert!(reason.contains("valid record follows"), "{reason}");
        }
        other => panic!("damage before the end went unnoticed: {other:?}"),
    }
}

/// The LSNs of the records `log.scan` visits from `from`, and the end it reports.
fn scanned_lsns(log: &Log, from: Lsn) -> (Vec<Lsn>, lodestore_wal::LogEnd) {
    let mut lsns = Vec::new();
    let end = log
        .scan(from, |r| {
            lsns.push(r.lsn);
            Ok(())
        })
        .unwrap();
    (lsns, end)
}

/// The scan after `Log::open_at_end` reuses the segment the opening scan read; once records
/// are appended after the open it reads the segment again, and sees them.
#[test]
fn the_scan_after_opening_sees_records_appended_since() {
    let fs = fs();
    let dir = Path::new("/s/log");
    let log = Log::create(fs.clone(), dir, options()).unwrap();
    let before = write_many(&log, 40);
    drop(log);

    // Nothing appended: the restart's scan visits what a fresh opening's scan visits.
    let (log, end) = Log::open_at_end(fs.clone(), dir, options(), before[0]).unwrap();
    let (seen, scanned) = scanned_lsns(&log, before[0]);
    assert_eq!(scanned, end);
    let (fresh, _) = Log::open(fs.clone(), dir, options(), before[0]).unwrap();
    let (reference, _) = scanned_lsns(&fresh, before[0]);
    drop(fresh);
    assert_eq!(seen, reference);
    assert!(before.iter().all(|lsn| seen.contains(lsn)));

    // Appended after the open, before the first scan: the scan reads the segment again.
    let (log, _) = Log::open_at_end(fs.clone(), dir, options(), before[0]).unwrap();
    let mut prev = *before.last().unwrap();
    let mut after = Vec::new();
    for i in 0..5 {
        prev = log.append(Some(TxnId(2)), prev, &update(i)).unwrap();
        after.push(prev);
    }
    log.flush_all().unwrap();
    let (seen, scanned) = scanned_lsns(&log, before[0]);
    assert_eq!(scanned.end, log.end_lsn());
    assert!(seen.starts_with(&reference), "the records before the open");
    assert!(after.iter().all(|lsn| seen.contains(lsn)), "{seen:?}");
}
