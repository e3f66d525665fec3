//! `lodestore bench complex`: Hasse & Weikum's complex-object benchmark (see
//! `lodestore_bench::experiments::complex`) under S1, S2 and S2/PS over a range of degrees of
//! multiprogramming, for each foreign-access count asked (f = 0 is the paper's Figure 7,
//! f = 10 its Figure 9). The strategies take turns at each DMP, rotating from run to run, on
//! one store per case; tables show medians of the runs, with S2/PS against S1 at S2/PS's
//! peak DMP; CSV and plots on request.

use crate::bench::median;
use clap::Args;
use comfy_table::Table;
use lodestore::multilevel::Strategy;
use lodestore::{Error, RecoveryMethodKind, Result};
use lodestore_bench::experiments::complex::{
    self, Database, Machine, Point, Shape, Workload, DMP_MAX, STRATEGIES,
};
use lodestore_bench::report::plot;
use lodestore_bench::workspace::progress_bar;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

#[derive(Args, Debug, Clone)]
pub struct ComplexArgs {
    /// Folder for the benchmark stores (replaced as it goes).
    pub path: PathBuf,
    /// Complex objects (the paper: 1,000).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(2..=100_000))]
    pub complex_objects: u32,
    /// Own subobjects of each complex object, about 100 to a page (the paper: 1,000).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub subobjects: u32,
    /// References to foreign subobjects in each header (the paper: 100).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub foreign_refs: u32,
    /// Complex-object operations per transaction (the paper's c).
    #[arg(long, default_value_t = 12, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub c: u32,
    /// Subobjects each operation visits, own and foreign together (the paper's o + f).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub visits: u32,
    /// Cases to run, each a number of foreign subobjects per operation (the paper's f; the
    /// rest of --visits are own ones): 0 is the paper's baseline (Figure 7), 10 its foreign
    /// case (Figure 9).
    #[arg(long, value_delimiter = ',', default_value = "0,10")]
    pub foreign: Vec<u32>,
    /// Chance that a visited subobject is updated, in percent (the paper's u).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(0..=100))]
    pub update_percent: u32,
    /// Degrees of multiprogramming: sessions running transactions at once.
    #[arg(long, value_delimiter = ',', default_value = "1,4,8,12,16,24,32,48,64", value_parser = dmp)]
    pub dmp: Vec<usize>,
    /// Seconds each strategy runs at each DMP, in each run.
    #[arg(long, default_value_t = 4.0, value_parser = crate::args::seconds)]
    pub seconds: f64,
    /// Runs; the tables show medians.
    #[arg(long, default_value_t = 3, value_parser = crate::args::runs)]
    pub runs: usize,
    /// Server buffer pool in bytes (the paper's: a tenth of its database).
    #[arg(long, default_value_t = 4 << 20, value_parser = bytes)]
    pub pool_bytes: usize,
    /// Each session's client cache in bytes.
    #[arg(long, default_value_t = 1 << 20, value_parser = bytes)]
    pub client_cache_bytes: usize,
    /// Milliseconds each read of the data file takes on an emulated device (reads side by
    /// side); 0 reads the real disk alone (then mostly the operating system's cache).
    #[arg(long, default_value_t = 1.0, value_parser = latency_ms)]
    pub read_latency_ms: f64,
    /// The recovery method beneath the strategies: wpl logs page after-images as subtransactions
    /// end, dbcache writes them at once per persistence sphere (the paper's level-0 log, with
    /// S2/PS's deferred writes), esm logs changed ranges.
    #[arg(long, default_value = "wpl", value_parser = method)]
    pub method: RecoveryMethodKind,
    /// With dbcache: write a persistence sphere as soon as it reaches this many pages (the
    /// paper's remedy for large spheres); 0 writes each at its transaction's end.
    #[arg(long, default_value_t = 0)]
    pub sphere_write_pages: usize,
    /// Seed of the database and the transactions.
    #[arg(long, default_value_t = 1991)]
    pub seed: u64,
    /// Also write every measurement to this CSV file.
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// Also draw the paper's figures 7 and 9 (throughput, response time, lock wait, level-0
    /// log writes, sphere sizes against the DMP), SVG and PNG, into this folder.
    #[arg(long, value_name = "DIR")]
    pub plots: Option<PathBuf>,
}

fn dmp(text: &str) -> std::result::Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(v) if (1..=DMP_MAX).contains(&v) => Ok(v),
        _ => Err(format!("`{text}` is not a DMP from 1 to {DMP_MAX}")),
    }
}

fn bytes(text: &str) -> std::result::Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(v) if (64 << 10..=1 << 34).contains(&v) => Ok(v),
        _ => Err(format!("`{text}` is not a byte count from 65536 to 2^34")),
    }
}

fn latency_ms(text: &str) -> std::result::Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=1_000.0).contains(&v) => Ok(v),
        _ => Err(format!("`{text}` is not a latency from 0 to 1000 ms")),
    }
}

fn method(text: &str) -> std::result::Result<RecoveryMethodKind, String> {
    match text {
        "wpl" => Ok(RecoveryMethodKind::Wpl),
        "dbcache" => Ok(RecoveryMethodKind::Dbcache),
        "esm" => Ok(RecoveryMethodKind::Esm),
        _ => Err(format!("`{text}`: wpl, dbcache or esm")),
    }
}

/// One case (a value of f): every run of every strategy at every DMP.
struct Case {
    workload: Workload,
    pages: u64,
    /// `points[dmp index][strategy index]`: one per run.
    points: Vec<Vec<Vec<Point>>>,
}

impl ComplexArgs {
    fn shape(&self) -> Shape {
        Shape {
            complex_objects: self.complex_objects,
            subobjects: self.subobjects,
            foreign_refs: self.foreign_refs,
        }
    }

    fn machine(&self) -> Machine {
        Machine {
            server_pool_bytes: self.pool_bytes,
            client_cache_bytes: self.client_cache_bytes,
            read_latency: Duration::from_secs_f64(self.read_latency_ms / 1e3),
            method: self.method,
            sphere_write_pages: self.sphere_write_pages,
        }
    }

    fn workload(&self, f: u32) -> Result<Workload> {
        if f > self.visits {
            return Err(Error::InvalidArgument(format!(
                "bench complex: --foreign {f} is more than --visits {}",
                self.visits
            )));
        }
        Ok(Workload {
            c: self.c,
            o: self.visits - f,
            f,
            update_percent: self.update_percent,
        })
    }
}

pub fn complex(args: &ComplexArgs) -> Result<ExitCode> {
    let workloads = args
        .foreign
        .iter()
        .map(|&f| args.workload(f))
        .collect::<Result<Vec<_>>>()?;
    if workloads.is_empty() || args.dmp.is_empty() {
        return Err(Error::InvalidArgument(
            "bench complex: at least one --foreign case and one --dmp".into(),
        ));
    }
    // Before the (long) load: every case must fit the database.
    for workload in &workloads {
        workload.check(&args.shape())?;
    }
    std::fs::create_dir_all(&args.path).map_err(|e| Error::io(&args.path, "create folder", e))?;
    let machine = args.machine();
    let steps = workloads.len() * args.runs * args.dmp.len() * STRATEGIES.len();
    let bar = progress_bar(steps as u64, "strategy runs", false);
    let mut cases = Vec::new();
    for (c, workload) in workloads.iter().enumerate() {
        let dir = args.path.join("complex-objects");
        crate::bench::remove_store(&dir)?;
        bar.set_message(format!("f = {}: loading", workload.f));
        let db = complex::load(&dir, args.shape(), &machine, args.seed)?;
        let mut points = vec![vec![Vec::new(); STRATEGIES.len()]; args.dmp.len()];
        for run in 0..args.runs {
            for (d, &dmp) in args.dmp.iter().enumerate() {
                for turn in 0..STRATEGIES.len() {
                    let s = (turn + run + d) % STRATEGIES.len();
                    bar.set_message(format!(
                        "f = {}, run {}: {} DMP {dmp}",
                        workload.f,
                        run + 1,
                        STRATEGIES[s]
                    ));
                    let seed = args.seed ^ ((c * 1_000_003 + run * 1009 + d) as u64);
                    let point =
                        complex::measure(&db, workload, STRATEGIES[s], dmp, args.seconds, seed)?;
                    // Each point as it comes, so that a long run shows (and keeps) its way.
                    bar.suspend(|| {
                        eprintln!(
                            "f = {}, run {}, DMP {dmp}, {}: {:.1} txns/s, {:.0} ms, {:.1}% conflicts, \
                             {} restarts, {} abandoned",
                            workload.f,
                            run + 1,
                            STRATEGIES[s],
                            point.txns_per_s,
                            point.response_ms,
                            point.conflict_rate * 100.0,
                            point.restarts,
                            point.abandoned
                        )
                    });
                    points[d][s].push(point);
                    bar.inc(1);
                }
            }
        }
        let pages = db.pages;
        drop::<Database>(db);
        crate::bench::remove_store(&dir)?;
        cases.push(Case {
            workload: *workload,
            pages,
            points,
        });
    }
    bar.finish_and_clear();
    for case in &cases {
        print_case(args, case);
    }
    if let Some(csv) = &args.csv {
        write_csv(csv, &args.dmp, &cases)?;
        println!("wrote {}", csv.display());
    }
    if let Some(dir) = &args.plots {
        draw(dir, args, &cases)?;
        println!("drew the figures into {}", dir.display());
    }
    Ok(ExitCode::SUCCESS)
}

type Field = fn(&Point) -> f64;

/// The columns, each a median over the runs.
const COLUMNS: [(&str, Field); 13] = [
    ("txns/s", |p| p.txns_per_s),
    ("response ms", |p| p.response_ms),
    ("conflict %", |p| p.conflict_rate * 100.0),
    ("lock wait ms/txn", |p| p.lock_wait_ms_per_txn),
    ("deadlocks", |p| p.deadlocks as f64),
    ("restarts", |p| p.restarts as f64),
    ("abandoned", |p| p.abandoned as f64),
    ("L0 writes/s", |p| p.l0_writes_per_s),
    ("L0 writes/txn", |p| p.l0_writes_per_txn),
    ("pages/L0 write", |p| p.pages_per_l0_write),
    ("sphere mean", |p| p.sphere_pages_mean),
    ("sphere max", |p| p.sphere_pages_max as f64),
    ("page reads/txn", |p| p.page_reads_per_txn),
];

fn med(points: &[Point], field: Field) -> f64 {
    median(points.iter().map(field).collect())
}

/// The DMP index at which S2/PS's median throughput peaks.
fn peak(case: &Case) -> usize {
    let s2ps = STRATEGIES
        .iter()
        .position(|s| *s == Strategy::S2Ps)
        .unwrap_or(2);
    (0..case.points.len())
        .max_by(|&a, &b| {
            med(&case.points[a][s2ps], |p| p.txns_per_s)
                .total_cmp(&med(&case.points[b][s2ps], |p| p.txns_per_s))
        })
        .unwrap_or(0)
}

fn print_case(args: &ComplexArgs, case: &Case) {
    let w = &case.workload;
    println!(
        "complex objects: {} COs x {} SOs ({} pages), c = {}, o = {}, f = {}, u = {}%; pool {} KiB, \
         client caches {} KiB, {}, method {}; {} s per point, medians of {} runs",
        args.complex_objects,
        args.subobjects,
        case.pages,
        w.c,
        w.o,
        w.f,
        w.update_percent,
        args.pool_bytes >> 10,
        args.client_cache_bytes >> 10,
        if args.read_latency_ms > 0.0 {
            format!("data-file reads of {} ms (emulated)", args.read_latency_ms)
        } else {
            "no emulated read latency".to_string()
        },
        match args.sphere_write_pages {
            0 => args.method.name().to_string(),
            n => format!("{} (spheres written past {n} pages)", args.method),
        },
        args.seconds,
        args.runs
    );
    let mut table = Table::new();
    let mut header = vec!["DMP".to_string(), "strategy".to_string()];
    header.extend(COLUMNS.iter().map(|c| c.0.to_string()));
    header.insert(3, "x S1".to_string());
    table.set_header(header);
    for (d, &dmp) in args.dmp.iter().enumerate() {
        let s1 = med(&case.points[d][0], |p| p.txns_per_s);
        for (s, strategy) in STRATEGIES.iter().enumerate() {
            let points = &case.points[d][s];
            let mut row = vec![dmp.to_string(), strategy.to_string()];
            row.extend(COLUMNS.iter().map(|(name, field)| {
                let v = med(points, *field);
                if name.contains('%') || name.contains("mean") || name.contains("/L0") {
                    format!("{v:.1}")
                } else if v >= 100.0
                    || name.contains("deadlocks")
                    || name.contains("restarts")
                    || name.contains("abandoned")
                {
                    format!("{v:.0}")
                } else {
                    format!("{v:.2}")
                }
            }));
            row.insert(
                3,
                format!("{:.2}", med(points, |p| p.txns_per_s) / s1.max(1e-9)),
            );
            table.add_row(row);
        }
    }
    println!("{table}");
    let d = peak(case);
    let at = |s: usize, field: Field| med(&case.points[d][s], field);
    println!(
        "S2/PS peaks at DMP {}: {:.2}x S1's throughput, {:.2}x shorter response time, \
         {:.2}x S1's L0 log writes per committed transaction, conflict rate {:.1}% (S1 {:.1}%)\n",
        args.dmp[d],
        at(2, |p| p.txns_per_s) / at(0, |p| p.txns_per_s).max(1e-9),
        at(0, |p| p.response_ms) / at(2, |p| p.response_ms).max(1e-9),
        at(2, |p| p.l0_writes_per_txn) / at(0, |p| p.l0_writes_per_txn).max(1e-9),
        at(2, |p| p.conflict_rate) * 100.0,
        at(0, |p| p.conflict_rate) * 100.0,
    );
}

fn write_csv(path: &Path, dmps: &[usize], cases: &[Case]) -> Result<()> {
    let mut out = String::from(
        "o,f,c,update_percent,dmp,strategy,run,committed,txns_per_s,response_ms,conflict_rate,\
         lock_wait_ms_per_txn,deadlocks,timeouts,restarts,abandoned,l0_writes_per_s,l0_writes_per_txn,\
         pages_per_l0_write,sphere_pages_mean,sphere_pages_max,page_reads_per_txn\n",
    );
    for case in cases {
        let w = &case.workload;
        for (d, dmp) in dmps.iter().enumerate() {
            for (s, strategy) in STRATEGIES.iter().enumerate() {
                for (run, p) in case.points[d][s].iter().enumerate() {
                    out.push_str(&format!(
                        "{},{},{},{},{dmp},{strategy},{},{},{:.3},{:.3},{:.5},{:.3},{},{},{},{},{:.2},{:.3},{:.2},{:.2},{},{:.2}\n",
                        w.o,
                        w.f,
                        w.c,
                        w.update_percent,
                        run + 1,
                        p.committed,
                        p.txns_per_s,
                        p.response_ms,
                        p.conflict_rate,
                        p.lock_wait_ms_per_txn,
                        p.deadlocks,
                        p.timeouts,
                        p.restarts,
                        p.abandoned,
                        p.l0_writes_per_s,
                        p.l0_writes_per_txn,
                        p.pages_per_l0_write,
                        p.sphere_pages_mean,
                        p.sphere_pages_max,
                        p.page_reads_per_txn,
                    ));
                }
            }
        }
    }
    std::fs::write(path, out).map_err(|e| Error::io(path, "write", e))
}

/// The paper's figures 7 and 9 (a to e) for each case, against the DMP.
fn draw(dir: &Path, args: &ComplexArgs, cases: &[Case]) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, "create folder", e))?;
    let figures: [(&str, &str, Field); 4] = [
        ("throughput", "transactions/s", |p| p.txns_per_s),
        ("response-time", "response time, ms", |p| p.response_ms),
        ("lock-wait", "lock wait per transaction, ms", |p| {
            p.lock_wait_ms_per_txn
        }),
        ("l0-log-io-rate", "level-0 log writes/s", |p| {
            p.l0_writes_per_s
        }),
    ];
    for case in cases {
        let f = case.workload.f;
        let line = |s: usize, field: Field| -> Vec<(f64, f64)> {
            args.dmp
                .iter()
                .enumerate()
                .map(|(d, &dmp)| (dmp as f64, med(&case.points[d][s], field)))
                .collect()
        };
        for (stem, label, field) in figures {
            let series: Vec<(String, Vec<(f64, f64)>)> = STRATEGIES
                .iter()
                .enumerate()
                .map(|(s, strategy)| (strategy.to_string().to_uppercase(), line(s, field)))
                .collect();
            plot::lines(
                &dir.join(format!("complex-f{f}-{stem}")),
                &format!("Complex objects, f = {f}: {label}"),
                "DMP",
                label,
                &series,
            )?;
        }
        let spheres: Vec<(String, Vec<(f64, f64)>)> = vec![
            ("S2PS mean".into(), line(2, |p| p.sphere_pages_mean)),
            ("S2PS max".into(), line(2, |p| p.sphere_pages_max as f64)),
        ];
        plot::lines(
            &dir.join(format!("complex-f{f}-sphere-size")),
            &format!("Complex objects, f = {f}: persistence sphere size"),
            "DMP",
            "pages",
            &spheres,
        )?;
    }
    Ok(())
}
