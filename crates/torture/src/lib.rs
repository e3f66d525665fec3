//! Crash campaigns. A seeded workload runs against a store on the crash-simulating file system;
//! at a chosen I/O (or at the end) the machine "dies", the crash decides what of the unsynced
//! writes survived, and the store is opened again, which runs recovery (itself sometimes
//! crashed part way). An oracle then checks the recovered store:
//!
//! - every object of every acknowledged commit is there with exactly its bytes, and no object
//!   of an aborted or unacknowledged transaction is;
//! - the transaction whose commit was in flight at the crash is there entirely or not at all;
//! - `check` finds no problem;
//! - with snapshots on, every acknowledged snapshot not deleted is listed and reads, as of
//!   itself, exactly the objects committed before it (a snapshot whose taking the crash cut,
//!   if it is listed, reads what was committed before it; one whose deletion the crash cut is
//!   listed whole or not at all).
//!
//! Media faults (a flipped bit, a misdirected write) may leave a store that cannot be opened or
//! read, but the failure must be a named error: wrong bytes returned as good are a violation.
//! Iterations are deterministic for a seed, so a failing campaign replays with one command.

mod collection;
mod interleaved;
pub mod multilevel;
mod oracle;
mod workload;

pub use interleaved::SESSIONS_MAX;

use lodestore::{Options, RawOid, RecoveryMethodKind, RestartLevel, Scheme, Store};
use lodestore_storage::{Fault, SimFileSystem};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The objects a store should hold: OID to bytes.
pub type Model = BTreeMap<RawOid, Vec<u8>>;

/// What one transaction changed: an object's new bytes, or `None` where it freed one.
pub type Delta = BTreeMap<RawOid, Option<Vec<u8>>>;

/// What to run.
#[derive(Clone, Debug)]
pub struct CampaignOptions {
    pub method: RecoveryMethodKind,
    /// How the workload's session detects and logs updates.
    pub scheme: Scheme,
    /// Its recovery buffer; small, so pre-images are logged early and re-armed often.
    pub recovery_buffer_bytes: usize,
    pub seed: u64,
    /// Crash points to simulate.
    pub crashes: u64,
    /// The first crash point: a campaign from here starts with a fresh store, which replays
    /// a longer campaign's later points quickly when that campaign's store was fresh there
    /// too (a violation's reproduction names such a point).
    pub first_crash: u64,
    /// Crash at exactly this I/O of every workload instead of a random one.
    pub every: Option<u64>,
    /// Also inject media faults (flipped bits, misdirected writes) in about 1 of 20 crashes.
    pub media_faults: bool,
    pub page_size: usize,
    /// Sessions running at once, their steps interleaved from the seed (1 to
    /// [`SESSIONS_MAX`]).
    pub sessions: usize,
    /// The store keeps snapshots; the workload takes them, reads as of them and archives
    /// their pages, and the oracle checks every one after each crash.
    pub snapshots: bool,
    /// The workload also changes and reads a collection (a B+-tree map), and the oracle
    /// compares its entries and checks the tree after each crash.
    pub collections: bool,
    /// Log streams of a differential logging method.
    pub log_streams: usize,
    /// Restart level of a differential logging method (recovery after each crash, and
    /// crashes during it, run at this level).
    pub restart_level: RestartLevel,
    /// Multi-level campaigns under `dbcache`: spheres written at this many pages (0: at their
    /// transactions' ends).
    pub sphere_write_pages: usize,
}

impl Default for CampaignOptions {
    fn default() -> Self {
        CampaignOptions {
            method: RecoveryMethodKind::Esm,
            scheme: Scheme::default(),
            recovery_buffer_bytes: RECOVERY_BUFFER_PAGES_DEFAULT * 4096,
            seed: 1,
            crashes: 1000,
            first_crash: 0,
            every: None,
            media_faults: true,
            page_size: 4096,
            sessions: 1,
            snapshots: false,
            collections: false,
            log_streams: 1,
            restart_level: RestartLevel::default(),
            sphere_write_pages: 0,
        }
    }
}

/// Recovery buffer of a campaign, in pages: two, so that FIFO replacement runs all the time.
pub const RECOVERY_BUFFER_PAGES_DEFAULT: usize = 2;

/// A broken promise, with the command that replays it.
#[derive(Clone, Debug, Serialize)]
pub struct Violation {
    pub crash: u64,
    pub fault: String,
    pub message: String,
    pub reproduce: String,
}

/// What a campaign did and found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CampaignReport {
    pub method: String,
    pub scheme: String,
    pub sessions: usize,
    pub seed: u64,
    pub crashes: u64,
    pub crashes_by_fault: BTreeMap<String, u64>,
    /// Crashes that hit while recovery itself was running.
    pub crashes_during_recovery: u64,
    /// Restarts that left the pages they redid to the next checkpoint (the next crash may
    /// come before it).
    pub restarts_deferring_checkpoint: u64,
    pub commits_acknowledged: u64,
    pub aborts: u64,
    /// Commits cut by the crash, and how many of those survived it.
    pub commits_in_flight: u64,
    pub commits_in_flight_survived: u64,
    /// Crashes that cut two or more commits at once (several sessions).
    pub crashes_with_commits_in_flight_together: u64,
    /// Media faults the store reported as errors, and those it recovered from intact.
    pub media_faults_detected: u64,
    pub media_faults_survived: u64,
    /// Snapshots acknowledged, and reads as of them that the workload checked.
    pub snapshots_taken: u64,
    pub as_of_reads: u64,
    pub snapshots_deleted: u64,
    /// Snapshots whose taking a crash cut, and how many of those were there after it.
    pub snapshots_in_flight: u64,
    pub snapshots_in_flight_survived: u64,
    /// Snapshot checks the oracle ran after crashes (one snapshot read whole each).
    pub snapshots_verified: u64,
    /// Collection steps of the workload (batches of inserts or removes, scans).
    pub collection_steps: u64,
    /// Objects reserved ahead of their contents, and fills of them (the first of a page
    /// brings the page's objects into being).
    pub objects_reserved: u64,
    pub reserved_fills: u64,
    /// Trees the oracle checked and read whole after crashes, and the most entries and
    /// greatest height one had.
    pub collection_checks: u64,
    pub collection_entries_max: u64,
    pub collection_height_max: u32,
    pub violations: Vec<Violation>,
    pub elapsed_ms: u64,
}

impl CampaignReport {
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

/// The store under test and what it should hold.
struct Subject {
    fs: Arc<SimFileSystem>,
    path: PathBuf,
    committed: Model,
    /// Commits in flight at the crash, in the order they were appended.
    in_flight: Vec<Delta>,
    last_fault: Option<Fault>,
    /// A media fault was injected and no verification has run since: damage it did may still
    /// surface, and is then not the store's fault.
    media_outstanding: bool,
    /// Acknowledged snapshots, with the objects committed before each.
    snapshots: Vec<(u64, Model)>,
    /// A snapshot whose taking the crash cut, with the objects committed before it.
    snapshot_in_flight: Option<Model>,
    /// A snapshot whose deletion the crash cut.
    deletion_in_flight: Option<u64>,
    /// The collection the workload changes, with collections on.
    map: Option<collection::Map>,
    /// The crash point from which a campaign that starts with a fresh store replays this one.
    fresh_from: u64,
}

pub(crate) fn store_options(
    fs: &Arc<SimFileSystem>,
    page_size: usize,
    scheme: Scheme,
    method: RecoveryMethodKind,
    recovery_buffer_bytes: usize,
) -> Options {
    Options::new()
        .page_size(page_size)
        .scheme(scheme)
        .recovery_method(method)
        // A background thread's I/O would make a seed's crash point land elsewhere each run.
        .background_install(false)
        .recovery_buffer_bytes(recovery_buffer_bytes.max(page_size))
        .client_cache_bytes(8 * page_size)
        // Shipments of two or more new pages go home unlogged (under `esm`), single pages
        // (most evictions) are logged: both paths crash.
        .pages_home_min(2)
        // A tiny pool makes the server evict and reread all the time; a main-memory method
        // keeps the whole store in its pool instead, and deferred page writes keep every page
        // a running transaction changed (no steal), which the workload's largest transactions
        // need room for.
        .server_pool_bytes(
            match method {
                m if m.is_main_memory() => 4096,
                RecoveryMethodKind::Dbcache => 64,
                _ => 6,
            } * page_size,
        )
        .log_segment_bytes(256 << 10)
        // Both bounds small, so that either one starts checkpoints: many small records reach
        // the record bound first, page images the byte bound.
        .checkpoint_log_bytes(48 << 10)
        .checkpoint_log_records(100)
        .lock_wait_timeout(Duration::from_millis(100))
        .file_system(fs.clone())
}

fn subject_options(fs: &Arc<SimFileSystem>, options: &CampaignOptions) -> Options {
    let store = store_options(
        fs,
        options.page_size,
        options.scheme,
        options.method,
        options.recovery_buffer_bytes,
    );
    let store = store
        .snapshots(options.snapshots)
        .log_streams(options.log_streams)
        .restart_level(options.restart_level);
    if options.sessions > 1 {
        // One session runs at a time: one that waited for a lock would wait for nobody.
        store.lock_wait_timeout(Duration::ZERO)
    } else {
        store
    }
}

impl Subject {
    fn fresh(options: &CampaignOptions) -> Result<Subject, String> {
        let fs = Arc::new(SimFileSystem::new());
        let path = Path::new("/torture/store").to_path_buf();
        let store =
            Store::create(&path, subject_options(&fs, options)).map_err(|e| e.to_string())?;
        let map = if options.collections {
            let created = (|| {
                let mut session = store.session()?;
                let mut txn = session.begin()?;
                let map = collection::create(&mut txn)?;
                txn.commit()?;
                Ok::<_, lodestore::Error>(map)
            })();
            Some(created.map_err(|e| format!("creating the collection failed: {e}"))?)
        } else {
            None
        };
        drop(store);
        Ok(Subject {
            fs,
            path,
            committed: Model::new(),
            in_flight: Vec::new(),
            last_fault: None,
            media_outstanding: false,
            snapshots: Vec::new(),
            snapshot_in_flight: None,
            deletion_in_flight: None,
            map,
            fresh_from: 0,
        })
    }
}

/// Runs a campaign; `progress` is called after every crash point with the number done.
pub fn run(options: &CampaignOptions, mut progress: impl FnMut(u64)) -> CampaignReport {
    let started = Instant::now();
    assert!(
        (1..=SESSIONS_MAX).contains(&options.sessions),
        "a campaign runs 1 to {SESSIONS_MAX} sessions, not {}",
        options.sessions
    );
    let mut report = CampaignReport {
        method: options.method.name().to_string(),
        sessions: options.sessions,
        scheme: options.scheme.name().to_string(),
        seed: options.seed,
        ..CampaignReport::default()
    };
    let mut subject = match Subject::fresh(options) {
        Ok(subject) => subject,
        Err(message) => {
            report.violations.push(violation(
                options,
                0,
                0,
                None,
                format!("create failed: {message}"),
            ));
            return report;
        }
    };
    subject.fresh_from = options.first_crash;
    for crash in options.first_crash..options.crashes {
        let mut rng = crash_rng(options.seed, crash);
        if let Err(message) = iteration(options, crash, &mut subject, &mut rng, &mut report) {
            report.violations.push(violation(
                options,
                crash,
                subject.fresh_from,
                subject.last_fault,
                message,
            ));
            break;
        }
        report.crashes += 1;
        progress(report.crashes);
    }
    report.elapsed_ms = started.elapsed().as_millis() as u64;
    report
}

/// The random choices of crash point `crash` of a campaign seeded `seed`: a function of both
/// alone, so any point replays by itself.
pub(crate) fn crash_rng(seed: u64, crash: u64) -> StdRng {
    StdRng::seed_from_u64(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ crash)
}

fn violation(
    options: &CampaignOptions,
    crash: u64,
    fresh_from: u64,
    fault: Option<Fault>,
    message: String,
) -> Violation {
    let mut reproduce = format!(
        "lodestore torture --method {} --scheme {} --recovery-buffer {} --seed {} --crashes {}",
        options.method.name(),
        options.scheme.name(),
        options.recovery_buffer_bytes,
        options.seed,
        crash + 1
    );
    if fresh_from > 0 {
        reproduce.push_str(&format!(" --from {fresh_from}"));
    }
    if let Some(every) = options.every {
        reproduce.push_str(&format!(" --every {every}"));
    }
    if !options.media_faults {
        reproduce.push_str(" --no-media-faults");
    }
    if options.sessions > 1 {
        reproduce.push_str(&format!(" --sessions {}", options.sessions));
    }
    if options.snapshots {
        reproduce.push_str(" --snapshots");
    }
    if options.collections {
        reproduce.push_str(" --collections");
    }
    if options.log_streams > 1 {
        reproduce.push_str(&format!(" --log-streams {}", options.log_streams));
    }
    if options.restart_level != RestartLevel::default() {
        reproduce.push_str(&format!(
            " --restart-level {}",
            options.restart_level.number()
        ));
    }
    Violation {
        crash,
        fault: fault.map_or("none", |f| f.name()).to_string(),
        message,
        reproduce,
    }
}

/// One crash point: open (recovering), verify, run a workload until the crash, crash.
fn iteration(
    options: &CampaignOptions,
    crash_point: u64,
    subject: &mut Subject,
    rng: &mut StdRng,
    report: &mut CampaignReport,
) -> Result<(), String> {
    if subject.snapshots.len() >= workload::SNAPSHOTS_MAX {
        *subject = Subject::fresh(options)?;
        subject.fresh_from = crash_point;
    }
    let media = subject.media_outstanding;
    // Sometimes the crash hits recovery itself.
    let crash_in_recovery = rng.random_bool(0.15);
    if crash_in_recovery {
        subject.fs.arm(rng.random_range(1..=40));
    }
    let opened = Store::open(&subject.path, subject_options(&subject.fs, options));
    let store = match opened {
        Ok(store) => store,
        Err(_) if subject.fs.has_crashed() => {
            report.crashes_during_recovery += 1;
            crash(options, subject, rng, report);
            return Ok(());
        }
        Err(error) if media => {
            report.media_faults_detected += 1;
            let _ = error;
            *subject = Subject::fresh(options)?;
            subject.fresh_from = crash_point + 1;
            return Ok(());
        }
        Err(error) => return Err(format!("recovery failed: {error}")),
    };
    subject.fs.disarm();
    if store.restart_report().checkpoint_deferred {
        report.restarts_deferring_checkpoint += 1;
    }
    // A main-memory method writes its data file only when everything goes home (a clean
    // close), and the oracle reads the files: the recovered store is closed and opened again.
    let store = if options.method.is_main_memory() {
        let reopened = store
            .close()
            .and_then(|()| Store::open(&subject.path, subject_options(&subject.fs, options)));
        match reopened {
            Ok(store) => store,
            Err(_) if media => {
                report.media_faults_detected += 1;
                *subject = Subject::fresh(options)?;
                subject.fresh_from = crash_point + 1;
                return Ok(());
            }
            Err(error) => return Err(format!("closing the recovered store failed: {error}")),
        }
    } else {
        store
    };
    match oracle::verify(&store, subject, report) {
        Ok(in_flight) => {
            if media {
                report.media_faults_survived += 1;
                subject.media_outstanding = false;
            }
            report.commits_in_flight += in_flight.cut;
            report.commits_in_flight_survived += in_flight.survived;
            if in_flight.cut > 1 {
                report.crashes_with_commits_in_flight_together += 1;
            }
        }
        Err(oracle::Failure::Detected(_)) if media => {
            report.media_faults_detected += 1;
            drop(store);
            *subject = Subject::fresh(options)?;
            subject.fresh_from = crash_point + 1;
            return Ok(());
        }
        Err(oracle::Failure::Detected(message)) | Err(oracle::Failure::Wrong(message)) => {
            return Err(message)
        }
    }
    if options.snapshots {
        match oracle::verify_snapshots(&store, subject, rng, report) {
            Ok(()) => {}
            Err(oracle::Failure::Detected(_)) if media => {
                report.media_faults_detected += 1;
                drop(store);
                *subject = Subject::fresh(options)?;
                subject.fresh_from = crash_point + 1;
                return Ok(());
            }
            Err(oracle::Failure::Detected(message)) | Err(oracle::Failure::Wrong(message)) => {
                return Err(message)
            }
        }
    }
    let crash_at = options.every.unwrap_or_else(|| rng.random_range(1..=120));
    subject.fs.arm(crash_at);
    if options.sessions > 1 {
        interleaved::run(&store, subject, rng, report, options.sessions)?;
    } else {
        workload::run(&store, subject, rng, report, options.snapshots)?;
    }
    subject.fs.crash_now();
    drop(store);
    crash(options, subject, rng, report);
    Ok(())
}

fn crash(
    options: &CampaignOptions,
    subject: &mut Subject,
    rng: &mut StdRng,
    report: &mut CampaignReport,
) {
    let fault = if options.media_faults && rng.random_range(0..20) == 0 {
        Fault::MEDIA[rng.random_range(0..Fault::MEDIA.len())]
    } else {
        Fault::CRASHES[rng.random_range(0..Fault::CRASHES.len())]
    };
    subject.fs.crash_now();
    let outcome = subject.fs.recover(fault, rng.random());
    if std::env::var_os("LODESTORE_TORTURE_TRACE").is_some() {
        eprintln!(
            "crash {}: {} at operation {}, {} unsynced writes, {} kept",
            report.crashes,
            fault.name(),
            subject.fs.operations(),
            outcome.writes_pending,
            outcome.writes_kept
        );
    }
    if let Some(dir) = std::env::var_os("LODESTORE_TORTURE_EXPORT") {
        export(&subject.fs, Path::new(&dir), report.crashes);
    }
    subject.last_fault = Some(fault);
    subject.media_outstanding |= fault.is_media();
    *report
        .crashes_by_fault
        .entry(fault.name().to_string())
        .or_default() += 1;
}

/// Copies what a crash left of the store out to `dir/crash-N`, to inspect with the command
/// line tools (`LODESTORE_TORTURE_EXPORT=dir`).
fn export(fs: &SimFileSystem, dir: &Path, crash: u64) {
    let to = dir.join(format!("crash-{crash}"));
    for (path, bytes) in fs.durable_files() {
        let relative = path.strip_prefix("/").unwrap_or(&path);
        let target = to.join(relative);
        let written = target
            .parent()
            .map_or(Ok(()), std::fs::create_dir_all)
            .and_then(|()| std::fs::write(&target, bytes));
        if let Err(e) = written {
            eprintln!("exporting {} failed: {e}", target.display());
        }
    }
}
