//! A collection's header: the small object a collection's OID names. It holds where the tree
//! starts and what its keys and values are, so that opening a collection with the wrong types
//! is refused. It holds no count of entries: every insert would then write the header, and
//! concurrent writers of one collection would all queue on its page.
//!
//! ```text
//! 0  magic "LSBT"   4 version u16   6 flags u16 (bit 0: a set)
//! 8  key kind u64   16 value kind u64   24 root OID u64   32 height u32 (0: the root is a leaf)
//! 36 node length u32   40 longest key u32   44 longest value u32   48 reserved (zero)
//! 60 crc32c of bytes 0..60
//! ```

use lodestore_core::checksum::crc32c;
use lodestore_core::Oid as RawOid;

pub const MAGIC: [u8; 4] = *b"LSBT";
pub const VERSION: u16 = 1;
pub const HEADER_LEN: usize = 64;
const CRC_AT: usize = 60;
/// The height past which a tree is taken as damaged: a tree of pages of 4 KiB holding the
/// most entries fills no store at 16 levels.
pub const HEIGHT_MAX: u32 = 16;

/// The header's fields.
/// A transaction's copy of the header of the collection it used last, so that each operation
/// does not read and check the header object again. Sound because the transaction holds the
/// header's page locked from its first read to its end, so only its own `write_meta` can
/// change it, and that updates the copy.
///
/// It also keeps where the transaction's last descent to a leaf ended (`leaf`), for the same
/// reason: the nodes on the way are locked until the transaction ends, so only its own
/// changes can move the leaf's bounds, and every change above the leaves forgets it.
#[doc(hidden)]
#[derive(Debug, Default)]
pub struct MetaCache {
    pub(crate) last: Option<(lodestore_core::Oid, Meta)>,
    pub(crate) leaf: super::tree::LeafHint,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta {
    pub flags: u16,
    pub key_kind: u64,
    pub value_kind: u64,
    pub root: RawOid,
    pub height: u32,
    pub node_len: usize,
    pub key_max: usize,
    pub value_max: usize,
}

impl Meta {
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[0..4].copy_from_slice(&MAGIC);
        out[4..6].copy_from_slice(&VERSION.to_le_bytes());
        out[6..8].copy_from_slice(&self.flags.to_le_bytes());
        out[8..16].copy_from_slice(&self.key_kind.to_le_bytes());
        out[16..24].copy_from_slice(&self.value_kind.to_le_bytes());
        out[24..32].copy_from_slice(&self.root.0.to_le_bytes());
        out[32..36].copy_from_slice(&self.height.to_le_bytes());
        out[36..40].copy_from_slice(&(self.node_len as u32).to_le_bytes());
        out[40..44].copy_from_slice(&(self.key_max as u32).to_le_bytes());
        out[44..48].copy_from_slice(&(self.value_max as u32).to_le_bytes());
        let crc = crc32c(&out[..CRC_AT]);
        out[CRC_AT..].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// The header in `bytes`, or why it is not one.
    pub fn decode(bytes: &[u8]) -> Result<Meta, String> {
        if bytes.len() != HEADER_LEN {
            return Err(format!("a header of {} bytes", bytes.len()));
        }
        if bytes[0..4] != MAGIC {
            return Err("not a collection header (wrong magic)".into());
        }
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
        if crc32c(&bytes[..CRC_AT]) != u32_at(CRC_AT) {
            return Err("the header fails its checksum".into());
        }
        let version = u16::from_le_bytes([bytes[4], bytes[5]]);
        if version != VERSION {
            return Err(format!(
                "collection format version {version} (this build reads {VERSION})"
            ));
        }
        let meta = Meta {
            flags: u16::from_le_bytes([bytes[6], bytes[7]]),
            key_kind: u64_at(8),
            value_kind: u64_at(16),
            root: RawOid(u64_at(24)),
            height: u32_at(32),
            node_len: u32_at(36) as usize,
            key_max: u32_at(40) as usize,
            value_max: u32_at(44) as usize,
        };
        if meta.root.is_null() || meta.height > HEIGHT_MAX {
            return Err(format!(
                "root {} at height {} is impossible",
                meta.root, meta.height
            ));
        }
        if meta.node_len > u16::MAX as usize
            || meta.key_max + meta.value_max > super::node::entry_max(meta.node_len.max(64))
        {
            return Err(format!(
                "nodes of {} bytes cannot hold keys of {} and values of {} bytes",
                meta.node_len, meta.key_max, meta.value_max
            ));
        }
        Ok(meta)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_round_trips_and_a_flipped_bit_is_caught() {
        let meta = Meta {
            flags: 1,
            key_kind: 7,
            value_kind: 9,
            root: RawOid(0x1234_0001),
            height: 2,
            node_len: 8000,
            key_max: 900,
            value_max: 1000,
        };
        let bytes = meta.encode();
        assert_eq!(Meta::decode(&bytes), Ok(meta));
        for bit in 0..HEADER_LEN * 8 {
            let mut bad = bytes;
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(Meta::decode(&bad).is_err(), "bit {bit}");
        }
    }
}
