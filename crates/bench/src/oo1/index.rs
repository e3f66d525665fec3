//! The part-number index of OO1: a Lodestore `BTreeMap` from part number to part, loaded in
//! ascending order (the benchmark never changes it afterwards).

use super::schema::{Part, PartIndex};
use lodestore::{BTreeMap, Oid, Result, Session, Transaction};

/// Entries inserted per transaction while loading: keeps what one transaction dirties well
/// inside the client cache at any database size.
const LOAD_BATCH: usize = 50_000;

/// Builds the index over `parts` (part number `i + 1` is `parts[i]`) in transactions of its
/// own, and returns it.
pub fn load(session: &mut Session, parts: &[Oid<Part>]) -> Result<PartIndex> {
    let mut txn = session.begin()?;
    let index: PartIndex = BTreeMap::create(&mut txn)?;
    txn.commit()?;
    for (first, chunk) in parts.chunks(LOAD_BATCH).enumerate() {
        let mut txn = session.begin()?;
        for (i, part) in chunk.iter().enumerate() {
            let number = (first * LOAD_BATCH + i) as u64 + 1;
            index.insert(&mut txn, &number, part)?;
        }
        txn.commit()?;
    }
    Ok(index)
}

/// The part numbered `key`, if the index holds it.
pub fn lookup(txn: &mut Transaction<'_>, index: PartIndex, key: u64) -> Result<Option<Oid<Part>>> {
    index.get(txn, &key)
}
