//! Session counters kept with the store, so `lodestore info` can show what the sessions of
//! earlier processes did: per scheme, the sum of every session that ended before its store
//! was closed (traps, pieces copied, bytes compared, log records and bytes, pages shipped,
//! time by Hosking's phases, ...).
//!
//! ```text
//! file `session-counters` in the store's folder
//!  0  8 magic "LDSCOUNT"
//!  8  4 format version (1)
//! 12  4 crc32c of bytes 16..
//! 16  8 body length
//! 24    body: u32 schemes; per scheme: u16 name length, name, u16 counters; per counter:
//!       u16 name length, name, u64 value (all little-endian)
//! ```
//! Counters are named in the file, so a later build can add counters without a new format.
//! The file is replaced whole (written beside it, synced, renamed). Counters are a report, not
//! data: a file that fails its checks is named in the error and never stops the store.

use lodestore_client::session::ClientStats;
use lodestore_client::DetectionStats;
use lodestore_core::checksum::crc32c;
use lodestore_core::{Error, Result};
use lodestore_storage::{FileSystem, OpenMode};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const COUNTERS_FILE_NAME: &str = "session-counters";
const MAGIC: [u8; 8] = *b"LDSCOUNT";
const FORMAT_VERSION: u32 = 1;
const HEADER_BYTES: usize = 24;
/// Larger files are refused rather than read: a few schemes of a few dozen counters is all
/// the file ever holds.
const FILE_BYTES_MAX: u64 = 1 << 20;

/// Counter name to value.
pub type Counters = BTreeMap<String, u64>;
/// Scheme name to its counters.
pub type CountersByScheme = BTreeMap<String, Counters>;

/// The counters of one session.
pub(crate) fn of_session(client: &ClientStats, detection: &DetectionStats) -> Counters {
    let us = |d: std::time::Duration| d.as_micros() as u64;
    [
        ("sessions", 1),
        ("commits", client.commits),
        ("aborts", client.aborts),
        ("lock_requests", client.lock_requests),
        ("pages_fetched", client.pages_fetched),
        ("pages_shipped", client.pages_shipped),
        ("log_pages_shipped", client.log_pages_shipped),
        ("evictions", client.evictions),
        ("traps", detection.traps),
        ("pages_copied", detection.pages_copied),
        ("pieces_copied", detection.pieces_copied),
        ("bytes_copied", detection.bytes_copied),
        ("bytes_compared", detection.bytes_compared),
        ("cards_scanned", detection.cards_scanned),
        ("objects_scanned", detection.objects_scanned),
        ("pages_found_written", detection.pages_found_written),
        ("buffer_evictions", detection.buffer_evictions),
        ("log_records", detection.log_records),
        ("log_bytes", detection.log_bytes),
        ("running_us", us(client.phases.running)),
        ("old_objects_us", us(client.phases.old_objects)),
        ("new_objects_us", us(client.phases.new_objects)),
        ("write_us", us(client.phases.write)),
        ("other_us", us(client.phases.other)),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_string(), value))
    .collect()
}

/// Adds `more` into `total`, counter by counter.
pub fn add(total: &mut CountersByScheme, more: &CountersByScheme) {
    for (scheme, counters) in more {
        let into = total.entry(scheme.clone()).or_default();
        for (name, value) in counters {
            let sum = into.entry(name.clone()).or_default();
            *sum = sum.saturating_add(*value);
        }
    }
}

fn file_path(store: &Path) -> PathBuf {
    store.join(COUNTERS_FILE_NAME)
}

/// The counters kept with the store in `store` (empty when none were kept yet).
pub fn read(fs: &dyn FileSystem, store: &Path) -> Result<CountersByScheme> {
    let path = file_path(store);
    if !fs.exists(&path) {
        return Ok(CountersByScheme::new());
    }
    let file = fs.open(&path, OpenMode::ReadOnly)?;
    let len = file.len()?;
    let corrupt = |reason: String| Error::CorruptFile {
        path: path.clone(),
        reason,
    };
    if !(HEADER_BYTES as u64..=FILE_BYTES_MAX).contains(&len) {
        return Err(corrupt(format!("{len} bytes is no counters file")));
    }
    let mut bytes = vec![0u8; len as usize];
    file.read_at(0, &mut bytes)?;
    decode(&bytes).map_err(corrupt)
}

/// Adds `more` to the counters kept with the store in `store`. A damaged file is replaced
/// (with a warning): the counters are a report.
pub fn add_to_file(fs: &dyn FileSystem, store: &Path, more: &CountersByScheme) -> Result<()> {
    let mut total = match read(fs, store) {
        Ok(total) => total,
        Err(e) => {
            tracing::warn!(error = %e, "session counters unreadable; starting them again");
            CountersByScheme::new()
        }
    };
    add(&mut total, more);
    let path = file_path(store);
    let temporary = store.join(format!("{COUNTERS_FILE_NAME}.new"));
    if fs.exists(&temporary) {
        fs.remove(&temporary)?;
    }
    let file = fs.open(&temporary, OpenMode::CreateNew)?;
    file.write_at(0, &encode(&total))?;
    file.sync()?;
    drop(file);
    fs.rename(&temporary, &path)
}

fn encode(counters: &CountersByScheme) -> Vec<u8> {
    let mut body = Vec::new();
    let put_name = |body: &mut Vec<u8>, name: &str| {
        let name = &name.as_bytes()[..name.len().min(u16::MAX as usize)];
        body.extend_from_slice(&(name.len() as u16).to_le_bytes());
        body.extend_from_slice(name);
    };
    body.extend_from_slice(&(counters.len() as u32).to_le_bytes());
    for (scheme, values) in counters {
        put_name(&mut body, scheme);
        body.extend_from_slice(&(values.len().min(u16::MAX as usize) as u16).to_le_bytes());
        for (name, value) in values.iter().take(u16::MAX as usize) {
            put_name(&mut body, name);
            body.extend_from_slice(&value.to_le_bytes());
        }
    }
    let mut file = Vec::with_capacity(HEADER_BYTES + body.len());
    file.extend_from_slice(&MAGIC);
    file.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    file.extend_from_slice(&[0; 4]);
    file.extend_from_slice(&(body.len() as u64).to_le_bytes());
    file.extend_from_slice(&body);
    let crc = crc32c(&file[16..]);
    file[12..16].copy_from_slice(&crc.to_le_bytes());
    file
}

fn decode(bytes: &[u8]) -> std::result::Result<CountersByScheme, String> {
    if bytes.len() < HEADER_BYTES || bytes[0..8] != MAGIC {
        return Err("not a counters file (magic)".into());
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if version != FORMAT_VERSION {
        return Err(format!(
            "counters format version {version}; this build reads {FORMAT_VERSION}"
        ));
    }
    let stored = u32::from_le_bytes(bytes[12..16].try_into().expect("4 bytes"));
    let computed = crc32c(&bytes[16..]);
    if stored != computed {
        return Err(format!(
            "checksum mismatch: stored {stored:#010x}, computed {computed:#010x}"
        ));
    }
    let body_len = u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes"));
    if body_len != (bytes.len() - HEADER_BYTES) as u64 {
        return Err(format!("body length {body_len} does not match the file"));
    }
    let mut reader = Reader {
        bytes: &bytes[HEADER_BYTES..],
        at: 0,
    };
    let mut counters = CountersByScheme::new();
    for _ in 0..reader.u32()? {
        let scheme = reader.name()?;
        let values = counters.entry(scheme).or_default();
        for _ in 0..reader.u16()? {
            let name = reader.name()?;
            let value = reader.u64()?;
            values.insert(name, value);
        }
    }
    if reader.at != reader.bytes.len() {
        return Err("bytes after the last counter".into());
    }
    Ok(counters)
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> std::result::Result<&[u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| format!("body ends inside a field at byte {}", self.at))?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    fn u16(&mut self) -> std::result::Result<u16, String> {
        Ok(u16::from_le_bytes(
            self.take(2)?.try_into().expect("2 bytes"),
        ))
    }

    fn u32(&mut self) -> std::result::Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().expect("4 bytes"),
        ))
    }

    fn u64(&mut self) -> std::result::Result<u64, String> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }

    fn name(&mut self) -> std::result::Result<String, String> {
        let len = self.u16()? as usize;
        let at = self.at;
        String::from_utf8(self.take(len)?.to_vec())
            .map_err(|_| format!("name at byte {at} is not UTF-8"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lodestore_storage::MemoryFileSystem;
    use proptest::prelude::*;

    fn sample() -> CountersByScheme {
        let mut counters = CountersByScheme::new();
        counters.insert(
            "PD-ESM".into(),
            [("sessions".to_string(), 2), ("traps".to_string(), 495)].into(),
        );
        counters.insert("SD-ESM".into(), [("log_bytes".to_string(), 9)].into());
        counters
    }

    #[test]
    fn counters_add_up_across_closes() {
        let fs = MemoryFileSystem::new();
        let store = Path::new("/s");
        fs.create_dir_all(store).unwrap();
        assert!(read(&fs, store).unwrap().is_empty());
        add_to_file(&fs, store, &sample()).unwrap();
        add_to_file(&fs, store, &sample()).unwrap();
        let total = read(&fs, store).unwrap();
        assert_eq!(total["PD-ESM"]["traps"], 990);
        assert_eq!(total["PD-ESM"]["sessions"], 4);
        assert_eq!(total["SD-ESM"]["log_bytes"], 18);
    }

    proptest! {
        /// Any flipped bit, and any shortening, is refused by name, never misread.
        #[test]
        fn damage_is_refused(at in 0usize..200, bit in 0u8..8, cut in 0usize..200) {
            let bytes = encode(&sample());
            let mut flipped = bytes.clone();
            let at = at % flipped.len();
            flipped[at] ^= 1 << bit;
            prop_assert!(decode(&flipped).is_err());
            let cut = cut % bytes.len();
            prop_assert!(decode(&bytes[..cut]).is_err());
            prop_assert_eq!(decode(&bytes).unwrap(), sample());
        }
    }
}
