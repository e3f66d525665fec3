//! Fuzz target: the snapshot history and a file of page copies (the snapshot log and the local
//! archive share its format), written and then damaged anywhere (bytes overwritten, the file
//! cut short), must open to an error or to records that were written, never a panic or a
//! record that was not written; every copy the scan finds reads back as written. Run with
//! `cargo fuzz run snapshot_files` from the repository root (cargo-fuzz, nightly).
#![no_main]

use libfuzzer_sys::fuzz_target;
use lodestore_core::{Lsn, PageId};
use lodestore_server::versions::Snapshot;
use lodestore_snapshots::copies::{CopyFile, CopyFileKind};
use lodestore_snapshots::history::HistoryFile;
use lodestore_storage::{FileSystem, MemoryFileSystem, OpenMode};
use std::path::Path;

const PAGE: usize = 512;

fn image(page: u32, time: u64) -> Vec<u8> {
    (0..PAGE).map(|i| (i as u64 ^ time ^ u64::from(page)) as u8).collect()
}

/// Applies the damage, six bytes at a time: an offset (u32), a byte to write, and whether to
/// cut the file there instead.
fn damage(fs: &MemoryFileSystem, path: &Path, damage: &[u8]) {
    let file = fs.open(path, OpenMode::Existing).expect("written above");
    let len = file.len().expect("length");
    for chunk in damage.chunks_exact(6) {
        let at = u64::from(u32::from_le_bytes(chunk[..4].try_into().unwrap())) % len.max(1);
        if chunk[5] & 0x80 != 0 {
            file.set_len(at).expect("cut");
            return;
        }
        file.write_at(at, &[chunk[4]]).expect("write");
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&count, rest)) = data.split_first() else {
        return;
    };
    let count = u32::from(count % 24) + 1;
    let fs = MemoryFileSystem::new();

    // A file of copies, in batches of up to three.
    let path = Path::new("/copies");
    let (mut copies, _) =
        CopyFile::open(&fs, path, PAGE, CopyFileKind::Archive).expect("a new file");
    let written: Vec<(u32, u64)> = (0..count).map(|i| (i % 5, 1000 + u64::from(i))).collect();
    for batch in written.chunks(3) {
        let images: Vec<Vec<u8>> = batch.iter().map(|&(p, t)| image(p, t)).collect();
        let records: Vec<(PageId, u64, &[u8])> = batch
            .iter()
            .zip(&images)
            .map(|(&(p, t), image)| (PageId(p), t, &image[..]))
            .collect();
        copies.append(&records).expect("append");
        copies.sync().expect("sync");
    }
    drop(copies);
    damage(&fs, path, rest);
    if let Ok((copies, entries)) = CopyFile::open(&fs, path, PAGE, CopyFileKind::Archive) {
        let mut buf = vec![0u8; PAGE];
        for entry in entries {
            assert!(written.contains(&(entry.page.0, entry.time_us)), "{entry:?} was never written");
            copies
                .read(entry.offset, entry.page, entry.time_us, &mut buf)
                .expect("a copy the scan found reads back");
            assert_eq!(buf, image(entry.page.0, entry.time_us));
        }
    }

    // A history of snapshots taken and deleted.
    let path = Path::new("/history");
    let (mut history, _) = HistoryFile::open(&fs, path).expect("a new history");
    let taken: Vec<Snapshot> = (1..=u64::from(count))
        .map(|id| Snapshot {
            id,
            time_us: 5000 + id,
            lsn: Lsn(100 * id),
        })
        .collect();
    for snapshot in &taken {
        history.taken(snapshot).expect("taken");
        if snapshot.id % 4 == 0 {
            history.deleted(snapshot).expect("deleted");
        }
    }
    drop(history);
    damage(&fs, path, rest);
    if let Ok((_, recorded)) = HistoryFile::open(&fs, path) {
        for snapshot in &recorded.snapshots {
            assert!(taken.contains(snapshot), "{snapshot:?} was never taken");
        }
    }
});
