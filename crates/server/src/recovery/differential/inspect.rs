//! What `info` shows and `check` verifies of differential logging's files, read-only.

use super::state::{data_pages, stream_dir, DIFFERENTIAL_DIR_NAME};
use crate::check::Problem;
use lodestore_core::{Lsn, Result, VolumeId};
use lodestore_difflog::anchor::Anchor;
use lodestore_difflog::backup::Backup;
use lodestore_difflog::kinds::{
    PHYSICAL_CHANGES, PHYSICAL_COMPENSATION, STREAM_CHECKPOINT_BEGIN, STREAM_CHECKPOINT_END,
    XOR_CHANGES,
};
use lodestore_difflog::marks::{CheckpointBegin, CheckpointEnd};
use lodestore_difflog::{physical, xor};
use lodestore_storage::FileSystem;
use lodestore_wal::{Log, LogOptions, RecordBody};
use serde::Serialize;
use std::path::Path;

/// The last complete checkpoint and the streams of a main-memory store.
#[derive(Clone, Debug, Serialize)]
pub struct DifferentialInfo {
    pub checkpoint: u64,
    /// The backup image a restart loads (0 or 1) and the BackupID its checkpoint gave pages.
    pub backup: usize,
    pub backup_id: bool,
    pub backup_pages: u32,
    pub streams: Vec<StreamInfo>,
}

#[derive(Clone, Debug, Serialize)]
pub struct StreamInfo {
    /// LSNs of the checkpoint's begin and end marks (0: none yet).
    pub begin: u64,
    pub end_mark: u64,
    /// Where the stream ends, and the records a restart would read.
    pub log_end: u64,
    pub records: u64,
}

fn log_options(segment_bytes: u64, page_size: usize) -> LogOptions {
    LogOptions {
        segment_bytes,
        page_size_max: page_size,
        ..LogOptions::default()
    }
}

/// The family's figures for the store in `store_dir`, if it has the family's folder.
pub fn info(
    fs: &dyn FileSystem,
    store_dir: &Path,
    segment_bytes: u64,
    page_size: usize,
) -> Result<Option<DifferentialInfo>> {
    let dir = store_dir.join(DIFFERENTIAL_DIR_NAME);
    if !fs.is_dir(&dir) {
        return Ok(None);
    }
    let done = Anchor::read(fs, &dir)?;
    let options = log_options(segment_bytes, page_size);
    let mut streams = Vec::with_capacity(done.windows.len());
    for (s, window) in done.windows.iter().enumerate() {
        let from = from_lsn(window.begin, segment_bytes);
        let mut records = 0;
        let end = Log::scan_read_only(fs, &stream_dir(&dir, s), &options, from, |_| {
            records += 1;
            Ok(())
        })?;
        streams.push(StreamInfo {
            begin: window.begin.0,
            end_mark: window.end.0,
            log_end: end.end.0,
            records,
        });
    }
    Ok(Some(DifferentialInfo {
        checkpoint: done.checkpoint,
        backup: done.backup(),
        backup_id: done.backup_id(),
        backup_pages: done.page_count,
        streams,
    }))
}

fn from_lsn(begin: Lsn, segment_bytes: u64) -> Lsn {
    if begin == Lsn::ZERO {
        Lsn(segment_bytes)
    } else {
        begin
    }
}

/// Checks the anchor, every data page of the backup it names, and every record a restart
/// would read from each stream; adds what is wrong to `problems`. Returns the pages checked.
pub fn check(
    fs: &dyn FileSystem,
    store_dir: &Path,
    segment_bytes: u64,
    page_size: usize,
    volume: VolumeId,
    problems: &mut Vec<Problem>,
) -> u64 {
    let dir = store_dir.join(DIFFERENTIAL_DIR_NAME);
    let mut problem = |message: String| {
        problems.push(Problem {
            page: None,
            message,
        })
    };
    let done = match Anchor::read(fs, &dir) {
        Ok(done) => done,
        Err(e) => {
            problem(format!("differential logging: {e}"));
            return 0;
        }
    };
    let mut checked = 0;
    match Backup::open_read_only(fs, &dir, done.backup(), page_size, volume) {
        Err(e) => problem(format!("differential logging: {e}")),
        Ok(backup) => {
            let mut buf = vec![0u8; page_size];
            for p in data_pages(done.page_count, page_size) {
                checked += 1;
                if let Err(e) = backup.read_page(p, &mut buf) {
                    problem(e.to_string());
                }
            }
        }
    }
    let options = log_options(segment_bytes, page_size);
    for (s, window) in done.windows.iter().enumerate() {
        let stream = stream_dir(&dir, s);
        let scanned = Log::scan_read_only(
            fs,
            &stream,
            &options,
            from_lsn(window.begin, segment_bytes),
            |record| {
                if let Err(reason) = parse(&record.body) {
                    problem(format!(
                        "{}: record at LSN {}: {reason}",
                        stream.display(),
                        record.lsn
                    ));
                }
                Ok(())
            },
        );
        if let Err(e) = scanned {
            problem(e.to_string());
        }
    }
    checked
}

/// Checks that a family record's body reads back.
fn parse(body: &RecordBody) -> std::result::Result<(), String> {
    let RecordBody::Family { kind, flags, body } = body else {
        return Ok(());
    };
    match *kind {
        XOR_CHANGES => xor::ranges(*flags, body).try_for_each(|r| r.map(|_| ())),
        PHYSICAL_CHANGES | PHYSICAL_COMPENSATION => {
            physical::parse(*kind, *flags, body).map(|_| ())
        }
        STREAM_CHECKPOINT_BEGIN => CheckpointBegin::parse(body).map(|_| ()),
        STREAM_CHECKPOINT_END => CheckpointEnd::parse(body).map(|_| ()),
        other => Err(format!(
            "record kind {other} does not belong in a log stream"
        )),
    }
}
