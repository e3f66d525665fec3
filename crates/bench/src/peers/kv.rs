//! What the peer stores must offer: transactions over u64 keys and byte values, and the
//! encoding of objects in them.
//!
//! An object is stored under its Lodestore OID (a u64) with the value `type id (u32, little
//! endian) ++ object bytes`; references inside the bytes are OIDs, so a traversal follows them
//! by key lookups. Key 0, which no object has (OID 0 is null), holds the named roots; keys with
//! the top bit set, which no OID has, hold an index: the OO1 part numbers, each mapped to its
//! part's OID (u64 little endian).

use lodestore::{Error, RawOid, Result};
use std::collections::BTreeMap;

/// Bytes of the type id that starts every value.
pub const TYPE_BYTES: usize = 4;

/// The key of the roots entry.
pub const ROOTS_KEY: u64 = 0;

/// The bit that marks an index key.
const INDEX_BIT: u64 = 1 << 63;

/// The key under which the index maps `number`.
pub fn index_key(number: u64) -> Result<u64> {
    if number & INDEX_BIT != 0 {
        return Err(Error::InvalidArgument(format!(
            "index number {number} does not fit the peers' index keys"
        )));
    }
    Ok(INDEX_BIT | number)
}

pub fn is_index_key(key: u64) -> bool {
    key & INDEX_BIT != 0
}

/// Reads and writes inside one transaction of a peer.
pub trait KvAccess {
    /// Copies the value under `key` into `out` (replacing its contents); false when the key is
    /// absent.
    fn get(&mut self, key: u64, out: &mut Vec<u8>) -> Result<bool>;

    /// Stores `value` under `key`. An error inside a read-only transaction.
    fn put(&mut self, key: u64, value: &[u8]) -> Result<()>;
}

/// The work of one transaction, run by [`Peer::read`] or [`Peer::write`].
pub type Work<'w> = &'w mut dyn FnMut(&mut dyn KvAccess) -> Result<()>;

/// A key-value store a user would pick instead of Lodestore, opened with its defaults and every
/// commit durable. Shared by the threads of a run, each calling `read` and `write` as it needs.
pub trait Peer: Sync {
    /// The store's name in tables and files.
    fn name(&self) -> &'static str;

    /// Runs `work` in a read-only transaction.
    fn read(&self, work: Work<'_>) -> Result<()>;

    /// Runs `work` in a write transaction and commits it durably when it returns `Ok`; an
    /// error aborts the transaction.
    fn write(&self, work: Work<'_>) -> Result<()>;
}

/// The error of a peer's operation, naming the peer and what failed.
pub fn peer_error(peer: &str, what: &str, e: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(format!("{peer}: {what} failed: {e}"))
}

/// The value an object is stored as.
pub fn encode_object(type_id: u32, bytes: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.reserve(TYPE_BYTES + bytes.len());
    out.extend_from_slice(&type_id.to_le_bytes());
    out.extend_from_slice(bytes);
}

/// The type id and bytes of a stored object's value.
pub fn decode_object(oid: RawOid, value: &[u8]) -> Result<(u32, &[u8])> {
    if value.len() < TYPE_BYTES {
        return Err(Error::InvalidArgument(format!(
            "object {oid}: the peer's value has {} bytes, fewer than a type id",
            value.len()
        )));
    }
    let (head, bytes) = value.split_at(TYPE_BYTES);
    let type_id = u32::from_le_bytes(head.try_into().expect("split at TYPE_BYTES"));
    Ok((type_id, bytes))
}

/// The value of the roots entry: per root, its name's length (u16 LE), its name and its OID
/// (u64 LE).
pub fn encode_roots(roots: &BTreeMap<String, RawOid>) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    for (name, oid) in roots {
        let len = u16::try_from(name.len()).map_err(|_| {
            Error::InvalidArgument(format!("root name of {} bytes is too long", name.len()))
        })?;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&oid.0.to_le_bytes());
    }
    Ok(out)
}

/// The roots a [`encode_roots`] value holds.
pub fn decode_roots(mut value: &[u8]) -> Result<BTreeMap<String, RawOid>> {
    let bad =
        |why: &str| Error::InvalidArgument(format!("the peer's roots entry is damaged: {why}"));
    let mut roots = BTreeMap::new();
    while !value.is_empty() {
        let (len, rest) = value
            .split_at_checked(2)
            .ok_or_else(|| bad("cut in a length"))?;
        let len = u16::from_le_bytes(len.try_into().expect("two bytes")) as usize;
        let (name, rest) = rest
            .split_at_checked(len)
            .ok_or_else(|| bad("cut in a name"))?;
        let (oid, rest) = rest
            .split_at_checked(8)
            .ok_or_else(|| bad("cut in an OID"))?;
        let name = std::str::from_utf8(name).map_err(|_| bad("a name is not UTF-8"))?;
        let oid = RawOid(u64::from_le_bytes(oid.try_into().expect("eight bytes")));
        roots.insert(name.to_string(), oid);
        value = rest;
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_round_trip_and_damage_is_named() {
        let mut roots = BTreeMap::new();
        roots.insert("oo7".to_string(), RawOid(0x1234_5678));
        roots.insert(String::new(), RawOid(7));
        let value = encode_roots(&roots).unwrap();
        assert_eq!(decode_roots(&value).unwrap(), roots);
        for cut in 1..value.len() {
            if let Ok(partial) = decode_roots(&value[..cut]) {
                // Only a cut between two whole entries decodes, to fewer roots.
                assert!(partial.len() < roots.len(), "cut at {cut}");
            }
        }
    }

    #[test]
    fn objects_round_trip_and_short_values_are_refused() {
        let mut value = Vec::new();
        encode_object(0x0007_0008, &[1, 2, 3], &mut value);
        assert_eq!(
            decode_object(RawOid(9), &value).unwrap(),
            (0x0007_0008, &[1u8, 2, 3][..])
        );
        let error = decode_object(RawOid(9), &value[..3]).unwrap_err();
        assert!(error.to_string().contains("object"), "{error}");
    }
}
