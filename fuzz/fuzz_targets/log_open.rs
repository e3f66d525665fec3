//! Fuzz target: a log whose segment files were damaged anywhere (bytes overwritten, a file cut
//! short or gone) must open to an error or to a prefix of what was written, never a panic or
//! a record that was not written; a log that opens takes new records and reads them back
//! after another open; in either record format (aligned, as the engine's log; compact, as the
//! differential logging streams). Run with `cargo fuzz run log_open` from the repository root
//! (cargo-fuzz, nightly).
#![no_main]

use libfuzzer_sys::fuzz_target;
use lodestore_core::{Lsn, PageId, TxnId};
use lodestore_storage::{FileSystem, MemoryFileSystem};
use lodestore_wal::record::RecordFormat;
use lodestore_wal::segment::{segment_path, SEGMENT_BYTES_MIN};
use lodestore_wal::{Log, LogOptions, RecordBody};
use std::path::Path;
use std::sync::Arc;

fn options(record_format: RecordFormat) -> LogOptions {
    LogOptions {
        segment_bytes: SEGMENT_BYTES_MIN,
        buffer_bytes_max: 16 << 10,
        spare_segments_max: 1,
        page_size_max: 8192,
        record_format,
    }
}

/// Record `i` of the log before the damage: updates of many sizes, and commits.
fn body(i: u32, size: u8) -> RecordBody {
    if i % 7 == 6 {
        return RecordBody::Commit;
    }
    let len = usize::from(size) * 3;
    RecordBody::Update {
        page: PageId(i),
        offset: i,
        before: Some(vec![i as u8; len]),
        after: vec![!(i as u8); len],
    }
}

fuzz_target!(|data: &[u8]| {
    // The first byte sets how many records (its low six bits: up to 252, one or two segments)
    // and the format (its top bit), the next 64 their sizes, the rest the damage, six bytes at
    // a time.
    let Some((&count, rest)) = data.split_first() else {
        return;
    };
    let options = || {
        options(if count & 0x80 != 0 {
            RecordFormat::Compact
        } else {
            RecordFormat::Aligned
        })
    };
    let (sizes, damage) = rest.split_at(rest.len().min(64));
    let sizes = if sizes.is_empty() { &[1u8][..] } else { sizes };
    let fs = Arc::new(MemoryFileSystem::new());
    let dir = Path::new("/fuzz/log");
    let log = Log::create(fs.clone(), dir, options()).expect("a new log");
    let mut written = Vec::new();
    let mut prev = Lsn(0);
    for i in 0..u32::from(count % 64) * 4 {
        let body = body(i, sizes[i as usize % sizes.len()]);
        prev = log.append(Some(TxnId(1)), prev, &body).expect("append");
        written.push(body);
        if i % 16 == 15 {
            log.flush_all().expect("flush");
        }
    }
    log.flush_all().expect("flush");
    let segments = log.segment_count() as u64;
    drop(log);

    for edit in damage.chunks_exact(6) {
        let segment = 1 + u64::from(edit[0]) % segments;
        let path = segment_path(dir, segment);
        let at = u32::from_le_bytes([edit[1], edit[2], edit[3], 0]) as usize;
        let (value, len) = (edit[4], usize::from(edit[5] % 64) + 1);
        match edit[0] >> 6 {
            // A file cut short, or gone.
            3 if edit[5] == 0 => {
                let _ = fs.remove(&path);
            }
            3 => {
                fs.with_file(&path, |bytes| bytes.truncate(at % (bytes.len() + 1)));
            }
            _ => {
                fs.with_file(&path, |bytes| {
                    if !bytes.is_empty() {
                        let start = at % bytes.len();
                        let end = (start + len).min(bytes.len());
                        bytes[start..end].fill(value);
                    }
                });
            }
        }
    }

    let from = Lsn(SEGMENT_BYTES_MIN);
    let Ok((log, _end)) = Log::open(fs.clone(), dir, options(), from) else {
        return;
    };
    let mut found = Vec::new();
    log.scan(from, |record| {
        if record.body != RecordBody::FlushMark {
            found.push(record.body);
        }
        Ok(())
    })
    .expect("a log that opened scans");
    assert!(
        found.len() <= written.len(),
        "more records than were written"
    );
    assert_eq!(
        found[..],
        written[..found.len()],
        "a record that was not written"
    );
    // The log goes on from where it ended.
    let lsn = log
        .append(None, Lsn(0), &RecordBody::Abort)
        .expect("append after open");
    log.flush(lsn).expect("flush after open");
    drop(log);
    let (log, _) = Log::open(fs, dir, options(), from).expect("reopen");
    assert_eq!(log.read(lsn).expect("read back").body, RecordBody::Abort);
});
