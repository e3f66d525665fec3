//! The anchor of differential logging, `differential/anchor`: the last complete checkpoint,
//! which names the backup image a restart loads (checkpoint `k` wrote backup `k % 2`, and its
//! BackupID is `k`'s parity), how many pages that backup holds, and where the checkpoint's
//! marks lie in each log stream. A checkpoint writes it last, after its pages are synced in the
//! backup and every stream is durable through its end mark.
//!
//! Two slots of 4096 bytes (generation g in slot g % 2), both rewritten by each checkpoint,
//! one after the other, each synced: a torn write leaves the other slot, which names the
//! checkpoint before (its backup is the one the torn checkpoint did not write), and a slot
//! damaged at rest leaves its twin naming the same checkpoint.
//!
//! ```text
//! slot (4096 bytes)
//!  0  4 crc32c of bytes 4..40 + 16 x streams
//!  4  4 anchor format version (1)
//!  8  8 magic "LODEDIFF"
//! 16  8 generation
//! 24  8 checkpoint number (0: the backups as created)
//! 32  4 pages in the checkpoint's backup
//! 36  2 log streams (1..=64)
//! 38  2 zero
//! 40    per stream: u64 LSN of the begin mark, u64 LSN of the end mark (0, 0: none yet)
//!       zeros to the end of the slot
//! ```

use crate::restart::Window;
use lodestore_core::checksum::crc32c;
use lodestore_core::{Error, Lsn, Result};
use lodestore_storage::{FileSystem, OpenMode, Storage};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub const ANCHOR_FILE_NAME: &str = "anchor";
pub const ANCHOR_FORMAT_VERSION: u32 = 1;
const MAGIC: [u8; 8] = *b"LODEDIFF";
const SLOT_BYTES: usize = 4096;
const HEADER_BYTES: usize = 40;
/// Most log streams a store may have.
pub const STREAMS_MAX: usize = 64;
const _: () = assert!(HEADER_BYTES + 16 * STREAMS_MAX <= SLOT_BYTES);

/// What the anchor records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpointed {
    pub checkpoint: u64,
    pub page_count: u32,
    pub windows: Vec<Window>,
}

impl Checkpointed {
    /// The backup image this checkpoint wrote (0 or 1).
    pub fn backup(&self) -> usize {
        (self.checkpoint % 2) as usize
    }

    /// The BackupID the checkpoint gave every page.
    pub fn backup_id(&self) -> bool {
        self.checkpoint % 2 == 1
    }
}

pub fn anchor_path(dir: &Path) -> PathBuf {
    dir.join(ANCHOR_FILE_NAME)
}

/// The open anchor file.
pub struct Anchor {
    file: Arc<dyn Storage>,
    generation: u64,
}

impl std::fmt::Debug for Anchor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Anchor")
            .field("path", &self.file.path())
            .field("generation", &self.generation)
            .finish()
    }
}

impl Anchor {
    /// Creates the anchor in `dir` (both slots, under a temporary name, synced, renamed).
    pub fn create(fs: &dyn FileSystem, dir: &Path, first: &Checkpointed) -> Result<Anchor> {
        check_streams(dir, first.windows.len())?;
        let temporary = dir.join("creating-anchor");
        if fs.exists(&temporary) {
            fs.remove(&temporary)?;
        }
        let file = fs.open(&temporary, OpenMode::CreateNew)?;
        let mut bytes = encode(0, first);
        bytes.extend_from_slice(&encode(1, first));
        file.write_at(0, &bytes)?;
        file.sync()?;
        drop(file);
        fs.rename(&temporary, &anchor_path(dir))?;
        Ok(Anchor {
            file: fs.open(&anchor_path(dir), OpenMode::Existing)?,
            generation: 1,
        })
    }

    /// Opens the anchor in `dir` and reads the newer valid slot.
    pub fn open(fs: &dyn FileSystem, dir: &Path) -> Result<(Anchor, Checkpointed)> {
        Anchor::open_with(fs, dir, OpenMode::Existing)
    }

    /// What the anchor in `dir` records, the file opened read-only (inspection tools).
    pub fn read(fs: &dyn FileSystem, dir: &Path) -> Result<Checkpointed> {
        Ok(Anchor::open_with(fs, dir, OpenMode::ReadOnly)?.1)
    }

    fn open_with(
        fs: &dyn FileSystem,
        dir: &Path,
        mode: OpenMode,
    ) -> Result<(Anchor, Checkpointed)> {
        let path = anchor_path(dir);
        if !fs.exists(&path) {
            return Err(Error::CorruptFile {
                path,
                reason: "the differential logging anchor is missing".into(),
            });
        }
        let file = fs.open(&path, mode)?;
        let mut bytes = vec![0u8; 2 * SLOT_BYTES];
        let len = file.len()? as usize;
        if len != bytes.len() {
            return Err(Error::CorruptFile {
                path,
                reason: format!("{len} bytes long, not the anchor's {}", bytes.len()),
            });
        }
        file.read_at(0, &mut bytes)?;
        let slots = [decode(&bytes[..SLOT_BYTES]), decode(&bytes[SLOT_BYTES..])];
        let newest = slots
            .iter()
            .filter_map(|s| s.as_ref().ok())
            .max_by_key(|(generation, _)| *generation)
            .cloned();
        match newest {
            Some((generation, checkpointed)) => Ok((Anchor { file, generation }, checkpointed)),
            None => {
                let reasons: Vec<String> = slots
                    .into_iter()
                    .enumerate()
                    .map(|(i, s)| format!("slot {i}: {}", s.err().unwrap_or_default()))
                    .collect();
                Err(Error::CorruptFile {
                    path,
                    reason: format!("no valid slot ({})", reasons.join("; ")),
                })
            }
        }
    }

    /// Records `done` as the last complete checkpoint: the older slot first, synced, then the
    /// other, synced. A write torn by a crash leaves the other slot naming the checkpoint
    /// before (whose backup this one did not touch, so falling back to it is safe); once both
    /// are written, a slot damaged later (a flipped bit) leaves its twin, never a fall back to
    /// a checkpoint whose backup a later one may have half overwritten.
    pub fn record(&mut self, done: &Checkpointed) -> Result<()> {
        check_streams(self.file.path(), done.windows.len())?;
        for _ in 0..2 {
            let generation = self.generation + 1;
            let slot = (generation % 2) * SLOT_BYTES as u64;
            self.file.write_at(slot, &encode(generation, done))?;
            self.file.sync()?;
            self.generation = generation;
        }
        Ok(())
    }
}

fn check_streams(path: &Path, streams: usize) -> Result<()> {
    if (1..=STREAMS_MAX).contains(&streams) {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "{}: {streams} log streams; from 1 to {STREAMS_MAX}",
            path.display()
        )))
    }
}

fn sealed_len(streams: usize) -> usize {
    HEADER_BYTES + 16 * streams
}

fn encode(generation: u64, c: &Checkpointed) -> Vec<u8> {
    let mut slot = vec![0u8; SLOT_BYTES];
    slot[4..8].copy_from_slice(&ANCHOR_FORMAT_VERSION.to_le_bytes());
    slot[8..16].copy_from_slice(&MAGIC);
    slot[16..24].copy_from_slice(&generation.to_le_bytes());
    slot[24..32].copy_from_slice(&c.checkpoint.to_le_bytes());
    slot[32..36].copy_from_slice(&c.page_count.to_le_bytes());
    slot[36..38].copy_from_slice(&(c.windows.len() as u16).to_le_bytes());
    for (i, w) in c.windows.iter().enumerate() {
        let at = HEADER_BYTES + 16 * i;
        slot[at..at + 8].copy_from_slice(&w.begin.0.to_le_bytes());
        slot[at + 8..at + 16].copy_from_slice(&w.end.0.to_le_bytes());
    }
    let end = sealed_len(c.windows.len());
    let crc = crc32c(&slot[4..end]);
    slot[0..4].copy_from_slice(&crc.to_le_bytes());
    slot
}

fn decode(slot: &[u8]) -> std::result::Result<(u64, Checkpointed), String> {
    let u64_at = |at: usize| u64::from_le_bytes(slot[at..at + 8].try_into().unwrap());
    if slot[8..16] != MAGIC {
        return Err("bad magic".into());
    }
    let version = u32::from_le_bytes(slot[4..8].try_into().unwrap());
    if version != ANCHOR_FORMAT_VERSION {
        return Err(format!(
            "format version {version}; this build reads {ANCHOR_FORMAT_VERSION}"
        ));
    }
    let streams = u16::from_le_bytes(slot[36..38].try_into().unwrap()) as usize;
    if !(1..=STREAMS_MAX).contains(&streams) {
        return Err(format!("{streams} log streams"));
    }
    let end = sealed_len(streams);
    if u32::from_le_bytes(slot[0..4].try_into().unwrap()) != crc32c(&slot[4..end]) {
        return Err("checksum mismatch".into());
    }
    if slot[end..].iter().any(|&b| b != 0) || slot[38..40] != [0, 0] {
        return Err("bytes outside the sealed fields".into());
    }
    let windows = (0..streams)
        .map(|i| {
            let at = HEADER_BYTES + 16 * i;
            Window {
                begin: Lsn(u64_at(at)),
                end: Lsn(u64_at(at + 8)),
            }
        })
        .collect();
    Ok((
        u64_at(16),
        Checkpointed {
            checkpoint: u64_at(24),
            page_count: u32::from_le_bytes(slot[32..36].try_into().unwrap()),
            windows,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lodestore_storage::MemoryFileSystem as MemoryFs;

    fn state(checkpoint: u64) -> Checkpointed {
        Checkpointed {
            checkpoint,
            page_count: 40 + checkpoint as u32,
            windows: vec![
                Window {
                    begin: Lsn(4096 * checkpoint),
                    end: Lsn(4096 * checkpoint + 64),
                };
                3
            ],
        }
    }

    #[test]
    fn the_newest_whole_slot_wins_and_damage_is_named() {
        let fs = MemoryFs::new();
        let dir = Path::new("/s");
        fs.create_dir_all(dir).unwrap();
        let mut anchor = Anchor::create(&fs, dir, &state(0)).unwrap();
        anchor.record(&state(1)).unwrap();
        anchor.record(&state(2)).unwrap();
        assert_eq!(Anchor::open(&fs, dir).unwrap().1, state(2));
        assert_eq!(state(3).backup(), 1);
        assert!(state(3).backup_id());

        // Both slots name the newest checkpoint: one damaged slot leaves its twin.
        let file = fs.open(&anchor_path(dir), OpenMode::Existing).unwrap();
        file.write_at(SLOT_BYTES as u64, &[0xff; 32]).unwrap();
        assert_eq!(Anchor::open(&fs, dir).unwrap().1, state(2));
        // A record torn in its first slot leaves the checkpoint before in the second.
        let mut anchor = Anchor::open(&fs, dir).unwrap().0;
        anchor.record(&state(3)).unwrap();
        let first_slot = ((anchor.generation - 1) % 2) * SLOT_BYTES as u64;
        let other = SLOT_BYTES as u64 - first_slot;
        file.write_at(other, &encode(anchor.generation - 2, &state(2)))
            .unwrap();
        file.write_at(first_slot + 30, &[0x55]).unwrap();
        assert_eq!(Anchor::open(&fs, dir).unwrap().1, state(2));
        file.write_at(other + 20, &[1]).unwrap();
        let err = Anchor::open(&fs, dir).unwrap_err().to_string();
        assert!(
            err.contains("no valid slot") && err.contains("checksum"),
            "{err}"
        );
        file.set_len(100).unwrap();
        let err = Anchor::open(&fs, dir).unwrap_err().to_string();
        assert!(err.contains("100 bytes"), "{err}");
        fs.remove(&anchor_path(dir)).unwrap();
        assert!(Anchor::open(&fs, dir)
            .unwrap_err()
            .to_string()
            .contains("missing"));
        let mut none = state(0);
        none.windows.clear();
        assert!(Anchor::create(&fs, dir, &none).is_err());
    }
}
