//! A record kind defined here, outside the log crate, in the extensions' range of the kind
//! registry: it goes through append, flush, a simulated crash and a read like any record, and
//! comes back as the same bytes for this family to decode. What was not flushed is gone. Kinds
//! outside every family's range are refused. The engine's own records keep their bytes, so
//! logs written before the registry read unchanged.

use lodestore_core::{Error, Lsn, PageId, TxnId};
use lodestore_storage::{Fault, SimFileSystem};
use lodestore_wal::record::{decode, encode};
use lodestore_wal::{kinds, Body, FamilyRef, Log, LogOptions, RecordBody};
use std::path::Path;
use std::sync::Arc;

/// This test's own record: a counter's new value and a label.
#[derive(Clone, Debug, PartialEq, Eq)]
struct CounterSet {
    value: u64,
    label: String,
}

const COUNTER_SET: u8 = kinds::EXTENSIONS.first + 3;
/// A flag of this family's: the label is empty.
const NO_LABEL: u16 = 1;

impl CounterSet {
    fn bytes(&self) -> Vec<u8> {
        let mut out = self.value.to_le_bytes().to_vec();
        out.extend_from_slice(self.label.as_bytes());
        out
    }

    fn append(&self, log: &Log, txn: TxnId, prev: Lsn) -> lodestore_core::Result<Lsn> {
        let bytes = self.bytes();
        let flags = if self.label.is_empty() { NO_LABEL } else { 0 };
        log.append(
            Some(txn),
            prev,
            &FamilyRef::new(COUNTER_SET, flags, &bytes)?,
        )
    }

    /// Reads one back from the body the log hands over.
    fn from_record(body: &RecordBody) -> Option<CounterSet> {
        let RecordBody::Family { kind, flags, body } = body else {
            return None;
        };
        if *kind != COUNTER_SET || body.len() < 8 {
            return None;
        }
        let set = CounterSet {
            value: u64::from_le_bytes(body[..8].try_into().unwrap()),
            label: String::from_utf8(body[8..].to_vec()).ok()?,
        };
        assert_eq!(*flags & NO_LABEL != 0, set.label.is_empty());
        Some(set)
    }
}

fn options() -> LogOptions {
    LogOptions {
        segment_bytes: 256 << 10,
        buffer_bytes_max: 64 << 10,
        spare_segments_max: 1,
        page_size_max: 8192,
        ..LogOptions::default()
    }
}

#[test]
fn a_record_kind_of_our_own_survives_append_flush_crash_and_read() {
    let fs = Arc::new(SimFileSystem::new());
    let dir = Path::new("/s/log");
    let log = Log::create(fs.clone(), dir, options()).unwrap();
    let txn = TxnId(9);
    let mut prev = Lsn(0);
    let mut flushed = Vec::new();
    for i in 0..300u64 {
        let set = CounterSet {
            value: i * 7,
            label: if i % 5 == 0 {
                String::new()
            } else {
                format!("step {i}")
            },
        };
        prev = set.append(&log, txn, prev).unwrap();
        // Engine records interleave with the family's.
        prev = log
            .append(
                Some(txn),
                prev,
                &RecordBody::Update {
                    page: PageId(3),
                    offset: i as u32,
                    before: None,
                    after: vec![i as u8],
                },
            )
            .unwrap();
        flushed.push(set);
    }
    log.flush_all().unwrap();
    // Appended but never flushed: lost in the crash.
    let lost = CounterSet {
        value: u64::MAX,
        label: "never durable".into(),
    };
    lost.append(&log, txn, prev).unwrap();
    fs.crash_now();
    drop(log);
    fs.recover(Fault::DropUnsynced, 1);

    let (log, _) = Log::open(fs.clone(), dir, options(), Lsn(256 << 10)).unwrap();
    let mut read = Vec::new();
    let mut updates = 0;
    log.scan(Lsn(256 << 10), |record| {
        match CounterSet::from_record(&record.body) {
            Some(set) => {
                assert_eq!(record.txn, Some(txn));
                read.push(set);
            }
            None => {
                assert!(
                    matches!(record.body, RecordBody::Update { .. }) || is_framing(&record.body)
                );
                updates += usize::from(matches!(record.body, RecordBody::Update { .. }));
            }
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(read, flushed);
    assert_eq!(updates, 300);
}

fn is_framing(body: &RecordBody) -> bool {
    matches!(body, RecordBody::FlushMark | RecordBody::Skip)
}

#[test]
fn kinds_outside_a_familys_range_are_refused() {
    for kind in [0u8, kinds::UPDATE, kinds::LOGGED_PAGES, 200] {
        match FamilyRef::new(kind, 0, b"x") {
            Err(Error::InvalidArgument(reason)) => assert!(reason.contains("kind"), "{reason}"),
            other => panic!("kind {kind}: {other:?}"),
        }
    }
    for range in kinds::RANGES.iter().skip(1) {
        assert!(FamilyRef::new(range.first, 0, b"").is_ok());
        assert!(FamilyRef::new(range.last, 0, b"").is_ok());
    }
    // Bytes claiming a kind in no range are damage when read.
    let record = FamilyRef::new(kinds::EXTENSIONS.first, 0, b"abc").unwrap();
    let mut bytes = Vec::new();
    encode(Lsn(4096), Lsn(0), None, &record, &mut bytes);
    assert_eq!(record.kind(), kinds::EXTENSIONS.first);
    bytes[32] = 200;
    let crc = lodestore_core::checksum::crc32c(&bytes[4..]);
    bytes[0..4].copy_from_slice(&crc.to_le_bytes());
    assert!(decode(&bytes, Lsn(4096), 8192).is_err());
}

/// The engine's records are encoded as before the registry: a commit and an update, byte for
/// byte, so logs written by earlier builds read unchanged.
#[test]
fn engine_records_keep_their_bytes() {
    let mut commit = Vec::new();
    encode(
        Lsn(4096),
        Lsn(4000),
        Some(TxnId(5)),
        &RecordBody::Commit,
        &mut commit,
    );
    let expected_header_tail = [4u8, 1, 0, 0, 0, 0, 0, 0]; // kind 4, version 1, flags, reserved
    assert_eq!(&commit[32..40], &expected_header_tail);
    assert_eq!(commit.len(), 40);
    assert_eq!(&commit[4..8], &40u32.to_le_bytes());
    let mut update = Vec::new();
    let body = RecordBody::Update {
        page: PageId(2),
        offset: 3,
        before: None,
        after: vec![9, 9],
    };
    encode(Lsn(8192), Lsn(0), None, &body, &mut update);
    assert_eq!(update[32], 1);
    assert_eq!(
        u16::from_le_bytes([update[34], update[35]]),
        1,
        "before-zero flag"
    );
    assert_eq!(
        &update[40..58],
        &[2, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 9, 9]
    );
}
