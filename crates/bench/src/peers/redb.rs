//! redb with its defaults: `Durability::Immediate`, every commit synced.

use super::kv::{peer_error, KvAccess, Peer, Work};
use lodestore::{Error, Result};
use redb::{ReadableDatabase, ReadableTable};
use std::path::Path;

const OBJECTS: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("objects");

pub struct Redb {
    db: redb::Database,
}

impl Redb {
    /// Opens the database in `dir`, creating it (and the folder) if missing.
    pub fn open(dir: &Path) -> Result<Redb> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, "create folder", e))?;
        let db = redb::Database::create(dir.join("objects.redb"))
            .map_err(|e| peer_error("redb", "open", e))?;
        // Read transactions open the table, so it must exist.
        let txn = db
            .begin_write()
            .map_err(|e| peer_error("redb", "begin", e))?;
        txn.open_table(OBJECTS)
            .map_err(|e| peer_error("redb", "create table", e))?;
        txn.commit().map_err(|e| peer_error("redb", "commit", e))?;
        Ok(Redb { db })
    }
}

struct Reading {
    table: redb::ReadOnlyTable<u64, &'static [u8]>,
}

impl KvAccess for Reading {
    fn get(&mut self, key: u64, out: &mut Vec<u8>) -> Result<bool> {
        get_into(&self.table, key, out)
    }

    fn put(&mut self, key: u64, _value: &[u8]) -> Result<()> {
        Err(Error::InvalidArgument(format!(
            "redb: put of key {key} in a read-only transaction"
        )))
    }
}

struct Writing<'t> {
    table: redb::Table<'t, u64, &'static [u8]>,
}

impl KvAccess for Writing<'_> {
    fn get(&mut self, key: u64, out: &mut Vec<u8>) -> Result<bool> {
        get_into(&self.table, key, out)
    }

    fn put(&mut self, key: u64, value: &[u8]) -> Result<()> {
        self.table
            .insert(key, value)
            .map(drop)
            .map_err(|e| peer_error("redb", "insert", e))
    }
}

/// Copies the value under `key` into `out`; false when absent.
fn get_into(
    table: &impl ReadableTable<u64, &'static [u8]>,
    key: u64,
    out: &mut Vec<u8>,
) -> Result<bool> {
    out.clear();
    let found = table.get(key).map_err(|e| peer_error("redb", "get", e))?;
    Ok(found.map(|v| out.extend_from_slice(v.value())).is_some())
}

impl Peer for Redb {
    fn name(&self) -> &'static str {
        "redb"
    }

    fn read(&self, work: Work<'_>) -> Result<()> {
        let txn = self
            .db
            .begin_read()
            .map_err(|e| peer_error("redb", "begin", e))?;
        let table = txn
            .open_table(OBJECTS)
            .map_err(|e| peer_error("redb", "open table", e))?;
        work(&mut Reading { table })
    }

    fn write(&self, work: Work<'_>) -> Result<()> {
        let txn = self
            .db
            .begin_write()
            .map_err(|e| peer_error("redb", "begin", e))?;
        {
            let table = txn
                .open_table(OBJECTS)
                .map_err(|e| peer_error("redb", "open table", e))?;
            work(&mut Writing { table })?;
        }
        txn.commit().map_err(|e| peer_error("redb", "commit", e))
    }
}
