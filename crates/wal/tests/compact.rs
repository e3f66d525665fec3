//! A log of compact records (`RecordFormat::Compact`, the differential logging streams): the
//! same guarantees as the aligned log's tests check, on records that do not store their LSN
//! and start at any byte.

use lodestore_core::{Error, Lsn, PageId, TxnId};
use lodestore_storage::MemoryFileSystem;
use lodestore_wal::record::{RecordFormat, COMPACT_RECORD_MIN};
use lodestore_wal::segment::{segment_path, SEGMENT_HEADER_BYTES};
use lodestore_wal::{Log, LogOptions, RecordBody};
use proptest::prelude::*;
use std::path::Path;
use std::sync::Arc;

const SEGMENT: u64 = 256 << 10;

fn options(format: RecordFormat) -> LogOptions {
    LogOptions {
        segment_bytes: SEGMENT,
        buffer_bytes_max: 64 << 10,
        spare_segments_max: 1,
        page_size_max: 8192,
        record_format: format,
    }
}

fn compact() -> LogOptions {
    options(RecordFormat::Compact)
}

/// Bodies of odd lengths, so records start at every alignment.
fn update(i: u32) -> RecordBody {
    RecordBody::Update {
        page: PageId(i),
        offset: i % 100,
        before: Some(vec![i as u8; 1 + (i as usize * 37) % 700]),
        after: vec![!(i as u8); 1 + (i as usize * 37) % 700],
    }
}

/// Writes `count` updates of one transaction, each chained to the one before, and flushes.
fn write_many(log: &Log, count: u32) -> Vec<Lsn> {
    let mut lsns = Vec::new();
    let mut prev = Lsn(0);
    for i in 0..count {
        prev = log.append(Some(TxnId(9)), prev, &update(i)).unwrap();
        lsns.push(prev);
    }
    log.flush_all().unwrap();
    lsns
}

fn fs() -> Arc<MemoryFileSystem> {
    Arc::new(MemoryFileSystem::new())
}

fn real_records(log: &Log) -> Vec<lodestore_wal::Record> {
    let mut found = Vec::new();
    log.scan(Lsn(SEGMENT), |r| {
        if r.body != RecordBody::FlushMark {
            found.push(r);
        }
        Ok(())
    })
    .unwrap();
    found
}

#[test]
fn records_round_trip_across_segments_and_reopen_and_keep_their_format() {
    let fs = fs();
    let dir = Path::new("/s/log");
    let log = Log::create(fs.clone(), dir, compact()).unwrap();
    let lsns = write_many(&log, 1500);
    assert!(log.segment_count() > 2, "spans segments");
    // Some records start at odd positions: nothing is aligned.
    assert!(lsns.iter().any(|l| l.0 % 8 != 0));
    let commit = log
        .append(Some(TxnId(9)), *lsns.last().unwrap(), &RecordBody::Commit)
        .unwrap();
    log.flush(commit).unwrap();
    assert_eq!(
        log.end_lsn().0 - commit.0,
        (COMPACT_RECORD_MIN + 1) as u64 + COMPACT_RECORD_MIN as u64,
        "a commit (its distance back, some hundred bytes, takes two bytes) and a flush mark"
    );
    drop(log);
    // Opened with options asking for aligned records: the log keeps its own format.
    let (log, end) = Log::open(
        fs.clone(),
        dir,
        options(RecordFormat::Aligned),
        Lsn(SEGMENT),
    )
    .unwrap();
    assert_eq!(end.discarded_bytes, 0);
    let found = real_records(&log);
    assert_eq!(found.len(), 1501);
    for (i, record) in found.iter().take(1500).enumerate() {
        assert_eq!(record.body, update(i as u32));
        assert_eq!(record.lsn, lsns[i]);
        assert_eq!(record.txn, Some(TxnId(9)));
        assert_eq!(record.prev, if i == 0 { Lsn(0) } else { lsns[i - 1] });
    }
    assert_eq!(log.read(lsns[700]).unwrap().body, update(700));
    let more = log.append(None, Lsn(0), &RecordBody::Abort).unwrap();
    log.flush(more).unwrap();
    drop(log);
    let bytes = fs
        .with_file(&segment_path(dir, more.0 / SEGMENT), |b| b[4])
        .unwrap();
    assert_eq!(bytes, 2, "segments record the compact format");
    let (log, _) = Log::open(fs, dir, compact(), Lsn(SEGMENT)).unwrap();
    assert_eq!(log.read(more).unwrap().body, RecordBody::Abort);
}

#[test]
fn torn_tail_is_discarded_and_reported() {
    let fs = fs();
    let dir = Path::new("/s/log");
    let log = Log::create(fs.clone(), dir, compact()).unwrap();
    let lsns = write_many(&log, 50);
    let last = *lsns.last().unwrap();
    drop(log);
    let file = segment_path(dir, last.0 / SEGMENT);
    let at = (SEGMENT_HEADER_BYTES + last.0 % SEGMENT) as usize;
    fs.with_file(&file, |bytes| bytes[at + 12..at + 4096].fill(0xA5))
        .unwrap();
    let (log, found) = Log::open(fs.clone(), dir, compact(), Lsn(SEGMENT)).unwrap();
    assert_eq!(found.end, last, "ends before the torn record");
    assert!(found.discarded_bytes >= 4000, "{found:?}");
    assert_eq!(real_records(&log).len(), 49);
    let lsn = log.append(None, Lsn(0), &RecordBody::Commit).unwrap();
    log.flush(lsn).unwrap();
    assert_eq!(lsn, last, "the next record takes the torn one's place");
    drop(log);
    let (log, _) = Log::open(fs, dir, compact(), Lsn(SEGMENT)).unwrap();
    assert_eq!(log.read(lsn).unwrap().body, RecordBody::Commit);
}

#[test]
fn damage_before_the_end_and_a_damaged_last_commit_are_errors() {
    for victim_is_last in [false, true] {
        let fs = fs();
        let dir = Path::new("/s/log");
        let log = Log::create(fs.clone(), dir, compact()).unwrap();
        let lsns = write_many(&log, 50);
        let commit = log
            .append(Some(TxnId(9)), lsns[49], &RecordBody::Commit)
            .unwrap();
        log.flush(commit).unwrap();
        drop(log);
        // The commit is the last record before its batch's flush mark: damage to it must not
        // pass for a torn tail.
        let victim = if victim_is_last { commit } else { lsns[10] };
        let file = segment_path(dir, victim.0 / SEGMENT);
        let at = (SEGMENT_HEADER_BYTES + victim.0 % SEGMENT) as usize + 8;
        fs.with_file(&file, |bytes| bytes[at] ^= 0x10).unwrap();
        match Log::open(fs, dir, compact(), Lsn(SEGMENT)) {
            Err(Error::CorruptLog {
                path,
                offset,
                reason,
            }) => {
                assert_eq!(path, file);
                assert_eq!(offset, SEGMENT_HEADER_BYTES + victim.0 % SEGMENT);
                assert!(reason.contains("valid record follows"), "{reason}");
            }
            Ok((_, end)) => panic!("damage went unnoticed; the log ends at {}", end.end),
            Err(other) => panic!("unexpected error {other}"),
        }
    }
}

#[test]
fn a_log_whose_segments_disagree_on_the_format_is_refused() {
    let fs = fs();
    let dir = Path::new("/s/log");
    let log = Log::create(fs.clone(), dir, options(RecordFormat::Aligned)).unwrap();
    write_many(&log, 1000);
    assert!(log.segment_count() >= 2);
    drop(log);
    fs.with_file(&segment_path(dir, 2), |bytes| {
        bytes[4] = 2;
        let crc = lodestore_core::checksum::crc32c(&bytes[4..4096]);
        bytes[0..4].copy_from_slice(&crc.to_le_bytes());
    })
    .unwrap();
    match Log::open(fs, dir, compact(), Lsn(SEGMENT)) {
        Err(Error::CorruptLog { reason, .. }) => {
            assert!(reason.contains("never mixes"), "{reason}")
        }
        other => panic!("expected mixed formats refused, got {:?}", other.err()),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// As for the aligned log: damaged anywhere, the log opens to an error or to a prefix of
    /// the records written, and then goes on taking records that survive another open.
    #[test]
    fn a_damaged_log_opens_to_an_error_or_a_prefix(
        count in 1u32..600,
        damages in proptest::collection::vec(
            (0u64..4, 0usize..300_000, 1usize..64, any::<u8>(), any::<bool>()), 1..4),
    ) {
        let fs = fs();
        let dir = Path::new("/s/log");
        let log = Log::create(fs.clone(), dir, compact()).unwrap();
        write_many(&log, count);
        let segments = log.segment_count() as u64;
        drop(log);
        for (segment, at, len, value, cut) in damages {
            let path = segment_path(dir, 1 + segment % segments);
            fs.with_file(&path, |bytes| {
                let start = at % bytes.len().max(1);
                if cut {
                    bytes.truncate(start);
                } else {
                    let end = (start + len).min(bytes.len());
                    bytes[start..end].fill(value);
                }
            });
        }
        let Ok((log, _)) = Log::open(fs.clone(), dir, compact(), Lsn(SEGMENT)) else {
            return Ok(());
        };
        let found = real_records(&log);
        prop_assert!(found.len() <= count as usize);
        for (i, record) in found.iter().enumerate() {
            prop_assert_eq!(&record.body, &update(i as u32), "record {} was not written", i);
        }
        let lsn = log.append(None, Lsn(0), &RecordBody::Abort).unwrap();
        log.flush(lsn).unwrap();
        drop(log);
        let (log, _) = Log::open(fs, dir, compact(), Lsn(SEGMENT)).unwrap();
        prop_assert_eq!(log.read(lsn).unwrap().body, RecordBody::Abort);
    }
}
