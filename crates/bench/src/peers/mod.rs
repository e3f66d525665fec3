//! Lodestore against the stores a Rust user would pick instead (LMDB through heed, redb, SQLite
//! through rusqlite), on the OO7 database, in the same run.
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
//!   then the store is opened again, timed, and checked for every acknowledged commit.

pub mod crash;
mod kv;
pub mod lmdb;
mod objects;
pub mod redb;
pub mod sqlite;

pub use kv::{KvAccess, Peer};
pub use objects::PeerObjects;

use crate::lists::typed;
use crate::oo7::schema::AtomicPart;
use crate::oo7::traverse::Traverse;
use crate::oo7::{self, Oo7Params, Traversal, TraversalCounts};
use indicatif::ProgressBar;
use lodestore::{Error, Options, Persistent, RawOid, Result, Store};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::{Duration, Instant};

/// Bytes of objects per load transaction (the generator's batch size too).
const LOAD_BATCH_BYTES: usize = 2 << 20;

/// The stores compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StoreKind {
    Lodestore,
    Lmdb,
    Redb,
    Sqlite,
}

impl StoreKind {
    pub const ALL: [StoreKind; 4] = [
        StoreKind::Lodestore,
        StoreKind::Lmdb,
        StoreKind::Redb,
        StoreKind::Sqlite,
    ];

    pub fn name(self) -> &'static str {
        match self {
            StoreKind::Lodestore => "lodestore",
            StoreKind::Lmdb => "lmdb",
            StoreKind::Redb => "redb",
            StoreKind::Sqlite => "sqlite",
        }
    }

    /// The peer of this kind opened (or created) in `dir`; `None` for Lodestore itself.
    pub(crate) fn open_peer(self, dir: &Path) -> Result<Option<Box<dyn Peer>>> {
        Ok(match self {
            StoreKind::Lodestore => None,
            StoreKind::Lmdb => Some(Box::new(lmdb::Lmdb::open(dir)?)),
            StoreKind::Redb => Some(Box::new(redb::Redb::open(dir)?)),
            StoreKind::Sqlite => Some(Box::new(sqlite::Sqlite::open(dir)?)),
        })
    }
}

impl fmt::Display for StoreKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for StoreKind {
    type Err = Error;
    fn from_str(text: &str) -> Result<StoreKind> {
        StoreKind::ALL
            .into_iter()
            .find(|k| k.name().eq_ignore_ascii_case(text))
            .ok_or_else(|| {
                let known: Vec<&str> = StoreKind::ALL.iter().map(|k| k.name()).collect();
                Error::InvalidArgument(format!(
                    "unknown store {text:?}; known stores: {}",
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
    /// The command that runs [`crash::child`], to which `--store`, `--dir` and `--part` are
    /// added; `None` leaves the kill -9 workload out.
    pub crash_child: Option<Vec<OsString>>,
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
        rows
    }
}

/// The OO7 database as objects, read once from a Lodestore template, loaded into every peer.
pub struct Database {
    /// (OID, encoded value), in OID order.
    objects: Vec<(u64, Vec<u8>)>,
    roots: BTreeMap<String, RawOid>,
    /// The atomic parts' OIDs, in OID order: the durable-commit workload's targets.
    atomic_parts: Vec<u64>,
    bytes: u64,
}

impl Database {
    /// Reads every object of the (closed) store in `store_path`.
    pub fn export(store_path: &Path) -> Result<Database> {
        let mut objects = Vec::new();
        let mut atomic_parts = Vec::new();
        let mut bytes = 0u64;
        lodestore::objects(&lodestore::RealFileSystem, store_path, |object| {
            let mut value = Vec::new();
            kv::encode_object(object.type_id.0, &object.bytes, &mut value);
            if object.type_id.0 == AtomicPart::TYPE_ID {
                atomic_parts.push(object.oid.0);
            }
            bytes += object.bytes.len() as u64;
            objects.push((object.oid.0, value));
            Ok(())
        })?;
        let roots = lodestore::roots(&lodestore::RealFileSystem, store_path)?;
        if atomic_parts.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "{}: no OO7 atomic parts in the template store",
                store_path.display()
            )));
        }
        Ok(Database {
            objects,
            roots,
            atomic_parts,
            bytes,
        })
    }

    /// The first atomic part, by OID.
    pub fn first_atomic_part(&self) -> u64 {
        self.atomic_parts[0]
    }

    pub fn objects(&self) -> usize {
        self.objects.len()
    }

    /// Bytes of the objects themselves.
    pub fn object_bytes(&self) -> u64 {
        self.bytes
    }
}

/// The template database for `config`, generated once under `config.out/templates`.
pub fn template(config: &PeersConfig) -> Result<PathBuf> {
    Ok(crate::experiments::oo7::template(
        &config.out,
        &config.preset,
        &config.params,
        config.seed,
        config.quiet,
    )?
    .join("store"))
}

/// Runs every workload on `store` in `dir` (emptied first and removed after).
pub fn run(
    store: StoreKind,
    config: &PeersConfig,
    database: &Database,
    dir: &Path,
) -> Result<Figures> {
    remove(dir)?;
    let mut subject = Subject::load(store, config, database, dir)?;
    let (traversals, checksum) = subject.traversals(config)?;
    let mut commits_per_s = Vec::new();
    for &threads in &config.threads {
        let rate = subject.commits(threads, &database.atomic_parts, config.commit_seconds)?;
        commits_per_s.push((threads, rate));
    }
    let load_s = subject.load_s;
    subject.close()?;
    let bytes_on_disk = crate::workspace::bytes_on_disk(dir);
    let reopen = match &config.crash_child {
        Some(command) => {
            let part = database.first_atomic_part();
            let mut command = command.clone();
            command.extend(
                [
                    "--store".into(),
                    store.name().into(),
                    "--dir".into(),
                    dir.as_os_str().to_owned(),
                    "--part".into(),
                    part.to_string().into(),
                ]
                .into_iter()
                .map(|a: OsString| a),
            );
            Some(crash::kill_and_reopen(&command, store, dir, part)?)
        }
        None => None,
    };
    remove(dir)?;
    Ok(Figures {
        store,
        load_s,
        traversals,
        checksum,
        commits_per_s,
        bytes_on_disk,
        reopen,
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
        if other.checksum != first.checksum || counts(other) != counts(first) {
            return Err(Error::InvalidArgument(format!(
                "{} and {} disagree on the graph: checksums {:#x} and {:#x}, atomic parts \
                 visited {:?} and {:?}",
                first.store,
                other.store,
                first.checksum,
                other.checksum,
                counts(first),
                counts(other)
            )));
        }
    }
    Ok(())
}

/// The store under test.
enum Engine {
    Lodestore(Box<Store>),
    Peer(Box<dyn Peer>),
}

struct Subject {
    engine: Engine,
    load_s: f64,
}

impl Subject {
    fn load(
        kind: StoreKind,
        config: &PeersConfig,
        database: &Database,
        dir: &Path,
    ) -> Result<Subject> {
        let started = Instant::now();
        let engine = match kind.open_peer(dir)? {
            None => {
                let store = Store::create(dir, Options::new())?;
                oo7::generate(&store, &config.params, config.seed, &ProgressBar::hidden())?;
                Engine::Lodestore(Box::new(store))
            }
            Some(peer) => {
                load(peer.as_ref(), database)?;
                Engine::Peer(peer)
            }
        };
        Ok(Subject {
            engine,
            load_s: started.elapsed().as_secs_f64(),
        })
    }

    /// The measured traversals (median time of each), then the checksum of a final T1.
    fn traversals(&mut self, config: &PeersConfig) -> Result<(Vec<TraversalFigure>, u64)> {
        let mut figures = Vec::new();
        let mut runner = Runner::new(&self.engine)?;
        runner.traverse(Traversal::T1, config.seed)?;
        for &traversal in &config.traversals {
            let mut times = Vec::new();
            let mut counts = TraversalCounts::default();
            for run in 0..config.traversal_runs {
                let started = Instant::now();
                counts = runner.traverse(traversal, config.seed + u64::from(run))?;
                times.push(started.elapsed().as_secs_f64() * 1e3);
            }
            figures.push(TraversalFigure {
                traversal,
                median_ms: median(times),
                counts,
            });
        }
        let checksum = runner.traverse(Traversal::T1, config.seed)?.checksum;
        Ok((figures, checksum))
    }

    /// Durable commits per second by `threads` threads, each updating parts of its own stripe
    /// of `parts`, one per transaction, for `seconds`.
    fn commits(&self, threads: usize, parts: &[u64], seconds: f64) -> Result<f64> {
        let stripe = parts.len().div_ceil(threads).max(1);
        let started = Instant::now();
        let deadline = started + Duration::from_secs_f64(seconds);
        let commits: u64 = std::thread::scope(|scope| {
            let workers: Vec<_> = parts
                .chunks(stripe)
                .take(threads)
                .map(|stripe| {
                    let engine = &self.engine;
                    scope.spawn(move || commit_loop(engine, stripe, deadline))
                })
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().expect("commit thread panicked"))
                .sum::<Result<u64>>()
        })?;
        Ok(commits as f64 / started.elapsed().as_secs_f64())
    }

    fn close(self) -> Result<()> {
        match self.engine {
            Engine::Lodestore(store) => store.close(),
            Engine::Peer(peer) => {
                drop(peer);
                Ok(())
            }
        }
    }
}

/// Loads every object into `peer` in durable transactions of about [`LOAD_BATCH_BYTES`], the
/// roots last.
pub fn load(peer: &dyn Peer, database: &Database) -> Result<()> {
    let mut rest = &database.objects[..];
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
    let roots = kv::encode_roots(&database.roots)?;
    peer.write(&mut |kv| kv.put(kv::ROOTS_KEY, &roots))
}

/// Runs traversals of the first module, each in one transaction.
enum Runner<'e> {
    Lodestore {
        session: Box<lodestore::Session>,
        module: lodestore::Oid<oo7::schema::Module>,
    },
    Peer {
        peer: &'e dyn Peer,
        module: lodestore::Oid<oo7::schema::Module>,
    },
}

impl<'e> Runner<'e> {
    fn new(engine: &'e Engine) -> Result<Runner<'e>> {
        let first = |modules: Vec<lodestore::Oid<oo7::schema::Module>>| {
            modules
                .first()
                .copied()
                .ok_or_else(|| Error::InvalidArgument("the OO7 database has no module".into()))
        };
        Ok(match engine {
            Engine::Lodestore(store) => {
                let mut session = Box::new(store.session()?);
                let mut txn = session.begin()?;
                let module = first(oo7::modules(&mut txn)?)?;
                txn.commit()?;
                Runner::Lodestore { session, module }
            }
            Engine::Peer(peer) => {
                let mut modules = Vec::new();
                peer.read(&mut |kv| {
                    modules = oo7::modules(&mut PeerObjects::new(kv))?;
                    Ok(())
                })?;
                Runner::Peer {
                    peer: peer.as_ref(),
                    module: first(modules)?,
                }
            }
        })
    }

    fn traverse(&mut self, traversal: Traversal, seed: u64) -> Result<TraversalCounts> {
        match self {
            Runner::Lodestore { session, module } => {
                let mut txn = session.begin()?;
                let counts = oo7::traverse(&mut txn, *module, traversal, seed)?;
                txn.commit()?;
                Ok(counts)
            }
            Runner::Peer { peer, module } => {
                let mut counts = TraversalCounts::default();
                let work = &mut |kv: &mut dyn KvAccess| {
                    counts = oo7::traverse(&mut PeerObjects::new(kv), *module, traversal, seed)?;
                    Ok(())
                };
                if traversal.updates() {
                    peer.write(work)?;
                } else {
                    peer.read(work)?;
                }
                Ok(counts)
            }
        }
    }
}

/// One thread of the durable-commit workload: transactions updating the next part of `stripe`
/// until `deadline`; the number committed.
fn commit_loop(engine: &Engine, stripe: &[u64], deadline: Instant) -> Result<u64> {
    let mut commits = 0u64;
    let part = |n: u64| -> lodestore::Oid<AtomicPart> { typed(stripe[n as usize % stripe.len()]) };
    match engine {
        Engine::Lodestore(store) => {
            let mut session = store.session()?;
            while Instant::now() < deadline {
                session.transact(|txn| {
                    let atomic = txn.get_mut(part(commits))?;
                    atomic.x += 1;
                    atomic.y += 1;
                    Ok(())
                })?;
                commits += 1;
            }
        }
        Engine::Peer(peer) => {
            while Instant::now() < deadline {
                peer.write(&mut |kv| PeerObjects::new(kv).update(part(commits)))?;
                commits += 1;
            }
        }
    }
    Ok(commits)
}

fn median(mut values: Vec<f64>) -> f64 {
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
