//! `lodestore bench peers`: the OO7 database in Lodestore, LMDB, redb and SQLite, the same
//! workloads on each in the same run (see `lodestore_bench::peers`), next to the fdatasync
//! ceiling measured in the same run. The stores take turns within each run, each run starting
//! with the next one; the table shows medians of the runs, and each lead is the median of the
//! per-run ratios.

use crate::bench::median;
use clap::Args;
use lodestore::{Error, Result};
use lodestore_bench::oo7::{Oo7Params, Traversal};
use lodestore_bench::peers::{self, Databases, Figures, PeersConfig, StoreKind};
use lodestore_bench::workspace::progress_bar;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Args, Debug, Clone)]
pub struct PeersArgs {
    /// OO7 database preset: oo7-small, oo7-medium, qs-small, qs-big, thor-medium. Traversals
    /// walk the first module.
    #[arg(long, default_value = "oo7-small")]
    pub preset: String,
    /// Stores, comma separated, lodestore first: lodestore, lmdb, redb, sqlite, and rocksdb in
    /// builds with the `rocksdb` feature (scripts/bench-rocksdb.sh).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "lodestore,lmdb,redb,sqlite"
    )]
    pub stores: Vec<String>,
    /// Traversals, comma separated: t1, t2a, t2b, t2c, t6, t2b-10.
    #[arg(long, value_delimiter = ',', default_value = "t1,t2a,t2b,t2c")]
    pub traversals: Vec<String>,
    /// Measured transactions per traversal and run (after one unmeasured T1).
    #[arg(long, default_value_t = 3, value_parser = crate::args::runs_u32)]
    pub traversal_runs: u32,
    /// Thread counts of the durable-commit workload, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16", value_parser = crate::args::thread_count)]
    pub threads: Vec<usize>,
    /// Seconds of each durable-commit measurement.
    #[arg(long, default_value_t = 1.0, value_parser = crate::args::seconds)]
    pub seconds: f64,
    /// Runs, each store once per run; the table shows medians.
    #[arg(long, default_value_t = 3, value_parser = crate::args::runs)]
    pub runs: usize,
    /// Parts of the OO1 database (lookup, traversal and update on a store of its own); 0 leaves
    /// OO1 out.
    #[arg(long, default_value_t = 20_000, value_parser = crate::args::oo1_parts_or_none)]
    pub oo1_parts: u64,
    /// Seed of the database generators and the traversals' random choices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Atomic-part updates the write-heavy kill -9 workload commits (in transactions of
    /// 1,000) before its acknowledged commits and the kill; 0 leaves it out. 14000 leaves
    /// about 14,600 records of Lodestore's log (1.1 MiB), just under its checkpoint bound of
    /// 15,000 records: its longest restart.
    #[arg(long, default_value_t = 0)]
    pub crash_updates: u64,
    /// Folder for the stores, the template database, peers.csv and the plot.
    #[arg(long, default_value = "target/lodestore-bench/peers")]
    pub out: PathBuf,
}

/// Where the kill -9 workload's child commits.
#[derive(Args, Debug, Clone)]
pub struct CrashChildArgs {
    #[arg(long)]
    pub store: String,
    #[arg(long)]
    pub dir: PathBuf,
    /// The OID of the atomic part each commit writes.
    #[arg(long)]
    pub part: u64,
    /// Atomic-part updates to commit first (the write-heavy workload), from `--parts-file`.
    #[arg(long, default_value_t = 0, requires = "parts_file")]
    pub updates: u64,
    /// The OIDs of the parts the updates go to (8 bytes each, little-endian).
    #[arg(long)]
    pub parts_file: Option<PathBuf>,
}

pub fn crash_child(args: &CrashChildArgs) -> Result<ExitCode> {
    let heavy = match &args.parts_file {
        Some(file) if args.updates > 0 => Some(peers::crash::Heavy {
            updates: args.updates,
            parts: peers::crash::Heavy::read_parts(file)?,
        }),
        _ => None,
    };
    peers::crash::child(args.store.parse()?, &args.dir, args.part, heavy.as_ref())?;
    Ok(ExitCode::SUCCESS)
}

impl PeersArgs {
    /// The suite's run: the smallest database, one run, short commit measurements.
    pub fn suite(out: &Path, smoke: bool) -> PeersArgs {
        PeersArgs {
            preset: "oo7-small".into(),
            stores: StoreKind::built()
                .iter()
                .map(|s| s.name().to_string())
                .collect(),
            traversals: ["t1", "t2a", "t2b", "t2c"].map(String::from).to_vec(),
            traversal_runs: if smoke { 1 } else { 3 },
            threads: vec![1, 4, 16],
            seconds: if smoke { 0.2 } else { 1.0 },
            runs: 1,
            oo1_parts: if smoke { 2000 } else { 20_000 },
            seed: 1,
            crash_updates: if smoke { 0 } else { 14_000 },
            out: out.join("peers"),
        }
    }

    fn config(&self) -> Result<PeersConfig> {
        let config = PeersConfig {
            preset: self.preset.clone(),
            params: Oo7Params::preset(&self.preset)?,
            seed: self.seed,
            stores: self
                .stores
                .iter()
                .map(|s| s.parse())
                .collect::<Result<_>>()?,
            traversals: self
                .traversals
                .iter()
                .map(|t| t.parse())
                .collect::<Result<Vec<Traversal>>>()?,
            traversal_runs: self.traversal_runs,
            threads: self.threads.clone(),
            commit_seconds: self.seconds,
            out: self.out.clone(),
            quiet: false,
            oo1_parts: (self.oo1_parts > 0).then_some(self.oo1_parts),
            crash_child: Some(crash_child_command()?),
            crash_updates: self.crash_updates,
        };
        config.validate()?;
        Ok(config)
    }
}

/// This program's own `bench peers-crash-child`.
fn crash_child_command() -> Result<Vec<OsString>> {
    let program =
        std::env::current_exe().map_err(|e| Error::io("the lodestore program", "locate", e))?;
    Ok(vec![
        program.into_os_string(),
        "bench".into(),
        "peers-crash-child".into(),
    ])
}

pub fn peers(args: &PeersArgs) -> Result<ExitCode> {
    let config = args.config()?;
    std::fs::create_dir_all(&config.out).map_err(|e| Error::io(&config.out, "create folder", e))?;
    let databases = Databases::prepare(&config)?;
    let stores = &config.stores;
    let bar = progress_bar((args.runs * stores.len()) as u64, "store runs", false);
    let mut figures: Vec<Vec<Figures>> = vec![Vec::new(); stores.len()];
    let mut ceilings = Vec::new();
    let mut read_bandwidths = Vec::new();
    for run in 0..args.runs {
        ceilings.push(lodestore_bench::ceiling::measure(&config.out)?);
        read_bandwidths.push(lodestore_bench::ceiling::sequential_read(&config.out)?);
        let mut this_run = Vec::new();
        for turn in 0..stores.len() {
            let i = (run + turn) % stores.len();
            bar.set_message(format!("run {}: {}", run + 1, stores[i]));
            let dir = config.out.join("stores").join(stores[i].name());
            this_run.push(peers::run(stores[i], &config, &databases, &dir)?);
            bar.inc(1);
        }
        peers::check_agreement(&this_run)?;
        for f in this_run {
            let i = stores
                .iter()
                .position(|&s| s == f.store)
                .expect("a store run");
            figures[i].push(f);
        }
    }
    bar.finish_and_clear();
    let fsync = median(ceilings.iter().map(|c| c.fdatasync_median_us).collect());
    let bandwidth = median(ceilings.iter().map(|c| c.batched_sync_mb_per_s).collect());
    let read_bandwidth = median(read_bandwidths.clone());
    println!(
        "OO7 {} ({} objects, {:.1} MB of objects), traversals of module 1 ({} per run, \
         median), durable commits of one atomic part; OO1 on {}; medians of {} runs; a lead is \
         Lodestore's speed over the peer's, the median of each run's ratio (above 1: Lodestore \
         ahead)",
        config.preset,
        databases.oo7.objects(),
        databases.oo7.object_bytes() as f64 / 1e6,
        config.traversal_runs,
        match &databases.oo1 {
            Some(oo1) => format!("{} parts ({} objects)", args.oo1_parts, oo1.objects()),
            None => "no parts (left out)".into(),
        },
        args.runs
    );
    println!("{}", table(stores, &figures));
    println!(
        "ceiling in the same runs: write 512 B + fdatasync {fsync:.1} us ({:.0} syncs/s); \
         batched sync {bandwidth:.0} MB/s; sequential read from the disk {read_bandwidth:.0} MB/s",
        1e6 / fsync
    );
    for (what, restarts) in [
        (
            "after kill -9",
            figures[0]
                .iter()
                .filter_map(|f| f.reopen)
                .collect::<Vec<_>>(),
        ),
        (
            "after a write-heavy kill -9",
            figures[0].iter().filter_map(|f| f.reopen_heavy).collect(),
        ),
    ] {
        if let Some(line) = restart_line(what, &restarts, read_bandwidth) {
            println!("{line}");
        }
    }
    let csv = config.out.join("peers.csv");
    write_csv(&csv, &figures, &ceilings, &read_bandwidths)?;
    let plot = config.out.join("peers");
    plot_relative(&plot, stores, &figures, &config.preset)?;
    println!("wrote {} and {}.svg/png", csv.display(), plot.display());
    Ok(ExitCode::SUCCESS)
}

/// Lodestore's restart within its reopens (medians): its time, the log it read and at what
/// rate, beside the disk's sequential read bandwidth measured in the same runs.
fn restart_line(
    what: &str,
    restarts: &[peers::crash::Reopened],
    read_mb_per_s: f64,
) -> Option<String> {
    let replayed = median_of(restarts, |r| r.log_replayed_bytes.map(|b| b as f64))?;
    let restart_ms = median_of(restarts, |r| r.restart_ms).unwrap_or(0.0);
    let reopen_ms = median_of(restarts, |r| Some(r.reopen_ms)).unwrap_or(0.0);
    let rate = replayed / 1e6 / (restart_ms / 1e3).max(1e-9);
    Some(format!(
        "Lodestore {what}: reopen {reopen_ms:.2} ms, of which restart {restart_ms:.2} ms reading \
         {:.2} MiB of log from the last checkpoint at {rate:.0} MB/s ({:.0}% of the disk's \
         sequential read)",
        replayed / f64::from(1u32 << 20),
        100.0 * rate / read_mb_per_s.max(1e-9)
    ))
}

/// The median of `field` over the runs that have it.
fn median_of<T>(runs: &[T], field: impl Fn(&T) -> Option<f64>) -> Option<f64> {
    let values: Vec<f64> = runs.iter().filter_map(field).collect();
    (!values.is_empty()).then(|| median(values))
}

/// Lodestore's lead over `peer` in one metric of one run: its speed over the peer's.
fn lead(ours: &peers::Metric, theirs: &peers::Metric) -> f64 {
    if ours.higher_is_better {
        ours.value / theirs.value
    } else {
        theirs.value / ours.value
    }
}

fn table(stores: &[StoreKind], figures: &[Vec<Figures>]) -> comfy_table::Table {
    let mut table = comfy_table::Table::new();
    table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
    let mut header = vec!["workload".to_string(), "unit".to_string()];
    header.extend(stores.iter().map(|s| s.name().to_string()));
    header.extend(stores[1..].iter().map(|s| format!("lead over {s}")));
    table.set_header(header);
    let metrics: Vec<Vec<Vec<peers::Metric>>> = figures
        .iter()
        .map(|runs| runs.iter().map(Figures::metrics).collect())
        .collect();
    for (m, first) in metrics[0][0].iter().enumerate() {
        let mut row = vec![first.name.clone(), first.unit.to_string()];
        row.extend(metrics.iter().map(|runs| {
            let value = median(runs.iter().map(|r| r[m].value).collect());
            format_value(value)
        }));
        row.extend(metrics[1..].iter().map(|peer| {
            let leads = metrics[0]
                .iter()
                .zip(peer)
                .map(|(ours, theirs)| lead(&ours[m], &theirs[m]))
                .collect();
            format!("{:.2}", median(leads))
        }));
        table.add_row(row);
    }
    table
}

fn format_value(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 1.0 {
        format!("{value:.2}")
    } else {
        format!("{value:.3}")
    }
}

fn write_csv(
    path: &Path,
    figures: &[Vec<Figures>],
    ceilings: &[lodestore_bench::ceiling::Ceiling],
    read_bandwidths: &[f64],
) -> Result<()> {
    let mut lines = vec![
        "store,run,workload,unit,value,fdatasync_us,batched_sync_mb_per_s,sequential_read_mb_per_s"
            .to_string(),
    ];
    for runs in figures {
        for (run, f) in runs.iter().enumerate() {
            for metric in f.metrics() {
                lines.push(format!(
                    "{},{run},{},{},{:.4},{:.2},{:.1},{:.1}",
                    f.store,
                    metric.name,
                    metric.unit,
                    metric.value,
                    ceilings[run].fdatasync_median_us,
                    ceilings[run].batched_sync_mb_per_s,
                    read_bandwidths[run]
                ));
            }
        }
    }
    std::fs::write(path, lines.join("\n") + "\n").map_err(|e| Error::io(path, "write", e))
}

/// Each store's speed relative to Lodestore's, per workload (medians of the per-run ratios).
fn plot_relative(
    stem: &Path,
    stores: &[StoreKind],
    figures: &[Vec<Figures>],
    preset: &str,
) -> Result<()> {
    let metrics: Vec<Vec<Vec<peers::Metric>>> = figures
        .iter()
        .map(|runs| runs.iter().map(Figures::metrics).collect())
        .collect();
    let categories: Vec<String> = metrics[0][0].iter().map(|m| m.name.clone()).collect();
    let series: Vec<(String, Vec<f64>)> = stores
        .iter()
        .zip(&metrics)
        .map(|(store, runs)| {
            let relative = (0..categories.len())
                .map(|m| {
                    median(
                        metrics[0]
                            .iter()
                            .zip(runs)
                            .map(|(ours, theirs)| 1.0 / lead(&ours[m], &theirs[m]))
                            .collect(),
                    )
                })
                .collect();
            (store.name().to_string(), relative)
        })
        .collect();
    lodestore_bench::report::plot::grouped_bars(
        stem,
        &format!("OO7 {preset}: each store's speed relative to Lodestore's"),
        "x Lodestore",
        &categories,
        &series,
    )
}
