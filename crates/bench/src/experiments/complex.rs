//! Hasse & Weikum's complex-object benchmark (VLDB 1991, section 3.1): complex objects (COs)
//! each owning subobjects (SOs) clustered on pages of their own behind a read-only header,
//! with references to foreign SOs (a CO chosen by an 80-20 rule, an SO in it by a 50-50
//! rule); transactions of `c` operations on distinct COs (80-20), each reading `o` own SOs
//! (50-50) and `f` foreign ones (uniform over the CO's references), updating each with
//! probability `u`. Each operation is one [`Change`]: under S1 all of them run in one flat
//! transaction holding its page locks to the end; under S2 and S2/PS each is a
//! subtransaction whose page locks end with it, under shared or exclusive locks on the SOs
//! themselves held to the end of the transaction.
//!
//! The paper's contention came from 1991 disks: a buffer pool a tenth of the database, page
//! reads of tens of milliseconds. Here the data file can sit on an emulated device whose
//! reads take a set latency (side by side, as from a disk array), so that a transaction lasts
//! long enough for its page locks to matter; without it, the same transactions run in
//! microseconds.

use lodestore::multilevel::{Change, ChangeStep, Strategy};
use lodestore::{
    DiskModel, EmulatedDisks, Error, FileSystem, Options, Placement, RawOid, RealFileSystem,
    RecoveryMethodKind, Result, Store,
};
use rand::rngs::StdRng;
use rand::seq::index::sample;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The strategies compared, the single-level baseline first.
pub const STRATEGIES: [Strategy; 3] = Strategy::ALL;

const HEADER_TYPE: u32 = 0xc0_0001;
const SUBOBJECT_TYPE: u32 = 0xc0_0002;
/// Bytes of one subobject: with the slot and record header, about 100 fit a 4 KiB page, so a
/// CO of 1,000 fills ten pages as in the paper (there 2 KiB pages of 100 SOs).
pub const SUBOBJECT_BYTES: usize = 32;
/// Most transactions run at once.
pub const DMP_MAX: usize = 256;
/// Restarts of one transaction before the run gives up on it (a livelock, not contention).
const RESTARTS_MAX: u32 = 1000;

/// The database.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Shape {
    pub complex_objects: u32,
    /// Own SOs of each CO.
    pub subobjects: u32,
    /// References to foreign SOs in each CO's header.
    pub foreign_refs: u32,
}

impl Shape {
    /// The paper's database: 1,000 COs of 1,000 SOs, 100 foreign references each.
    pub const PAPER: Shape = Shape {
        complex_objects: 1000,
        subobjects: 1000,
        foreign_refs: 100,
    };
}

/// The transactions.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Workload {
    /// CO operations per transaction.
    pub c: u32,
    /// Own SOs each operation visits.
    pub o: u32,
    /// Foreign SOs each operation visits.
    pub f: u32,
    /// Chance that a visited SO is updated, in percent.
    pub update_percent: u32,
}

impl Workload {
    /// The paper's baseline (section 3.2): c = 12, o = 10, f = 0, u = 20%.
    pub const BASELINE: Workload = Workload {
        c: 12,
        o: 10,
        f: 0,
        update_percent: 20,
    };
    /// The paper's foreign case (section 3.3): o = 0, f = 10.
    pub const FOREIGN: Workload = Workload {
        c: 12,
        o: 0,
        f: 10,
        update_percent: 20,
    };
}

/// Where the store runs.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Machine {
    pub server_pool_bytes: usize,
    pub client_cache_bytes: usize,
    /// Each read of the data file takes this long (emulated); zero: the real disk alone.
    pub read_latency: Duration,
    /// The recovery method beneath the strategies (the level-0 log).
    #[serde(skip)]
    pub method: RecoveryMethodKind,
    /// `dbcache`: a sphere reaching this many pages at a subtransaction's end is written then
    /// (0: at its transaction's end).
    pub sphere_write_pages: usize,
}

/// One complex object as the driver knows it (the store holds the same in its header).
#[derive(Clone, Debug)]
pub struct ComplexObject {
    pub header: RawOid,
    pub own: Vec<RawOid>,
    pub foreign: Vec<RawOid>,
}

/// A loaded benchmark store.
pub struct Database {
    pub store: Store,
    pub objects: Vec<ComplexObject>,
    pub shape: Shape,
    /// Data pages the load filled (header and SOs).
    pub pages: u64,
    /// The last value a transaction wrote: every transaction writes a new one, so that each
    /// update changes bytes (rewriting what is there changes no page).
    stamps: AtomicU64,
}

/// An index in `0..n` by an `hot`-`cold` rule: `hot` percent of the picks fall on the first
/// `100 - hot` percent of the indexes (80-20: 80% on the first 20%); 50-50 is uniform.
pub fn skewed(rng: &mut impl Rng, n: usize, hot: u32) -> usize {
    debug_assert!(n > 0 && (50..100).contains(&hot));
    let hot_items = (n * (100 - hot) as usize).div_ceil(100).clamp(1, n);
    if hot_items == n || rng.random_range(0..100) < hot {
        rng.random_range(0..hot_items)
    } else {
        rng.random_range(hot_items..n)
    }
}

impl Shape {
    fn check(&self) -> Result<()> {
        if self.complex_objects < 2 || self.subobjects == 0 || self.foreign_refs == 0 {
            return Err(Error::InvalidArgument(
                "complex-object benchmark: at least 2 complex objects, 1 subobject and 1 \
                 foreign reference each"
                    .into(),
            ));
        }
        Ok(())
    }
}

impl Workload {
    /// Refuses a workload `shape`'s database cannot run (before anything is built).
    pub fn check(&self, shape: &Shape) -> Result<()> {
        shape.check()?;
        if self.c == 0 || self.c > shape.complex_objects {
            return Err(Error::InvalidArgument(format!(
                "complex-object benchmark: c = {} operations on distinct complex objects, of {}",
                self.c, shape.complex_objects
            )));
        }
        if self.o > shape.subobjects || self.f > shape.foreign_refs || self.o + self.f == 0 {
            return Err(Error::InvalidArgument(format!(
                "complex-object benchmark: o = {} of {} own subobjects and f = {} of {} \
                 foreign references, at least one in all",
                self.o, shape.subobjects, self.f, shape.foreign_refs
            )));
        }
        if self.update_percent > 100 {
            return Err(Error::InvalidArgument(format!(
                "complex-object benchmark: update probability {}%",
                self.update_percent
            )));
        }
        Ok(())
    }
}

fn options(machine: &Machine, fs: Arc<dyn FileSystem>) -> Options {
    Options::new()
        .page_size(4096)
        .recovery_method(machine.method)
        .sphere_write_pages(machine.sphere_write_pages)
        .server_pool_bytes(machine.server_pool_bytes)
        .client_cache_bytes(machine.client_cache_bytes)
        .file_system(fs)
}

/// The file system the store runs on: the data file on an emulated device when reads have a
/// latency.
fn file_system(machine: &Machine) -> Result<Arc<dyn FileSystem>> {
    if machine.read_latency.is_zero() {
        return Ok(Arc::new(RealFileSystem));
    }
    Ok(Arc::new(EmulatedDisks::new(
        Arc::new(RealFileSystem),
        DiskModel {
            // Transfers cost next to nothing: the latency is the point.
            bytes_per_s: 10_000_000_000,
            sync_latency: Duration::ZERO,
            read_latency: machine.read_latency,
        },
        1,
        Box::new(|path: &Path| (path.file_name()? == lodestore::DATA_FILE_NAME).then_some(0)),
    )?))
}

/// Builds the database in `dir` (which must not hold a store): each CO in one transaction,
/// its header first and its SOs after it on pages of their own, then the foreign references
/// chosen and written into the headers.
pub fn load(dir: &Path, shape: Shape, machine: &Machine, seed: u64) -> Result<Database> {
    shape.check()?;
    let store = Store::create(dir, options(machine, file_system(machine)?))?;
    let mut session = store.session()?;
    session.set_placement(Placement::Clustered);
    let header_bytes = 8 * shape.foreign_refs as usize;
    let mut objects = Vec::with_capacity(shape.complex_objects as usize);
    for _ in 0..shape.complex_objects {
        // A fresh cluster per CO: its pages are its own.
        session.set_placement(Placement::Anywhere);
        session.set_placement(Placement::Clustered);
        let object = session.transact(|txn| {
            let header = txn.alloc_zeroed(HEADER_TYPE, header_bytes as u64)?;
            let own = (0..shape.subobjects)
                .map(|_| txn.alloc_zeroed(SUBOBJECT_TYPE, SUBOBJECT_BYTES as u64))
                .collect::<Result<Vec<_>>>()?;
            Ok(ComplexObject {
                header,
                own,
                foreign: Vec::new(),
            })
        })?;
        objects.push(object);
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let n = objects.len();
    for co in 0..n {
        let foreign: Vec<RawOid> = (0..shape.foreign_refs)
            .map(|_| {
                let owner = loop {
                    let other = skewed(&mut rng, n, 80);
                    if other != co {
                        break other;
                    }
                };
                let own = &objects[owner].own;
                own[rng.random_range(0..own.len())]
            })
            .collect();
        objects[co].foreign = foreign;
    }
    for chunk in objects.chunks(64) {
        session.transact(|txn| {
            for object in chunk {
                let bytes: Vec<u8> = object
                    .foreign
                    .iter()
                    .flat_map(|oid| oid.0.to_le_bytes())
                    .collect();
                txn.write_at(object.header, 0, &bytes)?;
            }
            Ok(())
        })?;
    }
    drop(session);
    store.checkpoint()?;
    let mut pages: Vec<u64> = objects
        .iter()
        .flat_map(|o| {
            o.own
                .iter()
                .chain([&o.header])
                .map(|oid| u64::from(oid.page().0))
        })
        .collect();
    pages.sort_unstable();
    pages.dedup();
    Ok(Database {
        store,
        objects,
        shape,
        pages: pages.len() as u64,
        stamps: AtomicU64::new(0),
    })
}

/// One transaction's operations, drawn as the paper draws them.
pub fn transaction(
    rng: &mut impl Rng,
    objects: &[ComplexObject],
    workload: &Workload,
    stamp: u64,
) -> Vec<Change> {
    let mut chosen: Vec<usize> = Vec::with_capacity(workload.c as usize);
    while chosen.len() < workload.c as usize {
        let co = skewed(rng, objects.len(), 80);
        if !chosen.contains(&co) {
            chosen.push(co);
        }
    }
    chosen
        .into_iter()
        .map(|co| {
            let object = &objects[co];
            let mut steps = vec![ChangeStep::Read(object.header)];
            // 50-50 within the CO is uniform; each SO once per operation.
            let own = sample(rng, object.own.len(), workload.o as usize);
            let foreign = sample(rng, object.foreign.len(), workload.f as usize);
            let visited = own
                .into_iter()
                .map(|i| object.own[i])
                .chain(foreign.into_iter().map(|i| object.foreign[i]));
            for so in visited {
                steps.push(if rng.random_range(0..100) < workload.update_percent {
                    ChangeStep::Write {
                        object: so,
                        offset: 0,
                        bytes: stamp.to_le_bytes().to_vec(),
                    }
                } else {
                    ChangeStep::Read(so)
                });
            }
            Change { steps }
        })
        .collect()
}

/// What one strategy did at one DMP.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Point {
    pub dmp: usize,
    pub seconds: f64,
    pub committed: u64,
    pub txns_per_s: f64,
    /// From a transaction's first start to its commit, restarts included.
    pub response_ms: f64,
    /// Lock requests that waited, of all lock requests (both levels).
    pub conflict_rate: f64,
    /// Time spent waiting for locks per committed transaction.
    pub lock_wait_ms_per_txn: f64,
    pub deadlocks: u64,
    pub timeouts: u64,
    /// Transactions started again after a deadlock or timeout.
    pub restarts: u64,
    /// Transactions given up: still losing conflicts after many restarts, or when the
    /// measurement ended.
    pub abandoned: u64,
    /// Forced writes of the level-0 log.
    pub l0_writes_per_s: f64,
    pub l0_writes_per_txn: f64,
    /// Page images per forced log write (whole-page logging: every change is one).
    pub pages_per_l0_write: f64,
    pub sphere_pages_mean: f64,
    pub sphere_pages_max: u64,
    /// Reads of the data file per committed transaction (buffer pool misses).
    pub page_reads_per_txn: f64,
}

/// What the workers counted.
#[derive(Default)]
struct Tally {
    committed: u64,
    response: Duration,
    restarts: u64,
    abandoned: u64,
}

fn run_once(session: &mut lodestore::Session, strategy: Strategy, ops: &[Change]) -> Result<()> {
    let mut txn = session.begin_multi_level_with(strategy)?;
    for op in ops {
        txn.apply(op)?;
    }
    txn.commit().map(|_| ())
}

/// Runs `strategy` with `dmp` sessions for `seconds` on `db` and measures it.
pub fn measure(
    db: &Database,
    workload: &Workload,
    strategy: Strategy,
    dmp: usize,
    seconds: f64,
    seed: u64,
) -> Result<Point> {
    workload.check(&db.shape)?;
    if dmp == 0 || dmp > DMP_MAX || !(seconds > 0.0 && seconds.is_finite()) {
        return Err(Error::InvalidArgument(format!(
            "complex-object benchmark: DMP {dmp} (1 to {DMP_MAX}), {seconds} s"
        )));
    }
    let store = &db.store;
    let stop = AtomicBool::new(false);
    let tally = Mutex::new(Tally::default());
    let window = Duration::from_secs_f64(seconds);
    let _ = store.take_sphere_pages_max();
    let (locks, log, server) = (store.lock_stats(), store.log_stats(), store.server_stats());
    let started = Instant::now();
    let deadline = started + window;
    let after = std::thread::scope(|scope| -> Result<_> {
        let workers: Vec<_> = (0..dmp)
            .map(|w| {
                let (stop, tally) = (&stop, &tally);
                scope.spawn(move || -> Result<()> {
                    let mut rng = StdRng::seed_from_u64(seed ^ ((w as u64 + 1) << 32));
                    let mut session = store.session()?;
                    let mut mine = Tally::default();
                    while !stop.load(Ordering::Relaxed) {
                        let stamp = db.stamps.fetch_add(1, Ordering::Relaxed) + 1;
                        let ops = transaction(&mut rng, &db.objects, workload, stamp);
                        let first = Instant::now();
                        let mut restarts = 0;
                        let committed = loop {
                            match run_once(&mut session, strategy, &ops) {
                                Ok(()) => break true,
                                Err(e) if e.is_retryable() => {
                                    if restarts >= RESTARTS_MAX || stop.load(Ordering::Relaxed) {
                                        break false;
                                    }
                                    restarts += 1;
                                    // A short random pause, so the victims do not meet again.
                                    let pause =
                                        rng.random_range(0..500 * u64::from(restarts.min(8)));
                                    std::thread::sleep(Duration::from_micros(pause));
                                }
                                Err(e) => return Err(e),
                            }
                        };
                        let done = Instant::now();
                        if done > deadline {
                            continue;
                        }
                        mine.restarts += u64::from(restarts);
                        if committed {
                            mine.committed += 1;
                            mine.response += done - first;
                        } else {
                            mine.abandoned += 1;
                        }
                    }
                    let mut all = tally.lock().unwrap_or_else(|e| e.into_inner());
                    all.committed += mine.committed;
                    all.response += mine.response;
                    all.restarts += mine.restarts;
                    all.abandoned += mine.abandoned;
                    Ok(())
                })
            })
            .collect();
        std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
        let after = (store.lock_stats(), store.log_stats(), store.server_stats());
        let sphere_max = store.take_sphere_pages_max().unwrap_or(0);
        stop.store(true, Ordering::Relaxed);
        for worker in workers {
            worker
                .join()
                .map_err(|_| Error::InvalidArgument("a benchmark worker panicked".into()))??;
        }
        Ok((after, sphere_max))
    })?;
    let ((locks2, log2, server2), sphere_max) = after;
    let tally = tally.into_inner().unwrap_or_else(|e| e.into_inner());
    let committed = tally.committed;
    let per_txn = |n: u64| n as f64 / committed.max(1) as f64;
    let flushes = log2.flushes - log.flushes;
    let spheres = server2.spheres - server.spheres;
    let requests = locks2.requests - locks.requests;
    Ok(Point {
        dmp,
        seconds,
        committed,
        txns_per_s: committed as f64 / seconds,
        response_ms: tally.response.as_secs_f64() * 1e3 / committed.max(1) as f64,
        conflict_rate: (locks2.requests_blocked - locks.requests_blocked) as f64
            / requests.max(1) as f64,
        lock_wait_ms_per_txn: per_txn(locks2.wait_micros - locks.wait_micros) / 1e3,
        deadlocks: locks2.deadlocks - locks.deadlocks,
        timeouts: locks2.timeouts - locks.timeouts,
        restarts: tally.restarts,
        abandoned: tally.abandoned,
        l0_writes_per_s: flushes as f64 / seconds,
        l0_writes_per_txn: per_txn(flushes),
        pages_per_l0_write: (server2.page_images_logged - server.page_images_logged) as f64
            / flushes.max(1) as f64,
        sphere_pages_mean: (server2.sphere_pages - server.sphere_pages) as f64
            / spheres.max(1) as f64,
        sphere_pages_max: sphere_max,
        page_reads_per_txn: per_txn(server2.pages_read - server.pages_read),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_80_20_rule_puts_four_fifths_of_the_picks_on_a_fifth() {
        let mut rng = StdRng::seed_from_u64(7);
        let picks = 100_000;
        let hot = (0..picks)
            .filter(|_| skewed(&mut rng, 1000, 80) < 200)
            .count();
        let share = hot as f64 / picks as f64;
        assert!((0.79..0.81).contains(&share), "{share}");
        // Every index can come up, cold ones too.
        let mut seen = [false; 10];
        for _ in 0..10_000 {
            seen[skewed(&mut rng, 10, 80)] = true;
        }
        assert!(seen.iter().all(|s| *s));
    }

    #[test]
    fn a_transaction_visits_distinct_objects_with_the_workload_s_counts() {
        let objects: Vec<ComplexObject> = (0..20u64)
            .map(|co| ComplexObject {
                header: RawOid(co << 32),
                own: (1..=50).map(|s| RawOid((co << 32) | s)).collect(),
                foreign: (0..10)
                    .map(|s| RawOid((99 << 32) | (co * 10 + s)))
                    .collect(),
            })
            .collect();
        let workload = Workload {
            c: 5,
            o: 4,
            f: 3,
            update_percent: 50,
        };
        let mut rng = StdRng::seed_from_u64(3);
        let mut writes = 0;
        let mut visits = 0;
        for _ in 0..200 {
            let ops = transaction(&mut rng, &objects, &workload, 9);
            assert_eq!(ops.len(), 5);
            let mut headers: Vec<RawOid> = ops
                .iter()
                .map(|op| match op.steps[0] {
                    ChangeStep::Read(h) => h,
                    _ => panic!("an operation starts at its header"),
                })
                .collect();
            headers.sort_unstable();
            headers.dedup();
            assert_eq!(headers.len(), 5, "distinct complex objects");
            for op in &ops {
                assert_eq!(op.steps.len(), 1 + 4 + 3);
                let co = op.steps[0].clone();
                let ChangeStep::Read(header) = co else {
                    unreachable!()
                };
                let object = &objects[(header.0 >> 32) as usize];
                for step in &op.steps[1..] {
                    visits += 1;
                    let so = match step {
                        ChangeStep::Read(so) => *so,
                        ChangeStep::Write { object, bytes, .. } => {
                            writes += 1;
                            assert_eq!(bytes, &9u64.to_le_bytes());
                            *object
                        }
                    };
                    assert!(object.own.contains(&so) || object.foreign.contains(&so));
                }
            }
        }
        let share = writes as f64 / visits as f64;
        assert!((0.45..0.55).contains(&share), "{share}");
    }
}
