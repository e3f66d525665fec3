//! RocksDB with its defaults (feature `rocksdb`: it links the system's librocksdb, Debian's
//! `librocksdb-dev`), through a `TransactionDB` so a write transaction reads its own writes and
//! conflicting writers wait on row locks; every commit synced (`WriteOptions::set_sync`), as
//! `sync = true` asks.

use super::kv::{peer_error, KvAccess, Peer, Work};
use lodestore::{Error, Result};
use rocksdb::{Options, TransactionDB, TransactionDBOptions, TransactionOptions, WriteOptions};
use std::path::Path;

pub struct RocksDb {
    db: TransactionDB,
}

impl RocksDb {
    /// Opens the database in `dir`, creating it (and the folder) if missing.
    pub fn open(dir: &Path) -> Result<RocksDb> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, "create folder", e))?;
        let mut options = Options::default();
        options.create_if_missing(true);
        let db = TransactionDB::open(&options, &TransactionDBOptions::default(), dir)
            .map_err(|e| peer_error("rocksdb", "open", e))?;
        Ok(RocksDb { db })
    }
}

struct Reading<'a> {
    snapshot: rocksdb::SnapshotWithThreadMode<'a, TransactionDB>,
}

impl KvAccess for Reading<'_> {
    fn get(&mut self, key: u64, out: &mut Vec<u8>) -> Result<bool> {
        let found = self
            .snapshot
            .get_pinned(key.to_be_bytes())
            .map_err(|e| peer_error("rocksdb", "get", e))?;
        Ok(copy_out(found.as_deref(), out))
    }

    fn put(&mut self, key: u64, _value: &[u8]) -> Result<()> {
        Err(Error::InvalidArgument(format!(
            "rocksdb: put of key {key} in a read-only transaction"
        )))
    }
}

struct Writing<'a> {
    txn: rocksdb::Transaction<'a, TransactionDB>,
}

impl KvAccess for Writing<'_> {
    fn get(&mut self, key: u64, out: &mut Vec<u8>) -> Result<bool> {
        let found = self
            .txn
            .get_pinned(key.to_be_bytes())
            .map_err(|e| peer_error("rocksdb", "get", e))?;
        Ok(copy_out(found.as_deref(), out))
    }

    fn put(&mut self, key: u64, value: &[u8]) -> Result<()> {
        self.txn
            .put(key.to_be_bytes(), value)
            .map_err(|e| peer_error("rocksdb", "put", e))
    }
}

/// Copies `found` into `out`; false when absent.
fn copy_out(found: Option<&[u8]>, out: &mut Vec<u8>) -> bool {
    out.clear();
    found.map(|v| out.extend_from_slice(v)).is_some()
}

impl Peer for RocksDb {
    fn name(&self) -> &'static str {
        "rocksdb"
    }

    fn read(&self, work: Work<'_>) -> Result<()> {
        work(&mut Reading {
            snapshot: self.db.snapshot(),
        })
    }

    fn write(&self, work: Work<'_>) -> Result<()> {
        let mut sync = WriteOptions::default();
        sync.set_sync(true);
        let txn = self
            .db
            .transaction_opt(&sync, &TransactionOptions::default());
        let mut writing = Writing { txn };
        match work(&mut writing) {
            Ok(()) => writing
                .txn
                .commit()
                .map_err(|e| peer_error("rocksdb", "commit", e)),
            Err(e) => {
                // Rolled back when dropped as well; said here for the reader.
                let _ = writing.txn.rollback();
                Err(e)
            }
        }
    }
}
