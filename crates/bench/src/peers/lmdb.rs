//! LMDB through heed, with its default flags: every commit synced, one writer at a time.

use super::kv::{peer_error, KvAccess, Peer, Work};
use heed::byteorder::BigEndian;
use heed::types::{Bytes, U64};
use lodestore::{Error, Result};
use std::path::Path;

/// LMDB's map must be sized up front; this is room, not a file size (the file grows as used).
const MAP_BYTES: usize = 16 << 30;

type Objects = heed::Database<U64<BigEndian>, Bytes>;

pub struct Lmdb {
    env: heed::Env,
    objects: Objects,
}

impl Lmdb {
    /// Opens the environment in `dir`, creating it (and the folder) if missing.
    pub fn open(dir: &Path) -> Result<Lmdb> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, "create folder", e))?;
        // SAFETY: the environment is opened once per process, and its files are not changed by
        // anything else while it is open.
        let env = unsafe { heed::EnvOpenOptions::new().map_size(MAP_BYTES).open(dir) }
            .map_err(|e| peer_error("lmdb", "open", e))?;
        let mut txn = env
            .write_txn()
            .map_err(|e| peer_error("lmdb", "begin", e))?;
        let objects: Objects = env
            .create_database(&mut txn, None)
            .map_err(|e| peer_error("lmdb", "create database", e))?;
        txn.commit().map_err(|e| peer_error("lmdb", "commit", e))?;
        Ok(Lmdb { env, objects })
    }
}

struct Reading<'t, 'e> {
    txn: &'t heed::RoTxn<'e>,
    objects: Objects,
}

impl KvAccess for Reading<'_, '_> {
    fn get(&mut self, key: u64, out: &mut Vec<u8>) -> Result<bool> {
        get_into(self.objects, self.txn, key, out)
    }

    fn put(&mut self, key: u64, _value: &[u8]) -> Result<()> {
        Err(Error::InvalidArgument(format!(
            "lmdb: put of key {key} in a read-only transaction"
        )))
    }
}

struct Writing<'t, 'e> {
    txn: &'t mut heed::RwTxn<'e>,
    objects: Objects,
}

impl KvAccess for Writing<'_, '_> {
    fn get(&mut self, key: u64, out: &mut Vec<u8>) -> Result<bool> {
        get_into(self.objects, self.txn, key, out)
    }

    fn put(&mut self, key: u64, value: &[u8]) -> Result<()> {
        self.objects
            .put(self.txn, &key, value)
            .map_err(|e| peer_error("lmdb", "put", e))
    }
}

/// Copies the value under `key` into `out`; false when absent.
fn get_into(objects: Objects, txn: &heed::RoTxn, key: u64, out: &mut Vec<u8>) -> Result<bool> {
    let found = objects
        .get(txn, &key)
        .map_err(|e| peer_error("lmdb", "get", e))?;
    out.clear();
    match found {
        Some(value) => {
            out.extend_from_slice(value);
            Ok(true)
        }
        None => Ok(false),
    }
}

impl Peer for Lmdb {
    fn name(&self) -> &'static str {
        "lmdb"
    }

    fn read(&self, work: Work<'_>) -> Result<()> {
        let txn = self
            .env
            .read_txn()
            .map_err(|e| peer_error("lmdb", "begin", e))?;
        work(&mut Reading {
            txn: &txn,
            objects: self.objects,
        })
    }

    fn write(&self, work: Work<'_>) -> Result<()> {
        let mut txn = self
            .env
            .write_txn()
            .map_err(|e| peer_error("lmdb", "begin", e))?;
        work(&mut Writing {
            txn: &mut txn,
            objects: self.objects,
        })?;
        txn.commit().map_err(|e| peer_error("lmdb", "commit", e))
    }
}
