//! The log anchor, `log/anchor`: the highest segment the log has opened. Segment files alone
//! cannot say that one is missing at the end (a log whose last segment was deleted looks like a
//! log that simply ended there), so the log records each new segment here before it writes a
//! record into it. Opening checks that every segment up to the recorded one is present.
//!
//! Two slots of 4096 bytes, written in turn (generation g goes to slot g % 2) and synced, so a
//! torn write of one leaves the other: at worst the anchor then names the segment before the
//! newest, which has no records in the newer one yet to lose.
//!
//! ```text
//! slot (4096 bytes)
//!  0  4 crc32c of bytes 4..64
//!  4  4 anchor format version (ANCHOR_FORMAT_VERSION)
//!  8  8 magic "LODEANCH"
//! 16  8 generation            incremented by every write
//! 24  8 highest segment       the newest segment the log has opened
//! 32    zeros
//! ```

use lodestore_core::checksum::crc32c;
use lodestore_core::{Error, Result};
use lodestore_storage::{FileSystem, OpenMode, Storage};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub const ANCHOR_FILE_NAME: &str = "anchor";
pub const ANCHOR_FORMAT_VERSION: u32 = 1;
pub const ANCHOR_MAGIC: [u8; 8] = *b"LODEANCH";
const SLOT_BYTES: usize = 4096;
/// Bytes of a slot the checksum covers (the rest must be zero).
const SEALED_BYTES: usize = 64;
pub const ANCHOR_BYTES: u64 = 2 * SLOT_BYTES as u64;
const _: () = assert!(SEALED_BYTES <= SLOT_BYTES && SLOT_BYTES.is_power_of_two());

pub fn anchor_path(log_dir: &Path) -> PathBuf {
    log_dir.join(ANCHOR_FILE_NAME)
}

/// The open anchor file and what it says.
pub(crate) struct Anchor {
    file: Arc<dyn Storage>,
    generation: u64,
    highest_segment: u64,
}

impl Anchor {
    /// Creates the anchor of a new log whose only segment is `highest_segment`: both slots
    /// written under a temporary name, synced, then renamed into place.
    pub fn create(fs: &dyn FileSystem, log_dir: &Path, highest_segment: u64) -> Result<Anchor> {
        let temporary = log_dir.join("creating-anchor");
        if fs.exists(&temporary) {
            fs.remove(&temporary)?;
        }
        let file = fs.open(&temporary, OpenMode::CreateNew)?;
        let mut bytes = encode_slot(0, highest_segment);
        bytes.extend_from_slice(&encode_slot(1, highest_segment));
        file.write_at(0, &bytes)?;
        file.sync()?;
        drop(file);
        let path = anchor_path(log_dir);
        fs.rename(&temporary, &path)?;
        Ok(Anchor {
            file: fs.open(&path, OpenMode::Existing)?,
            generation: 1,
            highest_segment,
        })
    }

    /// Opens and reads the anchor of the log in `log_dir`.
    pub fn open(fs: &dyn FileSystem, log_dir: &Path) -> Result<Anchor> {
        let path = anchor_path(log_dir);
        if !fs.exists(&path) {
            return Err(Error::CorruptLog {
                path,
                offset: 0,
                reason: "the log anchor is missing, so nothing says which log segments should \
                         exist (a store made by this build always has one)"
                    .into(),
            });
        }
        let file = fs.open(&path, OpenMode::Existing)?;
        let (generation, highest_segment) = read(file.as_ref())?;
        Ok(Anchor {
            file,
            generation,
            highest_segment,
        })
    }

    /// The newest segment the log has opened.
    pub fn highest_segment(&self) -> u64 {
        self.highest_segment
    }

    /// Records that segment `index` exists and may now receive records.
    pub fn record(&mut self, index: u64) -> Result<()> {
        if index <= self.highest_segment {
            return Ok(());
        }
        let generation = self.generation + 1;
        let slot = generation % 2;
        self.file
            .write_at(slot * SLOT_BYTES as u64, &encode_slot(generation, index))?;
        self.file.sync()?;
        self.generation = generation;
        self.highest_segment = index;
        Ok(())
    }
}

fn encode_slot(generation: u64, highest_segment: u64) -> Vec<u8> {
    let mut slot = vec![0u8; SLOT_BYTES];
    slot[4..8].copy_from_slice(&ANCHOR_FORMAT_VERSION.to_le_bytes());
    slot[8..16].copy_from_slice(&ANCHOR_MAGIC);
    slot[16..24].copy_from_slice(&generation.to_le_bytes());
    slot[24..32].copy_from_slice(&highest_segment.to_le_bytes());
    let crc = crc32c(&slot[4..SEALED_BYTES]);
    slot[0..4].copy_from_slice(&crc.to_le_bytes());
    slot
}

/// What one slot holds: `(generation, highest segment)`, or why it is not valid.
fn decode_slot(slot: &[u8]) -> std::result::Result<(u64, u64), SlotError> {
    let word = |at: usize| u64::from_le_bytes(slot[at..at + 8].try_into().expect("8 bytes"));
    if slot[8..16] != ANCHOR_MAGIC {
        return Err(SlotError::Damaged("bad magic".into()));
    }
    let version = u32::from_le_bytes(slot[4..8].try_into().expect("4 bytes"));
    if version > ANCHOR_FORMAT_VERSION {
        return Err(SlotError::Newer(version));
    }
    let stored = u32::from_le_bytes(slot[0..4].try_into().expect("4 bytes"));
    if stored != crc32c(&slot[4..SEALED_BYTES]) {
        return Err(SlotError::Damaged("checksum mismatch".into()));
    }
    if version != ANCHOR_FORMAT_VERSION {
        return Err(SlotError::Damaged(format!(
            "format version {version} was never written"
        )));
    }
    if slot[SEALED_BYTES..].iter().any(|&b| b != 0) {
        return Err(SlotError::Damaged("bytes past the sealed fields".into()));
    }
    Ok((word(16), word(24)))
}

enum SlotError {
    Newer(u32),
    Damaged(String),
}

fn read(file: &dyn Storage) -> Result<(u64, u64)> {
    let path = file.path().to_path_buf();
    let length = file.len()?;
    if length != ANCHOR_BYTES {
        return Err(Error::CorruptLog {
            path,
            offset: 0,
            reason: format!("the log anchor is {length} bytes, not {ANCHOR_BYTES}"),
        });
    }
    let mut bytes = vec![0u8; ANCHOR_BYTES as usize];
    file.read_at(0, &mut bytes)?;
    let mut best: Option<(u64, u64)> = None;
    let mut reasons = Vec::new();
    for (slot, chunk) in bytes.chunks(SLOT_BYTES).enumerate() {
        match decode_slot(chunk) {
            Ok(found) => {
                if best.is_none_or(|(generation, _)| found.0 > generation) {
                    best = Some(found);
                }
            }
            Err(SlotError::Newer(found)) => {
                return Err(Error::UnsupportedFormat {
                    path,
                    structure: "log anchor",
                    found,
                    supported: ANCHOR_FORMAT_VERSION,
                })
            }
            Err(SlotError::Damaged(reason)) => reasons.push(format!("slot {slot}: {reason}")),
        }
    }
    best.ok_or_else(|| Error::CorruptLog {
        path,
        offset: 0,
        reason: format!(
            "both copies of the log anchor are damaged ({})",
            reasons.join("; ")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use lodestore_storage::MemoryFileSystem;

    #[test]
    fn records_survive_reopen_and_a_damaged_slot_falls_back_to_the_other() {
        let fs = MemoryFileSystem::new();
        let dir = Path::new("/s/log");
        fs.create_dir_all(dir).unwrap();
        let mut anchor = Anchor::create(&fs, dir, 1).unwrap();
        anchor.record(2).unwrap();
        anchor.record(3).unwrap();
        // An older segment never moves the anchor back.
        anchor.record(2).unwrap();
        assert_eq!(Anchor::open(&fs, dir).unwrap().highest_segment(), 3);
        // Generation 3 went to slot 1; damaging it leaves slot 0's generation 2.
        fs.with_file(&anchor_path(dir), |bytes| bytes[SLOT_BYTES + 20] ^= 1);
        assert_eq!(Anchor::open(&fs, dir).unwrap().highest_segment(), 2);
        fs.with_file(&anchor_path(dir), |bytes| bytes[20] ^= 1);
        let error = Anchor::open(&fs, dir).err().expect("both slots damaged");
        assert!(error.to_string().contains("both copies"), "{error}");
    }

    #[test]
    fn missing_short_and_newer_anchors_are_named() {
        let fs = MemoryFileSystem::new();
        let dir = Path::new("/s/log");
        fs.create_dir_all(dir).unwrap();
        let error = Anchor::open(&fs, dir).err().expect("no anchor");
        assert!(error.to_string().contains("anchor is missing"), "{error}");
        Anchor::create(&fs, dir, 1).unwrap();
        fs.with_file(&anchor_path(dir), |bytes| bytes.truncate(100));
        let error = Anchor::open(&fs, dir).err().expect("short anchor");
        assert!(error.to_string().contains("100 bytes"), "{error}");
        fs.remove(&anchor_path(dir)).unwrap();
        Anchor::create(&fs, dir, 1).unwrap();
        fs.with_file(&anchor_path(dir), |bytes| bytes[4] = 9);
        assert!(matches!(
            Anchor::open(&fs, dir),
            Err(Error::UnsupportedFormat { found: 9, .. })
        ));
        // Version 0 was never written: damage, not an old format.
        fs.with_file(&anchor_path(dir), |bytes| {
            bytes[4] = 0;
            let crc = crc32c(&bytes[4..SEALED_BYTES]);
            bytes[0..4].copy_from_slice(&crc.to_le_bytes());
            bytes[SLOT_BYTES + 4] = 0;
        });
        let error = Anchor::open(&fs, dir).err().expect("version 0");
        assert!(error.to_string().contains("never written"), "{error}");
    }
}
