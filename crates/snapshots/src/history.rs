//! The snapshot history: every snapshot taken, durably, in the order taken (Thor's snapshot
//! coordinator keeps this; Moh section 2.1). An append-only file of fixed-size records; a
//! deletion is a record too, so the file is never rewritten in place.
//!
//! ```text
//! record (40 bytes)
//!  0  4 magic 0x4c53_534e        16  8 time (µs since the Unix epoch)
//!  4  2 format version           24  8 cut (LSN)
//!  6  1 kind (1 taken, 2 deleted, 32  4 crc32c of bytes 0..32
//!          0 a mark)
//!  7  1 reserved (0)             36  4 reserved (0)
//!  8  8 snapshot id
//! ```
//!
//! Each record is written with a mark after it (a record of kind 0) and made durable at once. A
//! record that fails its checks with no valid record right after it is a torn last write and is
//! cut off; one followed by a valid record (its mark, at least) is damage, reported with the
//! file and offset. The mark is what tells damage to the newest snapshot from a torn write.

use lodestore_core::checksum::crc32c;
use lodestore_core::{Error, Lsn, Result};
use lodestore_server::versions::Snapshot;
use lodestore_storage::bytes::{get_u16, get_u32, get_u64, put_u16, put_u32, put_u64};
use lodestore_storage::{FileSystem, OpenMode, Storage};
use std::path::{Path, PathBuf};
use std::sync::Arc;

const RECORD_MAGIC: u32 = 0x4c53_534e;
const RECORD_VERSION: u16 = 1;
const RECORD_BYTES: u64 = 40;
const KIND_MARK: u8 = 0;
const KIND_TAKEN: u8 = 1;
const KIND_DELETED: u8 = 2;

/// The history file.
pub struct HistoryFile {
    file: Arc<dyn Storage>,
    path: PathBuf,
    end: u64,
}

impl HistoryFile {
    /// Opens (or creates) the history at `path`; returns it with the snapshots that exist, in
    /// the order taken, and the highest id and time it ever recorded (deleted ones included).
    pub fn open(fs: &dyn FileSystem, path: &Path) -> Result<(HistoryFile, Recorded)> {
        let file = if fs.exists(path) {
            fs.open(path, OpenMode::Existing)?
        } else {
            let file = fs.open(path, OpenMode::CreateNew)?;
            file.sync()?;
            file
        };
        let len = file.len()?;
        let mut records = Vec::new();
        let mut buf = [0u8; RECORD_BYTES as usize];
        let mut offset = 0;
        let mut valid_end = 0;
        while offset + RECORD_BYTES <= len {
            file.read_at(offset, &mut buf)?;
            match decode(&buf) {
                Ok(record) => {
                    records.push(record);
                    offset += RECORD_BYTES;
                    valid_end = offset;
                }
                Err(reason) => {
                    let next = offset + RECORD_BYTES;
                    if next + RECORD_BYTES <= len {
                        file.read_at(next, &mut buf)?;
                        if decode(&buf).is_ok() {
                            return Err(Error::CorruptFile {
                                path: path.to_path_buf(),
                                reason: format!(
                                    "snapshot history record at byte {offset} is damaged \
                                     ({reason}) and a valid one follows it"
                                ),
                            });
                        }
                    }
                    break;
                }
            }
        }
        if valid_end < len {
            file.set_len(valid_end)?;
            file.sync()?;
        }
        let mut recorded = Recorded::default();
        for (kind, snapshot) in records {
            if kind == KIND_MARK {
                continue;
            }
            recorded.id_max = recorded.id_max.max(snapshot.id);
            recorded.time_max = recorded.time_max.max(snapshot.time_us);
            match kind {
                KIND_MARK => continue,
                KIND_TAKEN => {
                    recorded.ever_taken.insert(snapshot.time_us);
                    recorded.snapshots.push(snapshot)
                }
                _ => recorded.snapshots.retain(|s| s.id != snapshot.id),
            }
        }
        Ok((
            HistoryFile {
                file,
                path: path.to_path_buf(),
                end: valid_end,
            },
            recorded,
        ))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records that `snapshot` was taken, durably.
    pub fn taken(&mut self, snapshot: &Snapshot) -> Result<()> {
        self.append(KIND_TAKEN, snapshot)
    }

    /// Records that `snapshot` was deleted, durably.
    pub fn deleted(&mut self, snapshot: &Snapshot) -> Result<()> {
        self.append(KIND_DELETED, snapshot)
    }

    fn append(&mut self, kind: u8, snapshot: &Snapshot) -> Result<()> {
        let mut bytes = [0u8; 2 * RECORD_BYTES as usize];
        bytes[..RECORD_BYTES as usize].copy_from_slice(&encode(kind, snapshot));
        let mark = Snapshot {
            id: 0,
            time_us: 0,
            lsn: Lsn::ZERO,
        };
        bytes[RECORD_BYTES as usize..].copy_from_slice(&encode(KIND_MARK, &mark));
        self.file.write_at(self.end, &bytes)?;
        self.file.sync()?;
        self.end += bytes.len() as u64;
        Ok(())
    }
}

/// What a history file holds.
#[derive(Debug, Default)]
pub struct Recorded {
    /// Snapshots not deleted, oldest first.
    pub snapshots: Vec<Snapshot>,
    /// Highest id ever recorded.
    pub id_max: u64,
    /// Latest time ever recorded.
    pub time_max: u64,
    /// Times of every snapshot whose taking became durable, deleted ones included: page
    /// copies labelled with any other time were made for a snapshot a crash cut.
    pub ever_taken: std::collections::HashSet<u64>,
}

fn encode(kind: u8, snapshot: &Snapshot) -> [u8; RECORD_BYTES as usize] {
    let mut out = [0u8; RECORD_BYTES as usize];
    put_u32(&mut out, 0, RECORD_MAGIC);
    put_u16(&mut out, 4, RECORD_VERSION);
    out[6] = kind;
    put_u64(&mut out, 8, snapshot.id);
    put_u64(&mut out, 16, snapshot.time_us);
    put_u64(&mut out, 24, snapshot.lsn.0);
    let crc = crc32c(&out[..32]);
    put_u32(&mut out, 32, crc);
    out
}

fn decode(record: &[u8]) -> std::result::Result<(u8, Snapshot), String> {
    if get_u32(record, 0) != RECORD_MAGIC {
        return Err("wrong magic".into());
    }
    if get_u32(record, 32) != crc32c(&record[..32]) {
        return Err("checksum mismatch".into());
    }
    let version = get_u16(record, 4);
    if version != RECORD_VERSION {
        return Err(format!(
            "format version {version}; this build reads {RECORD_VERSION}"
        ));
    }
    let kind = record[6];
    if kind > KIND_DELETED {
        return Err(format!("unknown record kind {kind}"));
    }
    Ok((
        kind,
        Snapshot {
            id: get_u64(record, 8),
            time_us: get_u64(record, 16),
            lsn: Lsn(get_u64(record, 24)),
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lodestore_storage::MemoryFileSystem;

    fn snapshot(id: u64) -> Snapshot {
        Snapshot {
            id,
            time_us: 1000 * id,
            lsn: Lsn(100 * id),
        }
    }

    #[test]
    fn taken_and_deleted_snapshots_come_back_and_a_torn_tail_goes() {
        let fs = MemoryFileSystem::new();
        let path = Path::new("/history");
        let (mut history, recorded) = HistoryFile::open(&fs, path).unwrap();
        assert!(recorded.snapshots.is_empty());
        for id in 1..=3 {
            history.taken(&snapshot(id)).unwrap();
        }
        history.deleted(&snapshot(2)).unwrap();
        drop(history);
        let raw = fs.open(path, OpenMode::Existing).unwrap();
        // Half a record at the end, as a crash in the middle of a write leaves it.
        raw.write_at(8 * RECORD_BYTES, &encode(KIND_TAKEN, &snapshot(4))[..20])
            .unwrap();
        let (_, recorded) = HistoryFile::open(&fs, path).unwrap();
        assert_eq!(recorded.snapshots, vec![snapshot(1), snapshot(3)]);
        assert_eq!((recorded.id_max, recorded.time_max), (3, 3000));
        assert_eq!(raw.len().unwrap(), 8 * RECORD_BYTES);
        // Damage to the last record, durable with its mark after it, is an error naming the
        // offset, not a torn write.
        raw.write_at(6 * RECORD_BYTES + 9, &[0xee]).unwrap();
        let err = HistoryFile::open(&fs, path).err().unwrap();
        assert!(err.to_string().contains("byte 240"), "{err}");
    }
}
