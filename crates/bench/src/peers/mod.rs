//! Lodestore against the stores a Rust user would pick instead (LMDB through heed, redb, SQLite
//! through rusqlite, and RocksDB with the `rocksdb` feature), on the OO7 and OO1 databases, in
//! the same run.
//!
//! Each peer holds the database as key-value pairs ([`kv`]: key the object's OID, value its
//! type id and bytes, references as OIDs) and runs the same code for each workload: the OO7
//! traversals are the very functions Lodestore runs, reading through [`PeerObjects`]. Every
//! store makes every commit durable with its default settings otherwise. Per store and run:
//!
//! - **load**: the database from an empty store, in durable transactions of about 2 MiB of
//!   objects (Lodestore: its generator, which allocates and links the objects);
//! - **traversals**: after one unmeasured T1, each traversal asked for, several times, each one
//!   transaction (the updating ones committed); then a T1 whose checksum every store must match,
//!   so they hold the same graph with the same updates;
//! - **durable commits**: 1 to N threads, each committing transactions that update one atomic
//!   part (its own stripe of parts), for a fixed time;
//! - **size on disk** of the store's folder after it is closed;
//! - **reopen after kill -9** ([`crash`]): a child process commits on the store until killed,
//!   then the store is opened again, timed, and checked for every acknowledged commit; with
//!   `crash_updates`, once more after a write-heavy stretch (the child first commits that many
//!   updates of atomic parts), which leaves a restart the most work;
//! - **OO1** ([`oo1`]), on a store of its own: load, lookup, traversal and update.

pub mod crash;
pub mod database;
mod engine;
pub mod kv;
pub mod lmdb;
mod objects;
pub mod oo1;
mod oo7;
pub mod redb;
#[cfg(feature = "rocksdb")]
pub mod rocksdb;
pub mod sqlite;

pub use database::Database;
pub use kv::{KvAccess, Peer};
pub use objects::PeerObjects;

use crate::oo7::{Oo7Params, Traversal, TraversalCounts};
use indicatif::ProgressBar;
use lodestore::{Error, Result};
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// The stores compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StoreKind {
    Lodestore,
    Lmdb,
    Redb,
    Sqlite,
    /// Only in builds with the `rocksdb` feature (it links the system's librocksdb).
    RocksDb,
}

impl StoreKind {
    pub const ALL: [StoreKind; 4] = [
        StoreKind::Lodestore,
        StoreKind::Lmdb,
        StoreKind::Redb,
        StoreKind::Sqlite,
    ];

    /// Every store of this build: `ALL`, and RocksDB with the `rocksdb` feature.
    pub fn built() -> Vec<StoreKind> {
        let mut stores = StoreKind::ALL.to_vec();
        if cfg!(feature = "rocksdb") {
            stores.push(StoreKind::RocksDb);
        }
        stores
    }

    pub fn name(self) -> &'static str {
        match self {
            StoreKind::Lodestore => "lodestore",
            StoreKind::Lmdb => "lmdb",
            StoreKind::Redb => "redb",
            StoreKind::Sqlite => "sqlite",
            StoreKind::RocksDb => "rocksdb",
        }
    }

    /// The peer of this kind opened (or created) in `dir`; `None` for Lodestore itself.
    pub(crate) fn open_peer(self, dir: &Path) -> Result<Option<Box<dyn Peer>>> {
        Ok(match self {
            StoreKind::Lodestore => None,
            StoreKind::Lmdb => Some(Box::new(lmdb::Lmdb::open(dir)?)),
            StoreKind::Redb => Some(Box::new(redb::Redb::open(dir)?)),
            StoreKind::Sqlite => Some(Box::new(sqlite::Sqlite::open(dir)?)),
            #[cfg(feature = "rocksdb")]
            StoreKind::RocksDb => Some(Box::new(rocksdb::RocksDb::open(dir)?)),
            #[cfg(not(feature = "rocksdb"))]
            StoreKind::RocksDb => return Err(no_rocksdb()),
        })
    }
}

impl fmt::Display for StoreKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a build without the `rocksdb` feature has no RocksDB peer, and how to get one.
fn no_rocksdb() -> Error {
    Error::Unsupported(
        "rocksdb: this build has no RocksDB peer (the `rocksdb` feature, which links the \
         system's librocksdb; scripts/bench-rocksdb.sh installs it and runs bench peers with it)"
            .into(),
    )
}

impl FromStr for StoreKind {
    type Err = Error;
    fn from_str(text: &str) -> Result<StoreKind> {
        if StoreKind::RocksDb.name().eq_ignore_ascii_case(text) {
            return match cfg!(feature = "rocksdb") {
                true => Ok(StoreKind::RocksDb),
                false => Err(no_rocksdb()),
            };
        }
        StoreKind::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(text))
            .ok_or_else(|| {
                let known: Vec<&str> = StoreKind::ALL.iter().map(|k| k.name()).collect();
                Error::InvalidArgument(format!(
                    "unknown store {text:?}; known stores: {}, and rocksdb in builds with the \
                     `rocksdb` feature",
                    known.join(", ")
                ))
            })
    }
}

/// What to run.
#[derive(Clone, Debug)]
pub struct PeersConfig {
    pub preset: String,
    pub params: Oo7Params,
    pub seed: u64,
    /// Lodestore first: the ratios are to it.
    pub stores: Vec<StoreKind>,
    pub traversals: Vec<Traversal>,
    /// Measured transactions per traversal.
    pub traversal_runs: u32,
    /// Thread counts of the durable-commit workload.
    pub threads: Vec<usize>,
    pub commit_seconds: f64,
    /// Folder for the template database and the stores of each run.
    pub out: PathBuf,
    pub quiet: bool,
    /// Parts of the OO1 database; `None` leaves OO1 out.
    pub oo1_parts: Option<u64>,
    /// The command that runs [`crash::child`], to which `--store`, `--dir` and `--part` are
    /// added; `None` leaves the kill -9 workload out.
    pub crash_child: Option<Vec<OsString>>,
    /// Atomic-part updates the write-heavy kill -9 child commits before its acknowledged
    /// commits (0 leaves that workload out).
    pub crash_updates: u64,
}

impl PeersConfig {
    pub fn validate(&self) -> Result<()> {
        self.params.validate()?;
        if self.stores.first() != Some(&StoreKind::Lodestore) {
            return Err(Error::InvalidArgument(
                "the peer comparison needs lodestore as its first store: ratios are to it".into(),
            ));
        }
        if self.traversal_runs == 0 {
            return Err(Error::InvalidArgument(
                "--traversal-runs must be at least 1".into(),
            ));
        }
        if self.threads.is_empty() || self.threads.iter().any(|&t| t == 0 || t > 256) {
            return Err(Error::InvalidArgument(
                "--threads: each count is 1 to 256".into(),
            ));
        }
        if !(self.commit_seconds.is_finite() && self.commit_seconds > 0.0) {
            return Err(Error::InvalidArgument(
                "--seconds must be a positive number".into(),
            ));
        }
        Ok(())
    }
}

/// One measured traversal: its median time and what it counted.
#[derive(Clone, Debug)]
pub struct TraversalFigure {
    pub traversal: Traversal,
    pub median_ms: f64,
    pub counts: TraversalCounts,
}

/// One store's figures in one run.
#[derive(Clone, Debug)]
pub struct Figures {
    pub store: StoreKind,
    pub load_s: f64,
    pub traversals: Vec<TraversalFigure>,
    /// The checksum of a T1 after the measured traversals.
    pub checksum: u64,
    /// Durable commits per second, by thread count.
    pub commits_per_s: Vec<(usize, f64)>,
    pub bytes_on_disk: u64,
    pub reopen: Option<crash::Reopened>,
    /// The same after a write-heavy stretch (`crash_updates`).
    pub reopen_heavy: Option<crash::Reopened>,
    pub oo1: Option<oo1::Oo1Figures>,
}

/// One row of the comparison: a name, a unit, whether more is better, and the value.
#[derive(Clone, Debug)]
pub struct Metric {
    pub name: String,
    pub unit: &'static str,
    pub higher_is_better: bool,
    pub value: f64,
}

impl Figures {
    /// The figures as rows, in the order of the table.
    pub fn metrics(&self) -> Vec<Metric> {
        let mut rows = vec![Metric {
            name: "load".into(),
            unit: "s",
            higher_is_better: false,
            value: self.load_s,
        }];
        rows.extend(self.traversals.iter().map(|t| Metric {
            name: t.traversal.name().into(),
            unit: "ms",
            higher_is_better: false,
            value: t.median_ms,
        }));
        rows.extend(self.commits_per_s.iter().map(|&(threads, rate)| Metric {
            name: format!("commits x{threads}"),
            unit: "commits/s",
            higher_is_better: true,
            value: rate,
        }));
        rows.push(Metric {
            name: "size on disk".into(),
            unit: "MB",
            higher_is_better: false,
            value: self.bytes_on_disk as f64 / 1e6,
        });
        rows.extend(self.reopen.map(|r| Metric {
            name: "reopen after kill -9".into(),
            unit: "ms",
            higher_is_better: false,
            value: r.reopen_ms,
        }));
        rows.extend(self.reopen_heavy.map(|r| Metric {
            name: "reopen after write-heavy kill -9".into(),
            unit: "ms",
            higher_is_better: false,
            value: r.reopen_ms,
        }));
        if let Some(oo1) = &self.oo1 {
            for (name, value, unit) in [
                ("oo1 load", oo1.load_s, "s"),
                ("oo1 lookup", oo1.lookup_ms, "ms"),
                ("oo1 traversal", oo1.traversal_ms, "ms"),
                ("oo1 update", oo1.update_ms, "ms"),
            ] {
                rows.push(Metric {
                    name: name.into(),
                    unit,
                    higher_is_better: false,
                    value,
                });
            }
        }
        rows
    }
}

/// The databases every store of a run holds, exported once from Lodestore templates.
pub struct Databases {
    pub oo7: Database,
    pub oo1: Option<Database>,
}

impl Databases {
    /// The templates of `config` (generated once under `config.out/templates`), exported.
    pub fn prepare(config: &PeersConfig) -> Result<Databases> {
        let oo7 = crate::experiments::oo7::template(
            &config.out,
            &config.preset,
            &config.params,
            config.seed,
            config.quiet,
        )?;
        let oo1 = config
            .oo1_parts
            .map(|parts| {
                let template = crate::experiments::oo1::template(
                    &config.out,
                    parts,
                    config.seed,
                    config.quiet,
                )?;
                Database::export(&template.join("store"))
            })
            .transpose()?;
        Ok(Databases {
            oo7: Database::export(&oo7.join("store"))?,
            oo1,
        })
    }
}

/// Runs every workload on `store` in `dir` (emptied first and removed after).
pub fn run(
    store: StoreKind,
    config: &PeersConfig,
    databases: &Databases,
    dir: &Path,
) -> Result<Figures> {
    remove(dir)?;
    let database = &databases.oo7;
    // Lodestore's database is drawn before the clock starts, as the peers' entries are
    // exported before it: every store's load times the writing of the same objects.
    let plan = match store {
        StoreKind::Lodestore => Some(crate::oo7::Oo7Plan::draw(&config.params, config.seed)?),
        _ => None,
    };
    let (engine, load_s) = engine::Engine::load(store, dir, database, |lodestore| {
        let plan = plan.as_ref().ok_or_else(|| {
            Error::InvalidArgument("no OO7 plan drawn for the store under test".into())
        })?;
        plan.build(lodestore, &ProgressBar::hidden()).map(drop)
    })?;
    let (traversals, checksum) = oo7::traversals(&engine, config)?;
    let mut commits_per_s = Vec::new();
    for &threads in &config.threads {
        let rate = engine.durable_commits(threads, database.parts(), config.commit_seconds)?;
        commits_per_s.push((threads, rate));
    }
    engine.close()?;
    let bytes_on_disk = crate::workspace::bytes_on_disk(dir);
    let (reopen, reopen_heavy) = match &config.crash_child {
        Some(command) => {
            let part = database.first_part();
            let mut command = command.clone();
            command.extend([
                OsString::from("--store"),
                store.name().into(),
                "--dir".into(),
                dir.as_os_str().to_owned(),
                "--part".into(),
                part.to_string().into(),
            ]);
            let light = crash::kill_and_reopen(&command, store, dir, part, crash::WAIT_MAX)?;
            let heavy = if config.crash_updates > 0 {
                // Every part but the one the acknowledged commits write.
                let parts_file = dir.with_extension("crash-parts");
                crash::Heavy::write_parts(&parts_file, &database.parts()[1..])?;
                command.extend([
                    OsString::from("--updates"),
                    config.crash_updates.to_string().into(),
                    "--parts-file".into(),
                    parts_file.as_os_str().to_owned(),
                ]);
                let heavy =
                    crash::kill_and_reopen(&command, store, dir, part, crash::HEAVY_WAIT_MAX);
                std::fs::remove_file(&parts_file)
                    .map_err(|e| Error::io(&parts_file, "remove", e))?;
                Some(heavy?)
            } else {
                None
            };
            (Some(light), heavy)
        }
        None => (None, None),
    };
    remove(dir)?;
    let oo1 = match (&databases.oo1, config.oo1_parts) {
        (Some(database), Some(parts)) => {
            let figures = oo1::run(store, config, database, parts, dir)?;
            remove(dir)?;
            Some(figures)
        }
        _ => None,
    };
    Ok(Figures {
        store,
        load_s,
        traversals,
        checksum,
        commits_per_s,
        bytes_on_disk,
        reopen,
        reopen_heavy,
        oo1,
    })
}

/// Checks that every store of one run read the same graph: same checksum and counts.
pub fn check_agreement(run: &[Figures]) -> Result<()> {
    let Some(first) = run.first() else {
        return Ok(());
    };
    for other in &run[1..] {
        let counts = |f: &Figures| -> Vec<u64> {
            f.traversals
                .iter()
                .map(|t| t.counts.atomic_parts_visited)
                .collect()
        };
        let oo1 = |f: &Figures| f.oo1.as_ref().map(|o| (o.checksum, o.parts_visited));
        if other.checksum != first.checksum
            || counts(other) != counts(first)
            || oo1(other) != oo1(first)
        {
            return Err(Error::InvalidArgument(format!(
                "{} and {} disagree on the graph: OO7 checksums {:#x} and {:#x}, atomic parts \
                 visited {:?} and {:?}; OO1 checksums and parts visited {:?} and {:?}",
                first.store,
                other.store,
                first.checksum,
                other.checksum,
                counts(first),
                counts(other),
                oo1(first),
                oo1(other)
            )));
        }
    }
    Ok(())
}

pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}

fn remove(dir: &Path) -> Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| Error::io(dir, "remove", e))?;
    }
    Ok(())
}
