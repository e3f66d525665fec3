//! `lodestore bench`, `bench oo7`, `bench oo1` and `bench thor`: the benchmark suite of the seed papers'
//! experiments, reported as terminal tables, `runs.csv`, `summary.json` and plots.

use clap::Args;
use lodestore::{Error, Result, Scheme};
use lodestore_bench::experiments::oo1::{self as oo1_experiment, Oo1Config};
use lodestore_bench::experiments::oo7::{self as oo7_experiment, Oo7Config};
use lodestore_bench::experiments::thor::{
    self as thor_experiment, ArchiveBackend, ThorConfig, ThorRecord,
};
use lodestore_bench::oo7::{Oo7Params, Traversal};
use lodestore_bench::record::RunRecord;
use lodestore_bench::report;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

/// Where results go unless `--out` says otherwise.
const DEFAULT_OUT: &str = "target/lodestore-bench";

#[derive(Args, Debug, Clone)]
pub struct Oo7Args {
    /// Database preset: oo7-small, oo7-medium (the standard OO7 ones), qs-small, qs-big
    /// (QuickStore Table 1), thor-medium (Thor Table 6.1).
    #[arg(long, default_value = "oo7-small")]
    pub preset: String,
    /// Schemes to compare, comma separated, or `all`.
    #[arg(long, default_value = "all")]
    pub schemes: String,
    /// Traversals, comma separated: t1, t2a, t2b, t2c, t6, t2b-10.
    #[arg(long, value_delimiter = ',', default_value = "t1,t2a,t2b,t2c")]
    pub traversals: Vec<String>,
    /// Measured transactions per traversal (after one that warms the client cache).
    #[arg(long, default_value_t = 3, value_parser = crate::args::runs_u32)]
    pub runs: u32,
    /// Recovery buffer sizes, comma separated (bytes, or with KiB/MiB/GiB).
    #[arg(long, value_delimiter = ',', default_value = "4MiB,512KiB")]
    pub recovery_buffer: Vec<String>,
    /// Client cache size of each client.
    #[arg(long, default_value = "64MiB")]
    pub cache: String,
    /// Server buffer pool size.
    #[arg(long, default_value = "128MiB")]
    pub server_pool: String,
    /// Client counts, comma separated, or a range such as 1..5. Each client is a thread of the
    /// embedded store traversing its own module, so a preset with 5 modules allows 5 clients.
    #[arg(long, default_value = "1")]
    pub clients: String,
    /// Start every measured transaction with an empty client cache.
    #[arg(long)]
    pub cold: bool,
    /// Serve each configuration's store on a loopback port and connect every client over
    /// TCP (`Store::connect`), so pages and log records cross the wire.
    #[arg(long)]
    pub remote: bool,
    /// With --remote: talk TLS, every client presenting a certificate (made for the run).
    #[arg(long, requires = "remote")]
    pub tls: bool,
    /// The server's recovery method: auto (QuickStore's pairing: wpl for WPL and WPL-UFFD,
    /// redo for PD-REDO, esm for the rest), esm, redo or wpl.
    #[arg(long, default_value = "auto")]
    pub method: String,
    /// Seed of the database generator and the traversals' random choices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Folder for the results (generated databases are kept under templates/ and reused).
    #[arg(long, default_value = DEFAULT_OUT)]
    pub out: PathBuf,
}

#[derive(Args, Debug, Clone)]
pub struct Oo1Args {
    /// Parts in the database: 20000 is OO1's small database, 200000 its large one.
    #[arg(long, default_value_t = 20_000, value_parser = crate::args::oo1_parts)]
    pub parts: u64,
    /// Schemes to compare, comma separated, or `all`.
    #[arg(long, default_value = "all")]
    pub schemes: String,
    /// Update probabilities of the update series, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "0,0.05,0.1,0.2,0.5,1.0")]
    pub probabilities: Vec<f64>,
    /// Hot traversals per commit of the long-running transactions, comma separated (each 1 to
    /// 100,000).
    #[arg(long, value_delimiter = ',', default_value = "1,5,10,20,50", value_parser = crate::args::iterations)]
    pub iterations_per_commit: Vec<u32>,
    /// Update probabilities of the long-running transactions, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "0,0.2,1.0")]
    pub long_probabilities: Vec<f64>,
    /// Repetitions of every series.
    #[arg(long, default_value_t = 1, value_parser = crate::args::runs_u32)]
    pub runs: u32,
    #[arg(long, default_value = "4MiB")]
    pub recovery_buffer: String,
    #[arg(long, default_value = "64MiB")]
    pub cache: String,
    #[arg(long, default_value = "128MiB")]
    pub server_pool: String,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[arg(long, default_value = DEFAULT_OUT)]
    pub out: PathBuf,
}

#[derive(Args, Debug, Clone)]
pub struct SuiteArgs {
    /// Folder for the results.
    #[arg(long, default_value = DEFAULT_OUT)]
    pub out: PathBuf,
    /// Measured OO7 transactions per traversal and configuration.
    #[arg(long, default_value_t = 3, value_parser = crate::args::runs_u32)]
    pub runs: u32,
    /// Schemes to compare, comma separated, or `all`.
    #[arg(long, default_value = "all")]
    pub schemes: String,
    /// A smaller suite for smoke tests: OO7 T2A and T2B once each, OO1 on 2,000 parts.
    #[arg(long)]
    pub smoke: bool,
}

#[derive(Args, Debug, Clone)]
pub struct ThorArgs {
    /// Database preset: thor-medium (Thor Table 6.1, the thesis's database), or any OO7
    /// preset (oo7-small for a quick run).
    #[arg(long, default_value = "thor-medium")]
    pub preset: String,
    /// The client's scheme (the server's method is the one QuickStore pairs with it).
    #[arg(long, default_value = "SD-ESM")]
    pub scheme: String,
    /// Interleaved repetitions of every measurement; tables show medians and the spread.
    #[arg(long, default_value_t = 7, value_parser = crate::args::runs_u32)]
    pub runs: u32,
    /// Delays injected into every archive read for T1 as of a snapshot, in milliseconds,
    /// comma separated (0 is the archive as it is).
    #[arg(long, value_delimiter = ',', default_value = "0,1,10")]
    pub delays: Vec<f64>,
    /// Archive backends T1 as of a snapshot reads from, comma separated: local (the file
    /// beside the store), node (an archive node on loopback holding the same copies, every
    /// read a request over TCP), s3 (an s3s-fs server on loopback holding them as objects,
    /// every read a listing and a GET over HTTP; scripts/test-servers.sh installs s3s-fs),
    /// s3-moto (the same on moto), p2p (a DHT of 16 archive peers, each a process on
    /// loopback, every page on two of them; every read a Kademlia lookup).
    #[arg(long, value_delimiter = ',', default_value = "local")]
    pub backends: Vec<String>,
    /// Copies per archive read for T1 as of a snapshot, comma separated, each measured in
    /// turn: 1 reads one page at a time as Thor does; more reads that many at once (the page
    /// wanted and the next ones changed since the snapshot, requests overlapped on S3).
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub read_ahead: Vec<usize>,
    /// Client cache size.
    #[arg(long, default_value = "64MiB")]
    pub cache: String,
    /// Server buffer pool size.
    #[arg(long, default_value = "128MiB")]
    pub server_pool: String,
    /// Which parts to run, comma separated: overhead (sections 6.3 to 6.5), as-of (6.6),
    /// archive-down (commits that stage page copies with the archive, an archive node, up
    /// and then down).
    #[arg(long, value_delimiter = ',', default_value = "overhead,as-of")]
    pub parts: Vec<String>,
    /// Seed of the database generator and the traversals' random choices.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Folder for the results (generated databases are kept under templates/ and reused).
    #[arg(long, default_value = DEFAULT_OUT)]
    pub out: PathBuf,
}

#[derive(Args, Debug, Clone)]
pub struct ReportArgs {
    /// Folder holding the summary.json of an earlier run; tables are printed again and the
    /// plots redrawn into it.
    pub dir: PathBuf,
}

/// Prints the tables and redraws the plots of an earlier run from its summary.json.
pub fn report_again(args: &ReportArgs) -> Result<ExitCode> {
    let records = report::read_summary(&args.dir.join("summary.json"))?;
    for table in report::oo7::tables(&records)
        .into_iter()
        .chain(report::oo1::tables(&records))
    {
        println!("{table}");
    }
    let mut plots = report::oo7::plots(&records, &args.dir)?;
    plots.extend(report::oo1::plots(&records, &args.dir)?);
    println!(
        "{} runs; redrew {} plots in {}",
        records.len(),
        plots.len(),
        args.dir.display()
    );
    Ok(ExitCode::SUCCESS)
}

pub fn parse_size(text: &str) -> Result<usize> {
    let trimmed = text.trim();
    let (number, unit) = match trimmed.find(|c: char| c.is_ascii_alphabetic()) {
        Some(at) => trimmed.split_at(at),
        None => (trimmed, ""),
    };
    let factor = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" | "kb" => 1024.0,
        "m" | "mib" | "mb" => 1024.0 * 1024.0,
        "g" | "gib" | "gb" => 1024.0 * 1024.0 * 1024.0,
        _ => {
            return Err(Error::InvalidArgument(format!(
                "size {text:?}: unknown unit {unit:?}; use KiB, MiB or GiB"
            )))
        }
    };
    let value: f64 = number.trim().parse().map_err(|_| {
        Error::InvalidArgument(format!(
            "size {text:?} is not a number with an optional unit"
        ))
    })?;
    if value.is_nan() || value <= 0.0 || value * factor > (1u64 << 40) as f64 {
        return Err(Error::InvalidArgument(format!(
            "size {text:?} must be above 0 and at most 1 TiB"
        )));
    }
    Ok((value * factor) as usize)
}

pub fn parse_schemes(text: &str) -> Result<Vec<Scheme>> {
    if text.trim().eq_ignore_ascii_case("all") {
        return Ok(Scheme::all());
    }
    text.split(',').map(|name| name.trim().parse()).collect()
}

pub fn parse_clients(text: &str) -> Result<Vec<u32>> {
    let bad = || {
        Error::InvalidArgument(format!(
            "--clients {text:?}: give counts such as 1,2,4 or a range such as 1..5"
        ))
    };
    if let Some((low, high)) = text.split_once("..") {
        let low: u32 = low.trim().parse().map_err(|_| bad())?;
        let high: u32 = high
            .trim()
            .trim_start_matches('=')
            .parse()
            .map_err(|_| bad())?;
        if low == 0 || low > high {
            return Err(bad());
        }
        return Ok((low..=high).collect());
    }
    let counts: Vec<u32> = text
        .split(',')
        .map(|c| c.trim().parse().map_err(|_| bad()))
        .collect::<Result<_>>()?;
    if counts.is_empty() || counts.contains(&0) {
        return Err(bad());
    }
    Ok(counts)
}

fn oo7_config(args: &Oo7Args) -> Result<Oo7Config> {
    Ok(Oo7Config {
        preset: args.preset.clone(),
        params: Oo7Params::preset(&args.preset)?,
        seed: args.seed,
        schemes: parse_schemes(&args.schemes)?,
        traversals: args
            .traversals
            .iter()
            .map(|t| t.parse::<Traversal>())
            .collect::<Result<_>>()?,
        runs: args.runs,
        recovery_buffers: args
            .recovery_buffer
            .iter()
            .map(|s| parse_size(s))
            .collect::<Result<_>>()?,
        cache_bytes: parse_size(&args.cache)?,
        server_pool_bytes: parse_size(&args.server_pool)?,
        clients: parse_clients(&args.clients)?,
        cold: args.cold,
        remote: args.remote,
        tls: args.tls,
        method: match args.method.as_str() {
            "auto" => None,
            name => Some(name.parse()?),
        },
        out: args.out.clone(),
        quiet: false,
    })
}

fn oo1_config(args: &Oo1Args) -> Result<Oo1Config> {
    Ok(Oo1Config {
        parts: args.parts,
        seed: args.seed,
        schemes: parse_schemes(&args.schemes)?,
        probabilities: args.probabilities.clone(),
        iterations_per_commit: args
            .iterations_per_commit
            .iter()
            .copied()
            .filter(|&k| k > 0)
            .collect(),
        long_probabilities: args.long_probabilities.clone(),
        runs: args.runs,
        recovery_buffer_bytes: parse_size(&args.recovery_buffer)?,
        cache_bytes: parse_size(&args.cache)?,
        server_pool_bytes: parse_size(&args.server_pool)?,
        out: args.out.clone(),
        quiet: false,
    })
}

pub fn oo7(args: &Oo7Args) -> Result<ExitCode> {
    let config = oo7_config(args)?;
    let started = Instant::now();
    let records = oo7_experiment::run(&config)?;
    finish(&args.out, &records, started)
}

pub fn oo1(args: &Oo1Args) -> Result<ExitCode> {
    let config = oo1_config(args)?;
    let started = Instant::now();
    let records = oo1_experiment::run(&config)?;
    finish(&args.out, &records, started)
}

fn thor_config(args: &ThorArgs) -> Result<ThorConfig> {
    if let Some(bad) = args
        .delays
        .iter()
        .find(|d| !d.is_finite() || **d < 0.0 || **d > 10_000.0)
    {
        return Err(lodestore::Error::InvalidArgument(format!(
            "--delays {bad}: each delay is 0 to 10000 ms"
        )));
    }
    if args.delays.is_empty() || !args.delays.contains(&0.0) {
        return Err(lodestore::Error::InvalidArgument(
            "--delays must include 0: the fit's base is the time without delay".into(),
        ));
    }
    if let Some(unknown) = args
        .parts
        .iter()
        .find(|p| !["overhead", "as-of", "archive-down"].contains(&p.as_str()))
    {
        return Err(lodestore::Error::InvalidArgument(format!(
            "--parts {unknown}: the parts are overhead, as-of and archive-down"
        )));
    }
    Ok(ThorConfig {
        overhead: args.parts.iter().any(|p| p == "overhead"),
        as_of: args.parts.iter().any(|p| p == "as-of"),
        archive_down: args.parts.iter().any(|p| p == "archive-down"),
        preset: args.preset.clone(),
        params: Oo7Params::preset(&args.preset)?,
        seed: args.seed,
        scheme: args.scheme.parse()?,
        runs: args.runs,
        cache_bytes: parse_size(&args.cache)?,
        server_pool_bytes: parse_size(&args.server_pool)?,
        delays_ms: args.delays.clone(),
        backends: backends(&args.backends)?,
        read_ahead: read_ahead(&args.read_ahead)?,
        out: args.out.clone(),
        quiet: false,
        peer_program: peer_program(),
    })
}

/// This program's `archive-peer`, for the DHT backend's peers.
fn peer_program() -> Option<(PathBuf, Vec<String>)> {
    if !cfg!(feature = "p2p") {
        return None;
    }
    let me = std::env::current_exe().ok()?;
    Some((me, vec!["archive-peer".into()]))
}

/// The suite's archive backends: the local archive and a node, and S3 where s3s-fs is
/// installed (said when it is not).
fn suite_backends() -> Vec<String> {
    let mut backends = vec!["local".to_string(), "node".to_string()];
    if cfg!(feature = "p2p") {
        backends.push("p2p".into());
    }
    #[cfg(feature = "s3")]
    {
        use lodestore_archive_s3::servers::ServerKind;
        if ServerKind::S3sFs.installed() {
            backends.push("s3".into());
        } else {
            eprintln!(
                "Thor as of a snapshot on S3 left out: s3s-fs is not installed \
                 (scripts/test-servers.sh installs it)"
            );
        }
    }
    backends
}

/// The read-ahead settings named, each within bounds.
fn read_ahead(copies: &[usize]) -> Result<Vec<usize>> {
    if copies.is_empty() {
        return Err(lodestore::Error::InvalidArgument(
            "--read-ahead names no setting".into(),
        ));
    }
    if let Some(bad) = copies
        .iter()
        .find(|&&c| !(1..=lodestore::READ_AHEAD_MAX).contains(&c))
    {
        return Err(lodestore::Error::InvalidArgument(format!(
            "--read-ahead {bad}: 1 (none) to {}",
            lodestore::READ_AHEAD_MAX
        )));
    }
    Ok(copies.to_vec())
}

/// The archive backends named, each once.
fn backends(names: &[String]) -> Result<Vec<ArchiveBackend>> {
    let mut backends = Vec::new();
    for name in names {
        let backend: ArchiveBackend = name.parse()?;
        if backends.contains(&backend) {
            return Err(lodestore::Error::InvalidArgument(format!(
                "--backends names {name} twice"
            )));
        }
        backends.push(backend);
    }
    if backends.is_empty() {
        return Err(lodestore::Error::InvalidArgument(
            "--backends names no archive backend".into(),
        ));
    }
    Ok(backends)
}

/// `lodestore bench thor`: Thor's snapshot experiments.
pub fn thor(args: &ThorArgs) -> Result<ExitCode> {
    let started = Instant::now();
    let records = thor_experiment::run(&thor_config(args)?)?;
    finish_thor(&args.out, &records, started)
}

fn finish_thor(out: &Path, records: &[ThorRecord], started: Instant) -> Result<ExitCode> {
    for table in report::thor::overhead_tables(records)
        .into_iter()
        .chain(report::thor::as_of_tables(records))
        .chain(report::thor::archive_down_table(records))
    {
        println!("{table}");
    }
    report::thor::write_files(out, records)?;
    println!(
        "{} runs in {:.0} s; wrote {}/thor.csv, {}/thor.json and the thor-*.svg/png plots",
        records.len(),
        started.elapsed().as_secs_f64(),
        out.display(),
        out.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `lodestore bench` alone: the QuickStore experiments on the smallest OO7 database and the
/// Hosking experiments on OO1, every scheme, in one run.
pub fn suite(args: &SuiteArgs) -> Result<ExitCode> {
    let started = Instant::now();
    let mut oo7 = Oo7Args {
        preset: "oo7-small".into(),
        schemes: args.schemes.clone(),
        traversals: ["t1", "t2a", "t2b", "t2c"].map(String::from).to_vec(),
        runs: args.runs,
        recovery_buffer: vec!["4MiB".into(), "512KiB".into()],
        cache: "64MiB".into(),
        server_pool: "128MiB".into(),
        clients: "1".into(),
        cold: false,
        remote: false,
        tls: false,
        method: "auto".into(),
        seed: 1,
        out: args.out.clone(),
    };
    let mut oo1 = Oo1Args {
        parts: 20_000,
        schemes: args.schemes.clone(),
        probabilities: vec![0.0, 0.05, 0.1, 0.2, 0.5, 1.0],
        iterations_per_commit: vec![1, 5, 10, 20, 50],
        long_probabilities: vec![0.0, 0.2, 1.0],
        runs: 1,
        recovery_buffer: "4MiB".into(),
        cache: "64MiB".into(),
        server_pool: "128MiB".into(),
        seed: 1,
        out: args.out.clone(),
    };
    if args.smoke {
        oo7.traversals = vec!["t2a".into(), "t2b".into()];
        oo7.runs = 1;
        oo1.parts = 2000;
        oo1.probabilities = vec![0.0, 0.2, 1.0];
        oo1.iterations_per_commit = vec![1, 5];
        oo1.long_probabilities = vec![0.2];
    }
    eprintln!("OO7 (QuickStore section 4) on {}", oo7.preset);
    let mut records = oo7_experiment::run(&oo7_config(&oo7)?)?;
    eprintln!(
        "OO1 (Hosking, Brown & Moss section 5) on {} parts",
        oo1.parts
    );
    records.extend(oo1_experiment::run(&oo1_config(&oo1)?)?);
    let code = finish(&args.out, &records, started)?;
    let thor = ThorArgs {
        preset: "oo7-small".into(),
        scheme: "SD-ESM".into(),
        runs: if args.smoke { 1 } else { 3 },
        delays: vec![0.0, 1.0],
        backends: suite_backends(),
        read_ahead: vec![1, 32],
        parts: vec!["overhead".into(), "as-of".into()],
        cache: "64MiB".into(),
        server_pool: "128MiB".into(),
        seed: 1,
        out: args.out.clone(),
    };
    eprintln!("Thor (Moh chapter 6) on {}", thor.preset);
    let started = Instant::now();
    let thor_records = thor_experiment::run(&thor_config(&thor)?)?;
    finish_thor(&args.out, &thor_records, started)?;
    eprintln!("Lodestore against LMDB, redb and SQLite on OO7 oo7-small");
    crate::bench_peers::peers(&crate::bench_peers::PeersArgs::suite(&args.out, args.smoke))?;
    Ok(code)
}

fn finish(out: &Path, records: &[RunRecord], started: Instant) -> Result<ExitCode> {
    for table in report::oo7::tables(records)
        .into_iter()
        .chain(report::oo1::tables(records))
    {
        println!("{table}");
    }
    report::write_files(out, records)?;
    let mut plots = report::oo7::plots(records, out)?;
    plots.extend(report::oo1::plots(records, out)?);
    println!(
        "{} runs in {:.0} s; wrote {}/runs.csv, {}/summary.json and {} plots (SVG and PNG)",
        records.len(),
        started.elapsed().as_secs_f64(),
        out.display(),
        out.display(),
        plots.len()
    );
    Ok(ExitCode::SUCCESS)
}
