//! `lodestore bench bank`: `stress`'s bank transfers on one store, as flat transactions
//! (page locks held to the end, the page-locking baseline) and as multi-level transactions
//! under each strategy of Hasse & Weikum (S1, S2, S2/PS), in turn and in a rotating order
//! within each run, so every ratio compares modes measured in the same run. Prints commits
//! per second and as a ratio to the flat transactions, lock waits, log flushes and log bytes
//! per commit, subtransactions and persistence sphere sizes, and where a flush round's time
//! goes (medians of the runs); writes a CSV of every measurement when asked.

use crate::bench::{median, remove_store};
use crate::stress::{open_bank, transfers};
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
    std::fs::create_dir_all(path).map_err(|e| Error::io(path, "create folder", e))?;
    let mut measured: Vec<Vec<Measured>> = vec![Vec::new(); MODES.len()];
    let mut rows = Vec::new();
    for run in 0..runs {
        // One store per run, every mode on it; the order rotates from run to run.
        let dir = path.join("bench-bank");
        remove_store(&dir)?;
        let store = Store::create(&dir, Options::new().recovery_method(args.method))?;
        let oids = open_bank(&store, accounts)?;
        for turn in 0..MODES.len() {
            let m = (turn + run) % MODES.len();
            let mode = MODES[m];
            let (locks, log, server) =
                (store.lock_stats(), store.log_stats(), store.server_stats());
            let began = std::time::Instant::now();
            let done = transfers(&store, &oids, threads, seconds, mode, None)?;
            // The rounds' time is the time they ran in: past the seconds asked, by the last
            // transfers' commits.
            let elapsed = began.elapsed().as_secs_f64();
            let (locks2, log2, server2) =
                (store.lock_stats(), store.log_stats(), store.server_stats());
            let commits = done.committed.max(1) as f64;
            let spheres = server2.spheres - server.spheres;
            let rounds = (log2.flushes - log.flushes).max(1) as f64;
            let one = Measured {
                commits_per_s: done.committed as f64 / seconds,
                retries: done.retried,
                lock_waits_per_commit: (locks2.waits - locks.waits) as f64 / commits,
                flushes_per_commit: (log2.flushes - log.flushes) as f64 / commits,
                log_bytes_per_commit: (log2.bytes_flushed - log.bytes_flushed) as f64 / commits,
                subtransactions_per_commit: (server2.subtransactions - server.subtransactions)
                    as f64
                    / commits,
                sphere_pages_mean: if spheres == 0 {
                    0.0
                } else {
                    (server2.sphere_pages - server.sphere_pages) as f64 / spheres as f64
                },
                round_us: elapsed * 1e6 / rounds,
                gather_us: (log2.gather_ns - log.gather_ns) as f64 / rounds / 1e3,
                flush_us: (log2.flush_ns - log.flush_ns) as f64 / rounds / 1e3,
            };
            eprintln!(
                "run {}: {:<20} {:>9.0} commits/s, {} retried",
                run + 1,
                mode_name(mode),
                one.commits_per_s,
                one.retries
            );
            rows.push((run + 1, mode, one));
            measured[m].push(one);
        }
        drop(store);
        remove_store(&dir)?;
    }
    let flat = median(measured[0].iter().map(|m| m.commits_per_s).collect());
    println!(
        "bank transfers between {accounts} accounts, {threads} threads, {seconds} s per mode on \
         one store ({} recovery method); medians of {runs} runs",
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
