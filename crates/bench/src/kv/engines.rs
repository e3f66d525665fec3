//! The three stores behind one interface, each opened with its defaults and durable commits:
//! Lodestore (a `BTreeMap<u64, u64>` in a store with default options), redb (its default
//! `Durability::Immediate`) and LMDB through heed (default flags: every commit synced).

use super::value_of;
use heed::byteorder::BigEndian;
use heed::types::U64;
use lodestore::{BTreeMap, Error, Options, Result, Session, Store};
use redb::ReadableDatabase;
use std::path::Path;

/// Which store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EngineKind {
    Lodestore,
    Redb,
    Lmdb,
}

impl EngineKind {
    pub const ALL: [EngineKind; 3] = [EngineKind::Lodestore, EngineKind::Redb, EngineKind::Lmdb];

    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Lodestore => "lodestore",
            EngineKind::Redb => "redb",
            EngineKind::Lmdb => "lmdb",
        }
    }
}

const REDB_TABLE: redb::TableDefinition<u64, u64> = redb::TableDefinition::new("kv");
/// LMDB's map must be sized up front; this is room, not a file size (the file grows as used).
const LMDB_MAP_BYTES: usize = 8 << 30;
type LmdbDb = heed::Database<U64<BigEndian>, U64<BigEndian>>;

/// The benchmark's redb table in a new read transaction (which the table keeps alive).
fn redb_read_table(db: &redb::Database) -> Result<redb::ReadOnlyTable<u64, u64>> {
    db.begin_read()
        .map_err(|e| peer("redb", "begin", e))?
        .open_table(REDB_TABLE)
        .map_err(|e| peer("redb", "open table", e))
}

/// An open store of one kind.
pub enum Engine {
    Lodestore {
        // Dropped after the session (fields drop in order).
        session: Box<Session>,
        map: BTreeMap<u64, u64>,
        _store: Box<Store>,
    },
    Redb(redb::Database),
    Lmdb(heed::Env, LmdbDb),
}

fn peer(engine: &str, what: &str, e: impl std::fmt::Display) -> Error {
    Error::InvalidArgument(format!("{engine}: {what} failed: {e}"))
}

impl Engine {
    /// A new, empty store in `dir`.
    pub fn create(kind: EngineKind, dir: &Path) -> Result<Engine> {
        match kind {
            EngineKind::Lodestore => {
                let store = Store::create(dir, Options::new())?;
                let mut session = Box::new(store.session()?);
                let mut txn = session.begin()?;
                let map = BTreeMap::create(&mut txn)?;
                txn.set_root("kv", map.oid())?;
                txn.commit()?;
                Ok(Engine::Lodestore {
                    session,
                    map,
                    _store: Box::new(store),
                })
            }
            EngineKind::Redb => {
                std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, "create folder", e))?;
                let db = redb::Database::create(dir.join("kv.redb"))
                    .map_err(|e| peer("redb", "create", e))?;
                Ok(Engine::Redb(db))
            }
            EngineKind::Lmdb => {
                std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, "create folder", e))?;
                // SAFETY: the environment is opened once, by this process only, and its files
                // are not changed by anything else while it is open.
                let env = unsafe {
                    heed::EnvOpenOptions::new()
                        .map_size(LMDB_MAP_BYTES)
                        .open(dir)
                }
                .map_err(|e| peer("lmdb", "open", e))?;
                let mut wtxn = env.write_txn().map_err(|e| peer("lmdb", "begin", e))?;
                let db: LmdbDb = env
                    .create_database(&mut wtxn, None)
                    .map_err(|e| peer("lmdb", "create database", e))?;
                wtxn.commit().map_err(|e| peer("lmdb", "commit", e))?;
                Ok(Engine::Lmdb(env, db))
            }
        }
    }

    /// Inserts each key with its value in one durable transaction.
    pub fn insert_batch(&mut self, keys: &[u64]) -> Result<()> {
        match self {
            Engine::Lodestore { session, map, .. } => {
                let mut txn = session.begin()?;
                for &k in keys {
                    map.insert(&mut txn, &k, &value_of(k))?;
                }
                txn.commit()?;
            }
            Engine::Redb(db) => {
                let txn = db.begin_write().map_err(|e| peer("redb", "begin", e))?;
                {
                    let mut table = txn
                        .open_table(REDB_TABLE)
                        .map_err(|e| peer("redb", "open table", e))?;
                    for &k in keys {
                        table
                            .insert(k, value_of(k))
                            .map_err(|e| peer("redb", "insert", e))?;
                    }
                }
                txn.commit().map_err(|e| peer("redb", "commit", e))?;
            }
            Engine::Lmdb(env, db) => {
                let mut txn = env.write_txn().map_err(|e| peer("lmdb", "begin", e))?;
                for &k in keys {
                    db.put(&mut txn, &k, &value_of(k))
                        .map_err(|e| peer("lmdb", "put", e))?;
                }
                txn.commit().map_err(|e| peer("lmdb", "commit", e))?;
            }
        }
        Ok(())
    }

    /// Looks every key up in one read transaction; the sum of the values found.
    pub fn get_batch(&mut self, keys: &[u64]) -> Result<u64> {
        let mut sum = 0u64;
        match self {
            Engine::Lodestore { session, map, .. } => {
                let mut txn = session.begin()?;
                for k in keys {
                    sum = sum.wrapping_add(map.get(&mut txn, k)?.unwrap_or(0));
                }
                txn.commit()?;
            }
            Engine::Redb(db) => {
                let table = redb_read_table(db)?;
                for &k in keys {
                    let found = table.get(k).map_err(|e| peer("redb", "get", e))?;
                    sum = sum.wrapping_add(found.map_or(0, |v| v.value()));
                }
            }
            Engine::Lmdb(env, db) => {
                let txn = env.read_txn().map_err(|e| peer("lmdb", "begin", e))?;
                for k in keys {
                    let found = db.get(&txn, k).map_err(|e| peer("lmdb", "get", e))?;
                    sum = sum.wrapping_add(found.unwrap_or(0));
                }
            }
        }
        Ok(sum)
    }

    /// Scans `len` entries from each start in one read transaction; the sum of key ^ value
    /// over every entry read.
    pub fn scan_batch(&mut self, starts: &[u64], len: usize) -> Result<u64> {
        let mut sum = 0u64;
        match self {
            Engine::Lodestore { session, map, .. } => {
                let mut txn = session.begin()?;
                for &start in starts {
                    for entry in map.range(&mut txn, start..).take(len) {
                        let (k, v) = entry?;
                        sum = sum.wrapping_add(k ^ v);
                    }
                }
                txn.commit()?;
            }
            Engine::Redb(db) => {
                let table = redb_read_table(db)?;
                for &start in starts {
                    let range = table.range(start..).map_err(|e| peer("redb", "range", e))?;
                    for entry in range.take(len) {
                        let (k, v) = entry.map_err(|e| peer("redb", "range", e))?;
                        sum = sum.wrapping_add(k.value() ^ v.value());
                    }
                }
            }
            Engine::Lmdb(env, db) => {
                let txn = env.read_txn().map_err(|e| peer("lmdb", "begin", e))?;
                for &start in starts {
                    let range = db
                        .range(&txn, &(start..))
                        .map_err(|e| peer("lmdb", "range", e))?;
                    for entry in range.take(len) {
                        let (k, v) = entry.map_err(|e| peer("lmdb", "range", e))?;
                        sum = sum.wrapping_add(k ^ v);
                    }
                }
            }
        }
        Ok(sum)
    }
}
