//! A database as the peers hold it: every object of a Lodestore template store read once
//! (closed, offline), encoded as key-value pairs ([`super::kv`]), plus index entries, and loaded
//! into each peer in durable transactions.

use super::kv::{self, Peer};
use crate::oo1::schema::Part;
use crate::oo7::schema::AtomicPart;
use lodestore::{Error, Persistent, RawOid, Result};
use std::collections::BTreeMap;
use std::path::Path;

/// Bytes of objects per load transaction (the generators' batch size too).
pub const LOAD_BATCH_BYTES: usize = 2 << 20;

/// A database's objects, ready to load into a peer.
pub struct Database {
    /// (key, value): objects by OID in OID order, then index entries.
    entries: Vec<(u64, Vec<u8>)>,
    objects: usize,
    roots: BTreeMap<String, RawOid>,
    /// The OIDs of the parts the durable-commit workload updates (OO7 atomic parts, OO1
    /// parts), in OID order.
    parts: Vec<u64>,
    bytes: u64,
}

impl Database {
    /// Reads every object of the closed store in `store_path`. OO1 parts also get an entry of
    /// the part-number index ([`kv::index_key`]), the peers' own index.
    pub fn export(store_path: &Path) -> Result<Database> {
        let mut entries = Vec::new();
        let mut index = Vec::new();
        let mut parts = Vec::new();
        let mut bytes = 0u64;
        lodestore::objects(&lodestore::RealFileSystem, store_path, |object| {
            let mut value = Vec::new();
            kv::encode_object(object.type_id.0, &object.bytes, &mut value);
            let type_id = object.type_id.0;
            if type_id == AtomicPart::TYPE_ID || type_id == Part::TYPE_ID {
                parts.push(object.oid.0);
            }
            if type_id == Part::TYPE_ID && object.bytes.len() == size_of::<Part>() {
                let part: Part = bytemuck::pod_read_unaligned(&object.bytes);
                index.push((kv::index_key(part.id)?, object.oid.0.to_le_bytes().to_vec()));
            }
            if object.oid.0 == kv::ROOTS_KEY || kv::is_index_key(object.oid.0) {
                return Err(Error::InvalidArgument(format!(
                    "object {} has an OID the peers' layout reserves",
                    object.oid
                )));
            }
            bytes += object.bytes.len() as u64;
            entries.push((object.oid.0, value));
            Ok(())
        })?;
        let objects = entries.len();
        entries.extend(index);
        if parts.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "{}: no OO7 atomic parts or OO1 parts in the template store",
                store_path.display()
            )));
        }
        Ok(Database {
            entries,
            objects,
            roots: lodestore::roots(&lodestore::RealFileSystem, store_path)?,
            parts,
            bytes,
        })
    }

    /// The parts the durable-commit workload updates, in OID order.
    pub fn parts(&self) -> &[u64] {
        &self.parts
    }

    /// The first of [`Database::parts`].
    pub fn first_part(&self) -> u64 {
        self.parts[0]
    }

    pub fn objects(&self) -> usize {
        self.objects
    }

    /// Bytes of the objects themselves.
    pub fn object_bytes(&self) -> u64 {
        self.bytes
    }

    /// Loads every entry into `peer` in durable transactions of about [`LOAD_BATCH_BYTES`],
    /// the roots last.
    pub fn load(&self, peer: &dyn Peer) -> Result<()> {
        let mut rest = &self.entries[..];
        while !rest.is_empty() {
            let mut bytes = 0;
            let count = rest
                .iter()
                .take_while(|(_, value)| {
                    bytes += value.len();
                    bytes <= LOAD_BATCH_BYTES
                })
                .count()
                .max(1);
            let (batch, after) = rest.split_at(count);
            peer.write(&mut |kv| {
                for (key, value) in batch {
                    kv.put(*key, value)?;
                }
                Ok(())
            })?;
            rest = after;
        }
        let roots = kv::encode_roots(&self.roots)?;
        peer.write(&mut |kv| kv.put(kv::ROOTS_KEY, &roots))
    }
}
