//! Where a store's snapshot pages are archived, recorded beside its history. A store that had
//! archived pages on archive nodes and were opened with its local archive instead would find
//! no copy of those pages there and serve the present for the past: a wrong page. With the
//! location recorded, the store notices, and reads of the past fail with an error naming both
//! places until it is opened with the archive its pages went to.
//!
//! ```text
//! file archive-location
//!  0  8 magic "LSARCLOC"
//!  8  2 format version (LOCATION_VERSION)
//! 10  2 length of the location in bytes (at most LOCATION_BYTES_MAX)
//! 12  4 crc32c of bytes 0..12 and the location
//! 16    the location, UTF-8 (`Archive::location`: `local`, or the nodes of a remote one)
//! ```
//!
//! Written whole to a temporary file, synced, then renamed over the old one: a crash leaves
//! the old location or the new one.

use lodestore_core::checksum::crc32c;
use lodestore_core::{Error, Result};
use lodestore_storage::{FileSystem, OpenMode};
use std::path::{Path, PathBuf};

const MAGIC: &[u8; 8] = b"LSARCLOC";
const LOCATION_VERSION: u16 = 1;
const HEADER_BYTES: usize = 16;
/// Longest location recorded (a remote archive's nodes, named in full).
pub const LOCATION_BYTES_MAX: usize = 4096;

/// The location recorded at `path`, if a file is there.
pub fn read(fs: &dyn FileSystem, path: &Path) -> Result<Option<String>> {
    if !fs.exists(path) {
        return Ok(None);
    }
    let file = fs.open(path, OpenMode::ReadOnly)?;
    let len = file.len()? as usize;
    let corrupt = |reason: String| Error::CorruptFile {
        path: path.to_path_buf(),
        reason,
    };
    if !(HEADER_BYTES..=HEADER_BYTES + LOCATION_BYTES_MAX).contains(&len) {
        return Err(corrupt(format!("{len} bytes is no archive location")));
    }
    let mut bytes = vec![0u8; len];
    file.read_at(0, &mut bytes)?;
    if &bytes[..8] != MAGIC {
        return Err(corrupt("not an archive location (bad magic)".into()));
    }
    let version = u16::from_le_bytes([bytes[8], bytes[9]]);
    if version != LOCATION_VERSION {
        return Err(Error::UnsupportedFormat {
            path: path.to_path_buf(),
            structure: "archive location",
            found: u32::from(version),
            supported: u32::from(LOCATION_VERSION),
        });
    }
    let length = usize::from(u16::from_le_bytes([bytes[10], bytes[11]]));
    if HEADER_BYTES + length != len {
        return Err(corrupt(format!(
            "says {length} bytes of location in a file of {len}"
        )));
    }
    let stored = u32::from_le_bytes(bytes[12..16].try_into().expect("four bytes"));
    if stored != checksum(&bytes[..12], &bytes[HEADER_BYTES..]) {
        return Err(corrupt("checksum mismatch".into()));
    }
    String::from_utf8(bytes[HEADER_BYTES..].to_vec())
        .map(Some)
        .map_err(|_| corrupt("the location is not UTF-8".into()))
}

/// Records `location` at `path`, durably, replacing what was there.
pub fn write(fs: &dyn FileSystem, path: &Path, location: &str) -> Result<()> {
    let length = location.len();
    if length > LOCATION_BYTES_MAX {
        return Err(Error::InvalidArgument(format!(
            "an archive location of {length} bytes; at most {LOCATION_BYTES_MAX}"
        )));
    }
    let mut bytes = Vec::with_capacity(HEADER_BYTES + length);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&LOCATION_VERSION.to_le_bytes());
    bytes.extend_from_slice(&(length as u16).to_le_bytes());
    let sum = checksum(&bytes, location.as_bytes());
    bytes.extend_from_slice(&sum.to_le_bytes());
    bytes.extend_from_slice(location.as_bytes());
    let temporary = temporary_path(path);
    if fs.exists(&temporary) {
        fs.remove(&temporary)?;
    }
    let file = fs.open(&temporary, OpenMode::CreateNew)?;
    file.write_at(0, &bytes)?;
    file.sync()?;
    drop(file);
    fs.rename(&temporary, path)
}

fn checksum(header: &[u8], location: &[u8]) -> u32 {
    let mut all = header.to_vec();
    all.extend_from_slice(location);
    crc32c(&all)
}

fn temporary_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".writing");
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lodestore_storage::MemoryFileSystem;

    #[test]
    fn a_location_reads_back_and_damage_is_named() {
        let fs = MemoryFileSystem::new();
        let path = Path::new("/archive-location");
        assert_eq!(read(&fs, path).unwrap(), None);
        write(&fs, path, "local").unwrap();
        assert_eq!(read(&fs, path).unwrap().as_deref(), Some("local"));
        write(&fs, path, "lodestore://10.0.0.1:7448,10.0.0.2:7448").unwrap();
        assert_eq!(
            read(&fs, path).unwrap().as_deref(),
            Some("lodestore://10.0.0.1:7448,10.0.0.2:7448")
        );
        let file = fs.open(path, OpenMode::Existing).unwrap();
        file.write_at(20, b"X").unwrap();
        let err = read(&fs, path).unwrap_err();
        assert!(err.to_string().contains("checksum"), "{err}");
        assert!(write(&fs, path, &"x".repeat(LOCATION_BYTES_MAX + 1)).is_err());
    }
}
