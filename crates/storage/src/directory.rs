//! The named-roots directory: a small object (type `TypeId::ROOT_DIRECTORY`) mapping names to
//! OIDs. It lives in slot 0 of page 3, alone on its page, and the superblock records its OID.
//!
//! ```text
//!   0  4 entry count
//!   4  4 reserved, 0
//!   8    entries, sorted by name, names unique:
//!        8 OID, 2 name length (1..=255), name bytes (UTF-8)
//! ```

use crate::bytes::{get_u16, get_u32, get_u64, put_u16, put_u32, put_u64};
use lodestore_core::limits::ROOT_NAME_BYTES_MAX;
use lodestore_core::{Error, Oid, PageId, Result};
use std::collections::BTreeMap;

/// The page the directory lives on.
pub const DIRECTORY_PAGE: PageId = PageId(3);
const HEADER_BYTES: usize = 8;
const ENTRY_FIXED_BYTES: usize = 10;

/// Checks a root name.
pub fn validate_name(name: &str) -> Result<()> {
    if name.is_empty() || name.len() > ROOT_NAME_BYTES_MAX {
        return Err(Error::InvalidArgument(format!(
            "root name must be 1 to {ROOT_NAME_BYTES_MAX} bytes, got {}",
            name.len()
        )));
    }
    Ok(())
}

/// Bytes the encoding of `roots` takes.
pub fn encoded_len(roots: &BTreeMap<String, Oid>) -> usize {
    HEADER_BYTES
        + roots
            .keys()
            .map(|name| ENTRY_FIXED_BYTES + name.len())
            .sum::<usize>()
}

pub fn encode(roots: &BTreeMap<String, Oid>, out: &mut [u8]) {
    assert_eq!(out.len(), encoded_len(roots));
    put_u32(out, 0, roots.len() as u32);
    put_u32(out, 4, 0);
    let mut at = HEADER_BYTES;
    for (name, oid) in roots {
        put_u64(out, at, oid.0);
        put_u16(out, at + 8, name.len() as u16);
        out[at + ENTRY_FIXED_BYTES..at + ENTRY_FIXED_BYTES + name.len()]
            .copy_from_slice(name.as_bytes());
        at += ENTRY_FIXED_BYTES + name.len();
    }
}

/// Decodes and checks the directory; the error string says what is wrong.
pub fn decode(bytes: &[u8]) -> std::result::Result<BTreeMap<String, Oid>, String> {
    if bytes.len() < HEADER_BYTES {
        return Err("root directory shorter than its header".into());
    }
    let count = get_u32(bytes, 0) as usize;
    if get_u32(bytes, 4) != 0 {
        return Err("root directory reserved bytes are not zero".into());
    }
    let mut roots = BTreeMap::new();
    let mut at = HEADER_BYTES;
    let mut previous: Option<String> = None;
    for i in 0..count {
        if at + ENTRY_FIXED_BYTES > bytes.len() {
            return Err(format!("root directory entry {i} runs past the end"));
        }
        let oid = Oid(get_u64(bytes, at));
        let len = get_u16(bytes, at + 8) as usize;
        let start = at + ENTRY_FIXED_BYTES;
        if len == 0 || len > ROOT_NAME_BYTES_MAX || start + len > bytes.len() {
            return Err(format!(
                "root directory entry {i} has a bad name length {len}"
            ));
        }
        let name = std::str::from_utf8(&bytes[start..start + len])
            .map_err(|_| format!("root directory entry {i} name is not UTF-8"))?
            .to_string();
        if previous.as_ref().is_some_and(|p| *p >= name) {
            return Err(format!("root directory entry {i} is out of order"));
        }
        previous = Some(name.clone());
        roots.insert(name, oid);
        at = start + len;
    }
    if at != bytes.len() {
        return Err(format!(
            "root directory has {} trailing bytes",
            bytes.len() - at
        ));
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut roots = BTreeMap::new();
        roots.insert("bank".to_string(), Oid(77));
        roots.insert("a".to_string(), Oid(5));
        let mut bytes = vec![0u8; encoded_len(&roots)];
        encode(&roots, &mut bytes);
        assert_eq!(decode(&bytes), Ok(roots));
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(validate_name("").is_err());
        assert!(validate_name(&"x".repeat(256)).is_err());
    }
}
