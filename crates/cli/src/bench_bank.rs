//! `lodestore bench bank`: `stress`'s bank transfers on one store, as flat transactions
//! (page locks held to the end, the page-locking baseline) and as multi-level transactions
//! under each strategy of Hasse & Weikum (S1, S2, S2/PS), in turn and in a rotating order
//! within each run, so every ratio compares modes measured in the same run. Each mode's time
//! in a run is cut into slices that the modes take in turn: a disk whose sync latency drifts
//! over seconds (a shared machine's does) then slows every mode alike instead of the one that
//! happened to run in its slow stretch. Prints commits
//! per second and as a ratio to the flat transactions, lock waits, log flushes and log bytes
//! per commit, subtransactions and persistence sphere sizes, and where a flush round's time
//! goes (medians of the runs); writes a CSV of every measurement when asked.

use crate::bench::{median, remove_store};
use crate::stress::{open_bank, transfers, Transfers};
use comfy_table::Table;
use lodestore::multilevel::Strategy;
use lodestore::{Error, Options, Result, Store};
use std::path::PathBuf;
use std::process::ExitCode;

/// The modes compared: flat transactions, then the multi-level strategies.
const MODES: [Option<Strategy>; 4] = [
    None,
    Some(Strategy::S1),
    Some(Strategy::S2),
    Some(Strategy::S2Ps),
];

fn mode_name(mode: Option<Strategy>) -> String {
    match mode {
        None => "flat (page locks)".to_string(),
        Some(strategy) => format!("multi-level {strategy}"),
    }
}

/// One mode's measurement in one run.
#[derive(Clone, Copy, Debug, Default)]
struct Measured {
    commits_per_s: f64,
    retries: u64,
    lock_waits_per_commit: f64,
    flushes_per_commit: f64,
    log_bytes_per_commit: f64,
    subtransactions_per_commit: f64,
    sphere_pages_mean: f64,
    /// A group-commit round's time: the mode's elapsed time over its flushes, then the part its leader
    /// spent gathering committers and the part its write and sync took (the rest is the time
    /// between a round's end and the next round's start).
    round_us: f64,
    gather_us: f64,
    flush_us: f64,
}

/// Shortest slice accepted: a slice spawns the threads and opens their sessions again.
const SLICE_SECONDS_MIN: f64 = 0.05;

/// Most slices a mode's time is cut into (a bound on the sessions a run opens).
const SLICES_MAX: usize = 10_000;

/// The store's counters a mode's measurement is the difference of.
struct Counters {
    locks: lodestore::LockStats,
    log: lodestore::LogStats,
    server: lodestore::ServerStats,
}

impl Counters {
    fn of(store: &Store) -> Counters {
        Counters {
            locks: store.lock_stats(),
            log: store.log_stats(),
            server: store.server_stats(),
        }
    }
}

/// What a mode did over its slices of one run.
#[derive(Clone, Copy, Debug, Default)]
struct Totals {
    committed: u64,
    retried: u64,
    lock_waits: u64,
    flushes: u64,
    bytes_flushed: u64,
    subtransactions: u64,
    spheres: u64,
    sphere_pages: u64,
    gather_ns: u64,
    flush_ns: u64,
    elapsed_s: f64,
}

impl Totals {
    fn add(&mut self, before: &Counters, after: &Counters, done: Transfers, elapsed_s: f64) {
        self.committed += done.committed;
        self.retried += done.retried;
        self.lock_waits += after.locks.waits - before.locks.waits;
        self.flushes += after.log.flushes - before.log.flushes;
        self.bytes_flushed += after.log.bytes_flushed - before.log.bytes_flushed;
        self.gather_ns += after.log.gather_ns - before.log.gather_ns;
        self.flush_ns += after.log.flush_ns - before.log.flush_ns;
        self.subtransactions += after.server.subtransactions - before.server.subtransactions;
        self.spheres += after.server.spheres - before.server.spheres;
        self.sphere_pages += after.server.sphere_pages - before.server.sphere_pages;
        self.elapsed_s += elapsed_s;
    }

    /// Rates over the `seconds` the mode was given, sizes per commit, times per round.
    fn measured(&self, seconds: f64) -> Measured {
        let commits = self.committed.max(1) as f64;
        let rounds = self.flushes.max(1) as f64;
        Measured {
            commits_per_s: self.committed as f64 / seconds,
            retries: self.retried,
            lock_waits_per_commit: self.lock_waits as f64 / commits,
            flushes_per_commit: self.flushes as f64 / commits,
            log_bytes_per_commit: self.bytes_flushed as f64 / commits,
            subtransactions_per_commit: self.subtransactions as f64 / commits,
            sphere_pages_mean: if self.spheres == 0 {
                0.0
            } else {
                self.sphere_pages as f64 / self.spheres as f64
            },
            round_us: self.elapsed_s * 1e6 / rounds,
            gather_us: self.gather_ns as f64 / rounds / 1e3,
            flush_us: self.flush_ns as f64 / rounds / 1e3,
        }
    }
}

#[derive(clap::Args, Debug, Clone)]
pub struct BankArgs {
    /// Folder for the benchmark store.
    pub path: PathBuf,
    /// Accounts (all on one or a few pages: the contention is the point).
    #[arg(long, default_value_t = 50, value_parser = crate::args::accounts)]
    pub accounts: u64,
    /// Threads, each a session of its own.
    #[arg(long, default_value_t = 8, value_parser = crate::args::threads)]
    pub threads: u32,
    /// Seconds per mode and run.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Runs; the table shows medians.
    #[arg(long, default_value_t = 3, value_parser = crate::args::runs)]
    pub runs: usize,
    /// Longest slice of a mode's time in a run, in seconds: the modes take turns slice by
    /// slice (so the disk's drift over a run falls on every mode alike). At least 0.05.
    #[arg(long, default_value_t = 0.5)]
    pub slice_seconds: f64,
    /// Write every measurement to this CSV file.
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// Recovery method of the store (esm, redo, wpl, dbcache; a main-memory method refuses
    /// subtransactions).
    #[arg(long, default_value = "esm")]
    pub method: lodestore::RecoveryMethodKind,
}

pub fn bank(args: &BankArgs) -> Result<ExitCode> {
    let (path, csv) = (args.path.as_path(), args.csv.as_deref());
    let (accounts, threads, seconds, runs) = (args.accounts, args.threads, args.seconds, args.runs);
    if seconds.is_nan() || seconds <= 0.0 || accounts < 2 || threads == 0 || runs == 0 {
        return Err(Error::InvalidArgument(
            "bench bank: --seconds must be positive, --accounts at least 2, --threads and \
             --runs at least 1"
                .into(),
        ));
    }
    if args.slice_seconds.is_nan() || args.slice_seconds < SLICE_SECONDS_MIN {
        return Err(Error::InvalidArgument(format!(
            "bench bank: --slice-seconds must be at least {SLICE_SECONDS_MIN} (got {})",
            args.slice_seconds
        )));
    }
    // Equal slices, none longer than asked; each mode gets `seconds` in all.
    let slices = (seconds / args.slice_seconds)
        .ceil()
        .clamp(1.0, SLICES_MAX as f64) as usize;
    let slice = seconds / slices as f64;
    std::fs::create_dir_all(path).map_err(|e| Error::io(path, "create folder", e))?;
    let mut measured: Vec<Vec<Measured>> = vec![Vec::new(); MODES.len()];
    let mut rows = Vec::new();
    for run in 0..runs {
        // One store per run, every mode on it; the order rotates from run to run.
        let dir = path.join("bench-bank");
        remove_store(&dir)?;
        let store = Store::create(&dir, Options::new().recovery_method(args.method))?;
        let oids = open_bank(&store, accounts)?;
        let mut totals = [Totals::default(); MODES.len()];
        for part in 0..slices {
            for turn in 0..MODES.len() {
                // Rotating with the run and the slice: no mode always follows the same one.
                let m = (turn + run + part) % MODES.len();
                let before = Counters::of(&store);
                let began = std::time::Instant::now();
                let done = transfers(&store, &oids, threads, slice, MODES[m], None)?;
                // The rounds' time is the time they ran in: past the slice asked, by the
                // last transfers' commits (and by the slice's sessions opening).
                let elapsed = began.elapsed().as_secs_f64();
                totals[m].add(&before, &Counters::of(&store), done, elapsed);
            }
        }
        for (m, mode) in MODES.iter().enumerate() {
            let one = totals[m].measured(seconds);
            eprintln!(
                "run {}: {:<20} {:>9.0} commits/s, {} retried",
                run + 1,
                mode_name(*mode),
                one.commits_per_s,
                one.retries
            );
            rows.push((run + 1, *mode, one));
            measured[m].push(one);
        }
        drop(store);
        remove_store(&dir)?;
    }
    let flat = median(measured[0].iter().map(|m| m.commits_per_s).collect());
    println!(
        "bank transfers between {accounts} accounts, {threads} threads, {seconds} s per mode on \
         one store ({} recovery method) in {slices} slices of {slice:.2} s taken in turn; \
         medians of {runs} runs",
        args.method
    );
    let mut table = Table::new();
    table.set_header([
        "mode",
        "commits/s",
        "x flat",
        "retries",
        "lock waits / commit",
        "log flushes / commit",
        "log bytes / commit",
        "subtransactions / commit",
        "sphere pages (mean)",
        "round us (gather + write and sync)",
    ]);
    for (m, mode) in MODES.iter().enumerate() {
        let of = |f: fn(&Measured) -> f64| median(measured[m].iter().map(f).collect());
        let rate = of(|x| x.commits_per_s);
        table.add_row([
            mode_name(*mode),
            format!("{rate:.0}"),
            format!("{:.2}", rate / flat),
            format!("{:.0}", of(|x| x.retries as f64)),
            format!("{:.2}", of(|x| x.lock_waits_per_commit)),
            format!("{:.2}", of(|x| x.flushes_per_commit)),
            format!("{:.0}", of(|x| x.log_bytes_per_commit)),
            format!("{:.2}", of(|x| x.subtransactions_per_commit)),
            format!("{:.1}", of(|x| x.sphere_pages_mean)),
            format!(
                "{:.0} ({:.0} + {:.0})",
                of(|x| x.round_us),
                of(|x| x.gather_us),
                of(|x| x.flush_us)
            ),
        ]);
    }
    println!("{table}");
    if let Some(csv) = csv {
        let mut text = String::from(
            "run,mode,commits_per_s,retries,lock_waits_per_commit,flushes_per_commit,\
             log_bytes_per_commit,subtransactions_per_commit,sphere_pages_mean,round_us,gather_us,\
             flush_us\n",
        );
        for (run, mode, m) in rows {
            text.push_str(&format!(
                "{run},{},{:.1},{},{:.4},{:.4},{:.0},{:.4},{:.2},{:.1},{:.1},{:.1}\n",
                mode.map_or("flat", Strategy::name),
                m.commits_per_s,
                m.retries,
                m.lock_waits_per_commit,
                m.flushes_per_commit,
                m.log_bytes_per_commit,
                m.subtransactions_per_commit,
                m.sphere_pages_mean,
                m.round_us,
                m.gather_us,
                m.flush_us
            ));
        }
        std::fs::write(csv, text).map_err(|e| Error::io(csv, "write", e))?;
        println!("wrote {}", csv.display());
    }
    Ok(ExitCode::SUCCESS)
}
