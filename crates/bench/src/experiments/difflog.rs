//! Differential logging against physical logging (Lee, Kim & Cha, section 5): a table of
//! fixed-size records, transactions that insert two records or delete two, a few of them
//! aborted; the same work under `dl1p`, `dl2p` and `pl2p` with the same log streams. Measured
//! per method: bytes logged, transactions per second, and a restart of everything logged
//! since the checkpoint that ended the load (backup load, log read and replay apart).
//!
//! The restart is of a copy of the store's folder taken while the store is idle and open:
//! the files as a kill -9 would leave them (everything written, nothing closed).

use lodestore::{
    DiskModel, EmulatedDisks, FileSystem, OpenMode, Options, Placement, RawOid, RealFileSystem,
    RecoveryMethodKind, RestartLevel, Result, Store,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::path::Path;
use std::sync::Arc;
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
    /// Each log stream on an emulated device of its own with this model (see
    /// [`lodestore::EmulatedDisks`]); `None`: the streams are files on the real disk.
    #[serde(skip)]
    pub disk: Option<DiskModel>,
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
            disk: None,
        }
    }
}

/// One restart of the files a kill -9 left.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct RestartFigures {
    /// The whole reopening (`Store::open`), the engine's own work around the replay included.
    pub total_ms: f64,
    pub backup_load_ms: f64,
    /// The longest stream's read.
    pub log_read_ms: f64,
    /// Log processing after the reads (both together: the log processing time).
    pub replay_ms: f64,
    pub records: u64,
}

impl RestartFigures {
    /// Reading and replaying the streams (the paper's log processing time).
    pub fn log_processing_ms(&self) -> f64 {
        self.log_read_ms + self.replay_ms
    }
}

/// What one method measured.
#[derive(Clone, Debug, Serialize)]
pub struct Figures {
    pub method: &'static str,
    pub log_bytes: u64,
    pub txns_per_s: f64,
    /// Restart at level 1 (backup, then every stream read whole, then replayed); the
    /// physical baseline has none.
    pub level1: Option<RestartFigures>,
    /// Restart at level 2: the backup first, each stream replayed as it is read (the paper's
    /// "Seq"; the baseline merges the streams by serial number on one thread as they are read).
    pub level2: RestartFigures,
    /// Restart at level 4: the backup XORed in while the streams replay ("Para").
    pub level4: Option<RestartFigures>,
    /// The streams' files read raw, cold, a thread per stream, in the same run: the
    /// ceiling of log reading on these disks.
    pub disk_read_mb_s: f64,
    /// Emulated disks: the share of the measured transactions' time each stream's device was
    /// busy (transfers and syncs).
    pub device_busy: Vec<f64>,
}

fn options(method: RecoveryMethodKind, setup: &Setup) -> Options {
    options_on(method, setup, file_system(setup))
}

fn options_on(method: RecoveryMethodKind, setup: &Setup, fs: Arc<dyn FileSystem>) -> Options {
    // The whole table resident, twice over for the restart's image, and no checkpoint during
    // the measured transactions: the restart replays all of them.
    let table = setup.records * (setup.slot_bytes as u64 + 64) * 2 + (64 << 20);
    Options::new()
        .recovery_method(method)
        .log_streams(setup.streams)
        .server_pool_bytes(table as usize)
        .checkpoint_log_bytes(1 << 40)
        .background_install(false)
        .file_system(fs)
}

/// The real file system, or one with each stream's files on an emulated device (fresh
/// devices each time, so a restart does not queue behind the run before it).
fn file_system(setup: &Setup) -> Arc<dyn FileSystem> {
    match emulated_disks(setup) {
        None => Arc::new(RealFileSystem),
        Some(disks) => disks,
    }
}

fn emulated_disks(setup: &Setup) -> Option<Arc<EmulatedDisks>> {
    let model = setup.disk?;
    Some(Arc::new(
        EmulatedDisks::new(
            Arc::new(RealFileSystem),
            model,
            setup.streams,
            Box::new(stream_of),
        )
        .expect("the command line checks the model and the streams"),
    ))
}

/// The stream whose folder holds `path` (`.../differential/stream-N/...`).
fn stream_of(path: &Path) -> Option<usize> {
    path.components().find_map(|c| {
        c.as_os_str()
            .to_str()?
            .strip_prefix("stream-")?
            .parse()
            .ok()
    })
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
    let disks = emulated_disks(setup);
    let fs: Arc<dyn FileSystem> = match &disks {
        Some(disks) => disks.clone(),
        None => Arc::new(RealFileSystem),
    };
    let store = Store::open(&path, options_on(method, setup, fs))?;
    let devices_before = disks.as_ref().map(|d| d.stats()).unwrap_or_default();
    let before = store.log_stats().bytes_appended;
    let threads = setup.threads.max(1);
    let per_thread = setup.transactions / threads as u64;
    let started = Instant::now();
    std::thread::scope(|scope| -> Result<()> {
        let mut workers = Vec::new();
        for t in 0..threads {
            // Each thread owns a run of the table's records and inserts on pages of its own
            // (clustered placement), so threads meet on few pages: under strict two-phase
            // locking a page stays locked until its commit is durable, and shared pages would
            // make the lock waits, not the log, the bottleneck.
            let share = oids.len().div_ceil(threads);
            let mut own: Vec<RawOid> = oids.iter().skip(t * share).take(share).copied().collect();
            let store = &store;
            let slot = &slot;
            workers.push(scope.spawn(move || -> Result<()> {
                let mut rng = StdRng::seed_from_u64(seed * 1_000 + t as u64);
                let mut session = store.session()?;
                session.set_placement(Placement::Clustered);
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
                                let at = rng.random_range(0..own.len());
                                if removed.contains(&at) {
                                    continue;
                                }
                                txn.free(own[at])?;
                                removed.push(at);
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
                            // Highest first, so each position still names its record (a pass
                            // over the whole list per transaction was a visible share of the
                            // CPU the threads compete for).
                            removed.sort_unstable_by(|a, b| b.cmp(a));
                            for at in removed {
                                own.swap_remove(at);
                            }
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
    // What each emulated device moved during the measured transactions, as a share of what
    // it could have.
    let device_busy: Vec<f64> = match (&disks, setup.disk) {
        (Some(disks), Some(model)) => disks
            .stats()
            .iter()
            .zip(&devices_before)
            .map(|(after, before)| {
                let bytes = (after.bytes_written - before.bytes_written) as f64;
                let syncs = (after.syncs - before.syncs) as f64;
                (bytes / model.bytes_per_s as f64 + syncs * model.sync_latency.as_secs_f64())
                    / elapsed
            })
            .collect(),
        _ => Vec::new(),
    };
    let log_bytes = store.log_stats().bytes_appended - before;
    // The files as a kill -9 would leave them: copied while the store is open and idle, once
    // for each restart, each out of the page cache before it starts. The baseline restarts
    // at level 2 only, the paper's PL2P-Seq (the backup first, then the merge as the streams
    // are read).
    let levels: &[RestartLevel] = if method == RecoveryMethodKind::Pl2p {
        &[RestartLevel::Two]
    } else {
        &[RestartLevel::One, RestartLevel::Two, RestartLevel::Four]
    };
    let copies: Vec<std::path::PathBuf> = levels
        .iter()
        .map(|level| dir.join(format!("killed-level{}", level.number())))
        .collect();
    for copy in &copies {
        copy_folder(&path, copy)?;
    }
    drop(store);
    // On emulated disks the devices' clocks are the cost of reading, and the files stay in
    // the page cache so the real disk beneath adds nothing.
    let cold = setup.disk.is_none();
    if cold {
        // Every copy written out first: a copy still dirty would be written back while
        // another is read, and the restart measured would share the disk with it.
        for copy in &copies {
            crate::workspace::evict_from_page_cache(copy)?;
        }
    }
    let disk_read_mb_s = read_streams_raw(file_system(setup).as_ref(), &copies[0], setup.streams)?;
    let mut restarts = [None; 4];
    for (level, copy) in levels.iter().zip(&copies) {
        if cold {
            crate::workspace::evict_from_page_cache(copy)?;
        }
        restarts[level.number() as usize - 1] =
            Some(restart(copy, options(method, setup).restart_level(*level))?);
        if cold {
            // What the reopened store wrote as it closed goes to the disk now, not during
            // the next restart's reads.
            crate::workspace::evict_from_page_cache(copy)?;
        }
    }
    let [level1, level2, _, level4] = restarts;
    Ok(Figures {
        method: method.name(),
        log_bytes,
        txns_per_s: (per_thread * threads as u64) as f64 / elapsed,
        level1,
        level2: level2.expect("every method restarts at level 2"),
        level4,
        disk_read_mb_s,
        device_busy,
    })
}

fn restart(copy: &Path, options: Options) -> Result<RestartFigures> {
    let started = Instant::now();
    let reopened = Store::open(copy, options)?;
    let total_us = started.elapsed().as_micros() as u64;
    let report = reopened.restart_report().clone();
    drop(reopened);
    let ms = |us: u64| us as f64 / 1e3;
    Ok(RestartFigures {
        total_ms: ms(total_us),
        backup_load_ms: ms(report.backup_load_us),
        log_read_ms: ms(report.log_read_us),
        replay_ms: ms(report.replay_us),
        records: report.records_scanned,
    })
}

/// Reads every file of the `streams` stream folders of the store in `store_dir` whole, cold,
/// a thread per stream, in reads of a MiB: megabytes per second.
fn read_streams_raw(fs: &dyn FileSystem, store_dir: &Path, streams: usize) -> Result<f64> {
    let started = Instant::now();
    let bytes = std::thread::scope(|scope| -> Result<u64> {
        let readers: Vec<_> = (0..streams)
            .map(|s| {
                scope.spawn(move || -> Result<u64> {
                    let folder = store_dir.join("differential").join(format!("stream-{s}"));
                    let mut buf = vec![0u8; 1 << 20];
                    let mut total = 0;
                    for path in fs.list(&folder)? {
                        let file = fs.open(&path, OpenMode::ReadOnly)?;
                        let len = file.len()?;
                        let mut at = 0;
                        while at < len {
                            let n = (len - at).min(buf.len() as u64) as usize;
                            file.read_at(at, &mut buf[..n])?;
                            at += n as u64;
                        }
                        total += len;
                    }
                    Ok(total)
                })
            })
            .collect();
        readers
            .into_iter()
            .map(|r| r.join().expect("a reader thread panicked"))
            .sum()
    })?;
    Ok(bytes as f64 / 1e6 / started.elapsed().as_secs_f64().max(1e-9))
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
