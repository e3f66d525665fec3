//! Damaged or misplaced records make a restart fail with an error naming the stream and the
//! record's LSN, never a panic and never a wrong image passed off as recovered.

use lodestore_core::{Error, Lsn, PageId, Result, TxnId};
use lodestore_difflog::marks::CheckpointBegin;
use lodestore_difflog::physical::PhysicalRecordBuilder;
use lodestore_difflog::restart::Window;
use lodestore_difflog::restart::{
    one_pass, physical_two_pass, two_pass, MemoryImage, OnePassForward, StreamTail,
};
use lodestore_difflog::xor::XorRecordBuilder;
use lodestore_wal::record::Body;
use lodestore_wal::{Record, RecordBody};
use std::path::Path;

fn record(lsn: u64, prev: u64, txn: Option<u64>, body: &dyn Body) -> Record {
    let mut bytes = vec![0u8; body.body_len()];
    let flags = body.write_body(&mut bytes);
    Record {
        lsn: Lsn(lsn),
        prev: Lsn(prev),
        txn: txn.map(TxnId),
        body: RecordBody::Family {
            kind: body.kind(),
            flags,
            body: bytes,
        },
    }
}

fn xor(page: u32, offset: usize, len: usize) -> XorRecordBuilder {
    let mut b = XorRecordBuilder::new();
    b.push_change(PageId(page), offset, false, &vec![0; len], &vec![7; len]);
    b
}

fn no_older(lsn: Lsn) -> Result<Record> {
    Err(Error::InvalidArgument(format!("no record at {lsn}")))
}

/// Runs DL1P forwards (level 2: record by record as a scan reads them) on `records`.
fn forward(
    records: &[Record],
    window: Window,
    read: &(dyn Fn(Lsn) -> Result<Record> + Sync),
) -> Result<()> {
    let image = MemoryImage::zeroed(2, 64);
    let mut pass = OnePassForward::new(Path::new("log/stream-1"), window, false, &image);
    for record in records {
        pass.push(record.clone())?;
    }
    pass.finish(read).map(|_| ())
}

/// Runs the three XOR restarts (DL1P backwards and forwards, DL2P) on `records` and returns
/// the first one's error; the others must fail naming the same stream and record.
fn restart_error(
    records: &[Record],
    window: Window,
    read: &(dyn Fn(Lsn) -> Result<Record> + Sync),
) -> String {
    let tail = StreamTail {
        path: Path::new("log/stream-1"),
        records,
        window,
        read,
    };
    let image = MemoryImage::zeroed(2, 64);
    let one = one_pass(&tail, false, &image).unwrap_err().to_string();
    let two = two_pass(&tail, false, &MemoryImage::zeroed(2, 64))
        .unwrap_err()
        .to_string();
    assert_eq!(one, two);
    assert!(one.contains("log/stream-1"), "{one}");
    let forwards = forward(records, window, read).unwrap_err().to_string();
    assert!(forwards.contains("log/stream-1"), "{forwards}");
    // The same record named: "log damaged at byte N".
    let at = |e: &str| {
        e.split("at byte ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .map(str::to_string)
    };
    assert!(at(&one).is_some(), "{one}");
    assert_eq!(at(&forwards), at(&one), "{forwards} / {one}");
    one
}

#[test]
fn a_cut_range_is_named_with_its_record() {
    let mut cut = record(4096, 0, Some(1), &xor(1, 0, 16));
    if let RecordBody::Family { body, .. } = &mut cut.body {
        let whole = body.len();
        body.truncate(whole - 4);
    }
    let err = restart_error(&[cut], Window::default(), &no_older);
    assert!(
        err.contains("4096") && err.contains("past the body"),
        "{err}"
    );
}

#[test]
fn a_change_outside_the_image_is_named() {
    let records = [record(4096, 0, Some(1), &xor(9, 0, 8)).with_commit()];
    let err = restart_error(&records, Window::default(), &no_older);
    assert!(err.contains("page 9"), "{err}");
    let records = [record(4096, 0, Some(1), &xor(1, 60, 8)).with_commit()];
    let err = restart_error(&records, Window::default(), &no_older);
    assert!(err.contains("runs past page 1"), "{err}");
}

#[test]
fn a_window_that_does_not_start_at_a_begin_mark_is_refused() {
    let records = [record(4096, 0, Some(1), &xor(1, 0, 8))];
    let window = Window {
        begin: Lsn(4096),
        end: Lsn(8192),
    };
    let err = restart_error(&records, window, &no_older);
    assert!(err.contains("not a begin mark"), "{err}");
    let err = restart_error(&[], window, &no_older);
    assert!(err.contains("does not start at the checkpoint"), "{err}");
}

#[test]
fn a_broken_chain_before_the_checkpoint_is_refused() {
    // Transaction 5 was active at the begin mark and never committed; its last record
    // before the mark is at 1024, but what is there belongs to transaction 6.
    let mark = CheckpointBegin {
        checkpoint: 1,
        active: vec![(TxnId(5), Lsn(1024))],
    };
    let records = [record(4096, 0, None, &mark)];
    let window = Window {
        begin: Lsn(4096),
        end: Lsn(4160),
    };
    let older = |lsn: Lsn| Ok(record(lsn.0, 0, Some(6), &xor(1, 0, 8)));
    let err = restart_error(&records, window, &older);
    assert!(
        err.contains("transaction 5's chain") && err.contains("1024"),
        "{err}"
    );
    // A chain that loops forward is refused too.
    let older = |lsn: Lsn| Ok(record(lsn.0, lsn.0, Some(5), &xor(1, 0, 8)));
    let err = restart_error(&records, window, &older);
    assert!(err.contains("previous LSN"), "{err}");
}

#[test]
fn records_of_the_other_method_are_refused() {
    let mut physical = PhysicalRecordBuilder::changes(1);
    physical.push(PageId(1), 0, &[1], &[2]);
    let records = [record(4096, 0, Some(1), &physical)];
    let err = restart_error(&records, Window::default(), &no_older);
    assert!(err.contains("physical record in an XOR stream"), "{err}");

    let records = [record(4096, 0, Some(1), &xor(1, 0, 8))];
    let tail = StreamTail {
        path: Path::new("log/stream-0"),
        records: &records,
        window: Window::default(),
        read: &no_older,
    };
    let err = physical_two_pass(&[tail], &MemoryImage::zeroed(2, 64))
        .unwrap_err()
        .to_string();
    assert!(err.contains("XOR record in a physical stream"), "{err}");
}

trait WithCommit {
    fn with_commit(self) -> Record;
}

impl WithCommit for Record {
    /// The same record, marked as its transaction's commit.
    fn with_commit(mut self) -> Record {
        if let RecordBody::Family { flags, .. } = &mut self.body {
            *flags |= lodestore_difflog::xor::FLAG_COMMITS;
        }
        self
    }
}
