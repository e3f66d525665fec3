//! SQLite through rusqlite (bundled), in WAL mode with `synchronous=FULL` so that every commit
//! is synced, objects in one rowid table keyed by OID. A connection per thread: connections are
//! kept in a pool and each transaction takes one.

use super::kv::{peer_error, KvAccess, Peer, Work};
use lodestore::{Error, Result};
use rusqlite::{CachedStatement, Connection};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Connections kept for reuse; more threads than this open their own and close them after.
const POOL_MAX: usize = 64;

pub struct Sqlite {
    path: PathBuf,
    pool: Mutex<Vec<Connection>>,
}

fn error(what: &str, e: rusqlite::Error) -> Error {
    peer_error("sqlite", what, e)
}

impl Sqlite {
    /// Opens the database in `dir`, creating it (and the folder) if missing.
    pub fn open(dir: &Path) -> Result<Sqlite> {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, "create folder", e))?;
        let sqlite = Sqlite {
            path: dir.join("objects.sqlite"),
            pool: Mutex::new(Vec::new()),
        };
        let connection = sqlite.connect()?;
        connection
            .execute_batch(
                "CREATE TABLE IF NOT EXISTS objects (id INTEGER PRIMARY KEY, value BLOB NOT NULL)",
            )
            .map_err(|e| error("create table", e))?;
        sqlite.give_back(connection);
        Ok(sqlite)
    }

    fn connect(&self) -> Result<Connection> {
        let connection = Connection::open(&self.path).map_err(|e| error("open", e))?;
        let mode: String = connection
            .query_row("PRAGMA journal_mode=WAL", [], |row| row.get(0))
            .map_err(|e| error("set WAL mode", e))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(peer_error(
                "sqlite",
                "set WAL mode",
                format!("mode is {mode}"),
            ));
        }
        connection
            .execute_batch("PRAGMA synchronous=FULL")
            .map_err(|e| error("set synchronous=FULL", e))?;
        Ok(connection)
    }

    fn take(&self) -> Result<Connection> {
        let pooled = self.pool.lock().unwrap_or_else(|e| e.into_inner()).pop();
        match pooled {
            Some(connection) => Ok(connection),
            None => self.connect(),
        }
    }

    fn give_back(&self, connection: Connection) {
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        if pool.len() < POOL_MAX {
            pool.push(connection);
        }
    }

    /// Runs `work` between `begin` and COMMIT, or ROLLBACK when it fails.
    fn transaction(&self, begin: &str, writable: bool, work: Work<'_>) -> Result<()> {
        let connection = self.take()?;
        let outcome = run_in(&connection, begin, writable, work);
        if outcome.is_err() && !connection.is_autocommit() {
            // The rollback's own failure would hide the first error; the connection is closed.
            if connection.execute_batch("ROLLBACK").is_err() {
                return outcome;
            }
        }
        self.give_back(connection);
        outcome
    }
}

fn run_in(connection: &Connection, begin: &str, writable: bool, work: Work<'_>) -> Result<()> {
    connection
        .execute_batch(begin)
        .map_err(|e| error("begin", e))?;
    {
        let mut access = Access {
            get: connection
                .prepare_cached("SELECT value FROM objects WHERE id = ?1")
                .map_err(|e| error("prepare", e))?,
            put: connection
                .prepare_cached("INSERT OR REPLACE INTO objects (id, value) VALUES (?1, ?2)")
                .map_err(|e| error("prepare", e))?,
            writable,
        };
        work(&mut access)?;
    }
    connection
        .execute_batch("COMMIT")
        .map_err(|e| error("commit", e))
}

struct Access<'c> {
    get: CachedStatement<'c>,
    put: CachedStatement<'c>,
    writable: bool,
}

impl KvAccess for Access<'_> {
    fn get(&mut self, key: u64, out: &mut Vec<u8>) -> Result<bool> {
        out.clear();
        let mut rows = self
            .get
            .query([key as i64])
            .map_err(|e| error("select", e))?;
        match rows.next().map_err(|e| error("select", e))? {
            Some(row) => {
                let value = row
                    .get_ref(0)
                    .and_then(|v| v.as_blob().map_err(Into::into))
                    .map_err(|e| error("read a value", e))?;
                out.extend_from_slice(value);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    fn put(&mut self, key: u64, value: &[u8]) -> Result<()> {
        if !self.writable {
            return Err(Error::InvalidArgument(format!(
                "sqlite: put of key {key} in a read-only transaction"
            )));
        }
        self.put
            .execute(rusqlite::params![key as i64, value])
            .map(drop)
            .map_err(|e| error("insert", e))
    }
}

impl Peer for Sqlite {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    fn read(&self, work: Work<'_>) -> Result<()> {
        self.transaction("BEGIN", false, work)
    }

    fn write(&self, work: Work<'_>) -> Result<()> {
        // IMMEDIATE takes the write lock at once, so two writers wait for each other instead
        // of failing when one upgrades a read.
        self.transaction("BEGIN IMMEDIATE", true, work)
    }
}
