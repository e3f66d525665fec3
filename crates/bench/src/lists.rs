//! OID lists: a set-valued association stored as one byte object of little-endian raw OIDs.

use crate::oo7::schema::OidList;
use lodestore::{Oid, Persistent, RawOid, ReadTransaction, Result, Transaction};

/// Stores `oids` as a new list object: the OIDs as little-endian u64s.
pub fn alloc_oid_list(txn: &mut Transaction<'_>, oids: &[u64]) -> Result<Oid<OidList>> {
    // On a little-endian machine the slice is already the list's bytes: no copy, no
    // allocation per list (a load makes one per part).
    #[cfg(target_endian = "little")]
    let raw = txn.alloc_bytes(OidList::TYPE_ID, bytemuck::cast_slice(oids))?;
    #[cfg(not(target_endian = "little"))]
    let raw = {
        let bytes: Vec<u8> = oids.iter().flat_map(|oid| oid.to_le_bytes()).collect();
        txn.alloc_bytes(OidList::TYPE_ID, &bytes)?
    };
    Ok(Oid::from_raw(raw))
}

/// The raw OIDs of a list object, appended to `out` (cleared first).
pub fn read_oid_list(
    txn: &mut impl ReadTransaction,
    list: Oid<OidList>,
    out: &mut Vec<u64>,
) -> Result<()> {
    out.clear();
    let bytes = txn.read_all(list.raw())?;
    out.extend(
        bytes
            .chunks_exact(8)
            .map(|chunk| u64::from_le_bytes(chunk.try_into().expect("chunks of 8"))),
    );
    Ok(())
}

/// A raw OID as a typed one.
pub fn typed<T>(raw: u64) -> Oid<T> {
    Oid::from_raw(RawOid(raw))
}
