//! Differential logging against physical logging (Lee, Kim & Cha, section 5): a table of
//! fixed-size records, transactions that insert two records or delete two, a few of them
//! aborted; the same work under `dl1p`, `dl2p` and `pl2p` with the same log streams. Measured
//! per method: bytes logged, transactions per second, and a restart of everything logged
//! since the checkpoint that ended the load (backup load, log read and replay apart).
//!
//! The restart is of a copy of the store's folder taken while the store is idle and open:
//! the files as a kill -9 would leave them (everything written, nothing closed).

use lodestore::{Options, RawOid, RecoveryMethodKind, Result, Store};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::path::Path;
use std::time::Instant;

/// The methods compared, baseline last.
pub const METHODS: [RecoveryMethodKind; 3] = [
    RecoveryMethodKind::Dl1p,
    RecoveryMethodKind::Dl2p,
    RecoveryMethodKind::Pl2p,
];

/// Type id of the table's records (byte strings of the slot size).
const SLOT_TYPE: u32 = 0xd1f0;

/// What to run.
#[derive(Clone, Debug, Serialize)]
pub struct Setup {
    /// Records in the table before the measured transactions.
    pub records: u64,
    /// Measured transactions (all threads together).
    pub transactions: u64,
    /// Bytes of one record (the paper's slot size).
    pub slot_bytes: usize,
    pub streams: usize,
    pub threads: usize,
    /// Transactions aborted instead of committed, in percent.
    pub abort_percent: u32,
}

impl Default for Setup {
    fn default() -> Setup {
        Setup {
            records: 50_000,
            transactions: 4_000,
            slot_bytes: 256,
            streams: 2,
            threads: 4,
            abort_percent: 2,
        }
    }
}

/// What one method measured.
#[derive(Clone, Debug, Serialize)]
pub struct Figures {
    pub method: &'static str,
    pub log_bytes: u64,
    pub txns_per_s: f64,
    pub restart_ms: f64,
    pub backup_load_ms: f64,
    pub log_read_ms: f64,
    pub replay_ms: f64,
    pub records_replayed: u64,
}

fn options(method: RecoveryMethodKind, setup: &Setup) -> Options {
    // The whole table resident, twice over for the restart's image, and no checkpoint during
    // the measured transactions: the restart replays all of them.
    let table = setup.records * (setup.slot_bytes as u64 + 64) * 2 + (64 << 20);
    Options::new()
        .recovery_method(method)
        .log_streams(setup.streams)
        .server_pool_bytes(table as usize)
        .checkpoint_log_bytes(1 << 40)
        .background_install(false)
}

/// Runs the workload under `method` in the folder `dir` (replaced).
pub fn run(method: RecoveryMethodKind, dir: &Path, setup: &Setup, seed: u64) -> Result<Figures> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| lodestore::Error::io(dir, "create folder", e))?;
    let path = dir.join("store");
    let store = Store::create(&path, options(method, setup))?;
    let slot = vec![0x5au8; setup.slot_bytes];
    let mut oids: Vec<RawOid> = Vec::with_capacity(setup.records as usize);
    {
        let mut session = store.session()?;
        while (oids.len() as u64) < setup.records {
            let mut txn = session.begin()?;
            let batch = (setup.records - oids.len() as u64).min(1_000);
            for _ in 0..batch {
                oids.push(txn.alloc_bytes(SLOT_TYPE, &slot)?);
            }
            txn.commit()?;
        }
    }
    // A clean close checkpoints: the measured log starts there.
    store.close()?;
    let store = Store::open(&path, options(method, setup))?;
    let before = store.log_stats().bytes_appended;
    let threads = setup.threads.max(1);
    let per_thread = setup.transactions / threads as u64;
    let started = Instant::now();
    std::thread::scope(|scope| -> Result<()> {
        let mut workers = Vec::new();
        for t in 0..threads {
            // Each thread owns the records at its positions, so deletes never conflict.
            let mut own: Vec<RawOid> = oids.iter().skip(t).step_by(threads).copied().collect();
            let store = &store;
            let slot = &slot;
            workers.push(scope.spawn(move || -> Result<()> {
                let mut rng = StdRng::seed_from_u64(seed * 1_000 + t as u64);
                let mut session = store.session()?;
                let mut done = 0;
                while done < per_thread {
                    let insert = own.len() < 2 || rng.random_bool(0.5);
                    let abort = rng.random_range(0..100) < setup.abort_percent;
                    let mut txn = session.begin()?;
                    let mut added = Vec::new();
                    let mut removed = Vec::new();
                    // Records of several threads share pages: a transaction may lose a
                    // deadlock, and then runs again.
                    let attempt = (|| -> Result<()> {
                        if insert {
                            for _ in 0..2 {
                                added.push(txn.alloc_bytes(SLOT_TYPE, slot)?);
                            }
                        } else {
                            for _ in 0..2 {
                                let oid = own[rng.random_range(0..own.len())];
                                if removed.contains(&oid) {
                                    continue;
                                }
                                txn.free(oid)?;
                                removed.push(oid);
                            }
                        }
                        Ok(())
                    })();
                    match attempt {
                        Err(e) if e.is_retryable() => {
                            txn.abort()?;
                            continue;
                        }
                        Err(e) => return Err(e),
                        Ok(()) => {}
                    }
                    let outcome = if abort {
                        txn.abort()
                    } else {
                        txn.commit().map(|_| ())
                    };
                    match outcome {
                        Err(e) if e.is_retryable() => continue,
                        Err(e) => return Err(e),
                        Ok(()) if abort => {}
                        Ok(()) => {
                            own.retain(|oid| !removed.contains(oid));
                            own.extend(added);
                        }
                    }
                    done += 1;
                }
                Ok(())
            }));
        }
        for worker in workers {
            worker.join().expect("worker thread panicked")?;
        }
        Ok(())
    })?;
    let elapsed = started.elapsed().as_secs_f64();
    let log_bytes = store.log_stats().bytes_appended - before;
    // The files as a kill -9 would leave them: copied while the store is open and idle.
    let copy = dir.join("killed");
    copy_folder(&path, &copy)?;
    drop(store);
    let reopened = Store::open(&copy, options(method, setup))?;
    let report = reopened.restart_report().clone();
    drop(reopened);
    let ms = |us: u64| us as f64 / 1e3;
    Ok(Figures {
        method: method.name(),
        log_bytes,
        txns_per_s: (per_thread * threads as u64) as f64 / elapsed,
        restart_ms: ms(report.elapsed_us),
        backup_load_ms: ms(report.backup_load_us),
        log_read_ms: ms(report.log_read_us),
        replay_ms: ms(report.replay_us),
        records_replayed: report.records_scanned,
    })
}

/// Copies the folder `from` to `to`, files and subfolders.
fn copy_folder(from: &Path, to: &Path) -> Result<()> {
    fn io<'a>(
        path: &'a Path,
        what: &'static str,
    ) -> impl Fn(std::io::Error) -> lodestore::Error + 'a {
        move |e| lodestore::Error::io(path, what, e)
    }
    std::fs::create_dir_all(to).map_err(io(to, "create folder"))?;
    for entry in std::fs::read_dir(from).map_err(io(from, "list folder"))? {
        let entry = entry.map_err(io(from, "list folder"))?;
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_folder(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target).map_err(io(&target, "copy file"))?;
        }
    }
    Ok(())
}
