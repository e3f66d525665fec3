//! `lodestore bench difflog`: differential logging (dl1p, dl2p) against its physical-logging
//! baseline (pl2p) on the paper's workload (see `lodestore_bench::experiments::difflog`). The
//! methods take turns within each run, each run starting with the next one; the tables show
//! medians of the runs, and each ratio is the median of the ratios within the runs. A sweep
//! varies one setting (the paper's figures 5 to 9) and draws each figure against it.

use crate::bench::median;
use clap::Args;
use lodestore::{DiskModel, Error, Result};
use lodestore_bench::experiments::difflog::{self, Figures, RestartFigures, Setup, METHODS};
use lodestore_bench::report::plot;
use lodestore_bench::workspace::progress_bar;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

#[derive(Args, Debug, Clone)]
pub struct DifflogArgs {
    /// Folder for the benchmark stores (replaced as it goes).
    pub path: PathBuf,
    /// Records in the table before the measured transactions.
    #[arg(long, default_value_t = 50_000, value_parser = clap::value_parser!(u64).range(100..=10_000_000))]
    pub records: u64,
    /// Measured transactions per method and run (all logged since the checkpoint a restart
    /// starts from).
    #[arg(long, default_value_t = 4_000, value_parser = clap::value_parser!(u64).range(10..=10_000_000))]
    pub transactions: u64,
    /// Bytes of one record (the paper's slot size).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(16..=4096))]
    pub slot_bytes: u64,
    /// Log streams (1 to 64).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=64))]
    pub streams: u8,
    /// Threads running transactions (1 to 256).
    #[arg(long, default_value_t = 4, value_parser = crate::args::threads)]
    pub threads: u32,
    /// Transactions aborted instead of committed, in percent (0 to 50).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(0..=50))]
    pub abort_percent: u32,
    /// Put each log stream on an emulated disk of its own sustaining this many MB/s (the
    /// paper's disks: 29), instead of files on the real disk; the restarted copies then stay
    /// in the page cache, the devices' clocks being the cost of reading. Figures so measured
    /// are labelled emulated.
    #[arg(long, value_name = "MB_PER_S", value_parser = positive_mb_s)]
    pub disk_mb_s: Option<f64>,
    /// With --disk-mb-s: milliseconds an emulated sync takes after its writes are transferred.
    #[arg(long, default_value_t = 1.0, requires = "disk_mb_s", value_parser = sync_ms)]
    pub sync_ms: f64,
    /// Vary one setting: NAME=V1,V2,... with NAME one of streams, slot-bytes, abort-percent,
    /// transactions, threads (for example streams=1,2,4,8). Each value runs every method
    /// --runs times.
    #[arg(long, value_parser = parse_sweep)]
    pub sweep: Option<Sweep>,
    /// Runs; the tables show medians.
    #[arg(long, default_value_t = 3, value_parser = crate::args::runs)]
    pub runs: usize,
    /// Also write every run's figures to this CSV file.
    #[arg(long)]
    pub csv: Option<PathBuf>,
    /// Also draw the figures (SVG and PNG) into this folder: the restart breakdown (the
    /// paper's Figure 8) and, with --sweep, each figure against the swept setting.
    #[arg(long, value_name = "DIR")]
    pub plots: Option<PathBuf>,
}

/// A setting varied over values.
#[derive(Clone, Debug)]
pub struct Sweep {
    pub name: &'static str,
    pub values: Vec<u64>,
}

const SWEEPABLE: [(&str, u64, u64); 5] = [
    ("streams", 1, 64),
    ("slot-bytes", 16, 4096),
    ("abort-percent", 0, 50),
    ("transactions", 10, 10_000_000),
    ("threads", 1, 256),
];

fn parse_sweep(text: &str) -> std::result::Result<Sweep, String> {
    let (name, values) = text
        .split_once('=')
        .ok_or_else(|| format!("`{text}` is not NAME=V1,V2,..."))?;
    let &(name, low, high) = SWEEPABLE
        .iter()
        .find(|(n, _, _)| *n == name)
        .ok_or_else(|| {
            let names: Vec<&str> = SWEEPABLE.iter().map(|s| s.0).collect();
            format!("`{name}` cannot be swept; one of {}", names.join(", "))
        })?;
    let values = values
        .split(',')
        .map(|v| {
            let v: u64 = v
                .trim()
                .parse()
                .map_err(|_| format!("`{v}` is not a whole number"))?;
            if (low..=high).contains(&v) {
                Ok(v)
            } else {
                Err(format!("{name} {v} is outside {low}..={high}"))
            }
        })
        .collect::<std::result::Result<Vec<u64>, String>>()?;
    if values.is_empty() || values.len() > 32 {
        return Err("a sweep has 1 to 32 values".into());
    }
    Ok(Sweep { name, values })
}

fn positive_mb_s(text: &str) -> std::result::Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.01..=100_000.0).contains(&v) => Ok(v),
        _ => Err(format!(
            "`{text}` is not a bandwidth from 0.01 to 100000 MB/s"
        )),
    }
}

fn sync_ms(text: &str) -> std::result::Result<f64, String> {
    match text.parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=1_000.0).contains(&v) => Ok(v),
        _ => Err(format!("`{text}` is not a latency from 0 to 1000 ms")),
    }
}

impl DifflogArgs {
    fn setup(&self) -> Setup {
        Setup {
            records: self.records,
            transactions: self.transactions,
            slot_bytes: self.slot_bytes as usize,
            streams: usize::from(self.streams),
            threads: self.threads as usize,
            abort_percent: self.abort_percent,
            disk: self.disk_mb_s.map(|mb_s| DiskModel {
                bytes_per_s: (mb_s * 1e6) as u64,
                sync_latency: Duration::from_secs_f64(self.sync_ms / 1e3),
                read_latency: Duration::ZERO,
            }),
        }
    }
}

fn with(setup: &Setup, name: &str, value: u64) -> Setup {
    let mut setup = setup.clone();
    match name {
        "streams" => setup.streams = value as usize,
        "slot-bytes" => setup.slot_bytes = value as usize,
        "abort-percent" => setup.abort_percent = value as u32,
        "transactions" => setup.transactions = value,
        "threads" => setup.threads = value as usize,
        _ => unreachable!("parse_sweep admits only these"),
    }
    setup
}

/// Every run of every method at one setting.
struct Point {
    value: u64,
    setup: Setup,
    figures: Vec<Vec<Figures>>,
}

pub fn difflog(args: &DifflogArgs) -> Result<ExitCode> {
    let path = &args.path;
    std::fs::create_dir_all(path).map_err(|e| Error::io(path, "create folder", e))?;
    let base = args.setup();
    let (name, values) = match &args.sweep {
        Some(sweep) => (sweep.name, sweep.values.clone()),
        None => ("none", vec![0]),
    };
    let runs = args.runs;
    let bar = progress_bar(
        (values.len() * runs * METHODS.len()) as u64,
        "method runs",
        false,
    );
    let mut points = Vec::new();
    for &value in &values {
        let setup = if args.sweep.is_some() {
            with(&base, name, value)
        } else {
            base.clone()
        };
        let mut figures: Vec<Vec<Figures>> = vec![Vec::new(); METHODS.len()];
        for run in 0..runs {
            for turn in 0..METHODS.len() {
                let i = (run + turn) % METHODS.len();
                bar.set_message(format!(
                    "{name} {value}, run {}: {}",
                    run + 1,
                    METHODS[i].name()
                ));
                let dir = path.join(METHODS[i].name());
                figures[i].push(difflog::run(METHODS[i], &dir, &setup, run as u64)?);
                let _ = std::fs::remove_dir_all(&dir);
                bar.inc(1);
            }
        }
        points.push(Point {
            value,
            setup,
            figures,
        });
    }
    bar.finish_and_clear();
    for point in &points {
        print_point(point, args.sweep.as_ref().map(|s| s.name), runs);
    }
    if let Some(sweep) = &args.sweep {
        print_sweep(sweep.name, &points);
    }
    if let Some(csv) = &args.csv {
        write_csv(csv, name, &points)?;
    }
    if let Some(dir) = &args.plots {
        draw(dir, args.sweep.as_ref().map(|s| s.name), &points)?;
    }
    Ok(ExitCode::SUCCESS)
}

type Field = fn(&Figures, &Setup) -> Option<f64>;

/// The log processing rate at level 2 (the backup loaded first, each stream replayed as it is
/// read), when the streams have the disks to themselves.
fn log_processing_mb_s(f: &Figures) -> f64 {
    f.log_bytes as f64 / 1e6 / (f.level2.log_processing_ms() / 1e3)
}

/// The rows of a point's table: name and how to read it from one run.
fn fields() -> Vec<(&'static str, Field)> {
    vec![
        ("bytes logged per transaction", |f, s| {
            Some(f.log_bytes as f64 / s.transactions.max(1) as f64)
        }),
        ("transactions/s", |f, _| Some(f.txns_per_s)),
        ("emulated disks busy, mean %", |f, _| {
            (!f.device_busy.is_empty())
                .then(|| 100.0 * f.device_busy.iter().sum::<f64>() / f.device_busy.len() as f64)
        }),
        ("restart, level 1: ms", |f, _| f.level1.map(|r| r.total_ms)),
        ("  backup load ms", |f, _| {
            f.level1.map(|r| r.backup_load_ms)
        }),
        ("  log read ms (longest stream)", |f, _| {
            f.level1.map(|r| r.log_read_ms)
        }),
        ("  replay ms (after the reads)", |f, _| {
            f.level1.map(|r| r.replay_ms)
        }),
        ("restart, level 2 (Seq): ms", |f, _| Some(f.level2.total_ms)),
        ("  backup load ms", |f, _| Some(f.level2.backup_load_ms)),
        ("  log read ms (longest stream)", |f, _| {
            Some(f.level2.log_read_ms)
        }),
        ("  replay ms (after the reads)", |f, _| {
            Some(f.level2.replay_ms)
        }),
        ("  log processing ms", |f, _| {
            Some(f.level2.log_processing_ms())
        }),
        ("restart, level 4 (Para): ms", |f, _| {
            f.level4.map(|r| r.total_ms)
        }),
        ("  backup load ms (beside the streams)", |f, _| {
            f.level4.map(|r| r.backup_load_ms)
        }),
        ("  log processing ms", |f, _| {
            f.level4.map(|r| r.log_processing_ms())
        }),
        ("level 4 / level 1 (restart)", |f, _| {
            Some(f.level4?.total_ms / f.level1?.total_ms)
        }),
        ("log processed MB/s (level 2)", |f, _| {
            Some(log_processing_mb_s(f))
        }),
        ("disk read MB/s (raw, same run)", |f, _| {
            Some(f.disk_read_mb_s)
        }),
        ("log processed / disk read", |f, _| {
            Some(log_processing_mb_s(f) / f.disk_read_mb_s)
        }),
    ]
}

fn median_of(runs: &[Figures], setup: &Setup, field: Field) -> Option<f64> {
    let values: Vec<f64> = runs.iter().filter_map(|f| field(f, setup)).collect();
    (!values.is_empty()).then(|| median(values))
}

/// The median over runs of `field(method) / field(pl2p)` within each run.
fn median_ratio(point: &Point, method: usize, field: Field) -> Option<f64> {
    let baseline = &point.figures[METHODS.len() - 1];
    let ratios: Vec<f64> = point.figures[method]
        .iter()
        .zip(baseline)
        .filter_map(|(ours, base)| Some(field(ours, &point.setup)? / field(base, &point.setup)?))
        .collect();
    (!ratios.is_empty()).then(|| median(ratios))
}

fn describe(setup: &Setup) -> String {
    let disks = match setup.disk {
        Some(model) => format!(
            "each stream on an emulated disk of {:.1} MB/s and {:.2} ms syncs",
            model.bytes_per_s as f64 / 1e6,
            model.sync_latency.as_secs_f64() * 1e3
        ),
        None => "streams on the real disk".to_string(),
    };
    format!(
        "{} records of {} bytes, {} transactions ({}% aborted), {} log streams, {} threads; {disks}",
        setup.records,
        setup.slot_bytes,
        setup.transactions,
        setup.abort_percent,
        setup.streams,
        setup.threads
    )
}

fn print_point(point: &Point, sweep: Option<&str>, runs: usize) {
    let baseline = METHODS.len() - 1;
    let mut table = comfy_table::Table::new();
    table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
    let mut header = vec!["figure".to_string()];
    header.extend(METHODS.iter().map(|m| m.name().to_string()));
    header.extend(
        METHODS[..baseline]
            .iter()
            .map(|m| format!("{} / pl2p", m.name())),
    );
    table.set_header(header);
    let show =
        |v: Option<f64>, places: usize| v.map_or("-".to_string(), |v| format!("{v:.places$}"));
    for (name, field) in fields() {
        let mut row = vec![name.to_string()];
        row.extend(point.figures.iter().map(|runs| {
            show(
                median_of(runs, &point.setup, field),
                if name.contains(" / ") { 2 } else { 1 },
            )
        }));
        row.extend((0..baseline).map(|m| show(median_ratio(point, m, field), 2)));
        table.add_row(row);
    }
    if let Some(sweep) = sweep {
        println!("{sweep} = {}:", point.value);
    }
    println!("{}, {runs} runs", describe(&point.setup));
    println!("{table}");
}

/// One row per swept value: the paper's figures side by side.
fn print_sweep(name: &str, points: &[Point]) {
    let rows: [(&str, Field); 3] = [
        ("bytes/txn", |f, s| {
            Some(f.log_bytes as f64 / s.transactions.max(1) as f64)
        }),
        ("txns/s", |f, _| Some(f.txns_per_s)),
        ("log processing ms", |f, _| {
            Some(f.level2.log_processing_ms())
        }),
    ];
    let mut table = comfy_table::Table::new();
    table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
    let mut header = vec![name.to_string()];
    for (figure, _) in &rows {
        header.extend(METHODS.iter().map(|m| format!("{figure} {}", m.name())));
        header.push(format!("{figure} dl1p / pl2p"));
    }
    table.set_header(header);
    for point in points {
        let mut row = vec![point.value.to_string()];
        for (_, field) in &rows {
            for runs in &point.figures {
                row.push(
                    median_of(runs, &point.setup, *field).map_or("-".into(), |v| format!("{v:.1}")),
                );
            }
            row.push(median_ratio(point, 0, *field).map_or("-".into(), |v| format!("{v:.2}")));
        }
        table.add_row(row);
    }
    println!("Against {name} (log processing at restart level 2: the backup first):");
    println!("{table}");
}

fn write_csv(path: &Path, sweep: &str, points: &[Point]) -> Result<()> {
    let mut header: Vec<String> = [
        "sweep",
        "value",
        "method",
        "run",
        "streams",
        "slot_bytes",
        "abort_percent",
        "threads",
        "transactions",
        "emulated_mb_s",
        "log_bytes",
        "txns_per_s",
        "disk_read_mb_s",
        "records_replayed",
    ]
    .map(String::from)
    .to_vec();
    for level in [1, 2, 4] {
        for phase in ["total_ms", "backup_load_ms", "log_read_ms", "replay_ms"] {
            header.push(format!("level{level}_{phase}"));
        }
    }
    let mut out = header.join(",") + "\n";
    for point in points {
        let s = &point.setup;
        let emulated = s.disk.map_or(String::new(), |m| {
            format!("{:.2}", m.bytes_per_s as f64 / 1e6)
        });
        for runs in &point.figures {
            for (run, f) in runs.iter().enumerate() {
                let mut row = vec![
                    sweep.to_string(),
                    point.value.to_string(),
                    f.method.to_string(),
                    run.to_string(),
                    s.streams.to_string(),
                    s.slot_bytes.to_string(),
                    s.abort_percent.to_string(),
                    s.threads.to_string(),
                    s.transactions.to_string(),
                    emulated.clone(),
                    f.log_bytes.to_string(),
                    format!("{:.1}", f.txns_per_s),
                    format!("{:.1}", f.disk_read_mb_s),
                    f.level2.records.to_string(),
                ];
                for restart in [f.level1, Some(f.level2), f.level4] {
                    for value in restart.map_or([None; 4], |r| {
                        [r.total_ms, r.backup_load_ms, r.log_read_ms, r.replay_ms].map(Some)
                    }) {
                        row.push(value.map_or(String::new(), |v| format!("{v:.2}")));
                    }
                }
                out.push_str(&(row.join(",") + "\n"));
            }
        }
    }
    std::fs::write(path, out).map_err(|e| Error::io(path, "write", e))
}

fn draw(dir: &Path, sweep: Option<&str>, points: &[Point]) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, "create folder", e))?;
    // Figure 8: the restart broken down, at the first setting.
    let first = &points[0];
    let mut categories = Vec::new();
    let mut phases: Vec<(String, Vec<f64>)> =
        ["backup load", "log read", "replay", "rest of restart"]
            .iter()
            .map(|p| (p.to_string(), Vec::new()))
            .collect();
    for (m, method) in METHODS.iter().enumerate() {
        type Get = fn(&Figures) -> Option<RestartFigures>;
        let levels: [(&str, Get); 3] = [
            ("level 1", |f| f.level1),
            ("Seq", |f| Some(f.level2)),
            ("Para", |f| f.level4),
        ];
        for (label, get) in levels {
            if !first.figures[m].iter().any(|f| get(f).is_some()) {
                continue;
            }
            categories.push(format!("{}-{label}", method.name()));
            let phase = |read: fn(&RestartFigures) -> f64| {
                let values: Vec<f64> = first.figures[m]
                    .iter()
                    .filter_map(|f| get(f).map(|r| read(&r)))
                    .collect();
                median(values)
            };
            let total = phase(|r| r.total_ms);
            // Level 4 loads the backup beside the streams: only their work shows.
            let backup = if label == "Para" {
                0.0
            } else {
                phase(|r| r.backup_load_ms)
            };
            let read = phase(|r| r.log_read_ms);
            let replay = phase(|r| r.replay_ms);
            for (i, v) in [
                backup,
                read,
                replay,
                (total - backup - read - replay).max(0.0),
            ]
            .into_iter()
            .enumerate()
            {
                phases[i].1.push(v);
            }
        }
    }
    plot::stacked_bars(
        &dir.join("difflog-restart"),
        &format!(
            "Restart, {} streams, {} transactions{} (Seq: level 2, Para: level 4)",
            first.setup.streams,
            first.setup.transactions,
            if first.setup.disk.is_some() {
                ", emulated disks"
            } else {
                ""
            }
        ),
        "ms",
        &categories,
        &phases,
    )?;
    if let Some(name) = sweep {
        let figures: [(&str, &str, Field); 3] = [
            ("difflog-throughput", "transactions/s", |f, _| {
                Some(f.txns_per_s)
            }),
            (
                "difflog-log-processing",
                "log processing ms (level 2)",
                |f, _| Some(f.level2.log_processing_ms()),
            ),
            (
                "difflog-log-volume",
                "bytes logged per transaction",
                |f, s| Some(f.log_bytes as f64 / s.transactions.max(1) as f64),
            ),
        ];
        for (stem, y_label, field) in figures {
            let series: Vec<(String, Vec<(f64, f64)>)> = METHODS
                .iter()
                .enumerate()
                .map(|(m, method)| {
                    let line = points
                        .iter()
                        .filter_map(|p| {
                            Some((p.value as f64, median_of(&p.figures[m], &p.setup, field)?))
                        })
                        .collect();
                    (method.name().to_string(), line)
                })
                .collect();
            plot::lines(
                &dir.join(format!("{stem}-by-{name}")),
                &format!("{y_label} against {name}"),
                name,
                y_label,
                &series,
            )?;
        }
    }
    Ok(())
}
