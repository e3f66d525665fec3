//! `lodestore bench kv`: Lodestore's ordered map against redb and LMDB on the same keys in the
//! same run (see `lodestore_bench::kv`). The engines take turns within each run, each run
//! starting with the next engine (so none always follows the same one), and a slow moment of
//! the machine falls on all of them. The table shows medians of the runs, and each ratio is the
//! median of the ratios within the runs: a pair measured minutes apart says little on a
//! shared machine.

use crate::bench::median;
use lodestore::{Error, Result};
use lodestore_bench::kv::{self, EngineKind, Figures, WORKLOADS};
use lodestore_bench::workspace::progress_bar;
use std::path::Path;
use std::process::ExitCode;

/// Files to write besides the table.
pub struct Outputs<'a> {
    pub csv: Option<&'a Path>,
    /// Stem of the plot's SVG and PNG.
    pub plot: Option<&'a Path>,
}

pub fn kv(
    path: &Path,
    keys: u64,
    runs: usize,
    outputs: Outputs<'_>,
    lodestore_only: bool,
) -> Result<ExitCode> {
    std::fs::create_dir_all(path).map_err(|e| Error::io(path, "create folder", e))?;
    let engines: &[EngineKind] = if lodestore_only {
        &EngineKind::ALL[..1]
    } else {
        &EngineKind::ALL
    };
    let bar = progress_bar((runs * engines.len()) as u64, "store runs", false);
    let mut figures: Vec<Vec<Figures>> = vec![Vec::new(); engines.len()];
    for run in 0..runs {
        for turn in 0..engines.len() {
            let i = (run + turn) % engines.len();
            let engine = engines[i];
            bar.set_message(format!("run {}: {}", run + 1, engine.name()));
            let dir = path.join(engine.name());
            figures[i].push(kv::run(engine, &dir, keys, 1_000 + run as u64)?);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let medians: Vec<[f64; 4]> = figures
        .iter()
        .map(|runs| std::array::from_fn(|w| median(runs.iter().map(|f| f.ops_per_s[w]).collect())))
        .collect();
    let mut table = comfy_table::Table::new();
    table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
    let mut header = vec!["workload".to_string()];
    header.extend(engines.iter().map(|e| format!("{} ops/s", e.name())));
    header.extend(
        engines[1..]
            .iter()
            .map(|e| format!("lodestore / {}", e.name())),
    );
    table.set_header(header);
    for (w, name) in WORKLOADS.iter().enumerate() {
        let mut row = vec![name.to_string()];
        row.extend(medians.iter().map(|m| format!("{:.0}", m[w])));
        row.extend(figures[1..].iter().map(|peer| {
            let ratios = figures[0]
                .iter()
                .zip(peer)
                .map(|(ours, theirs)| ours.ops_per_s[w] / theirs.ops_per_s[w])
                .collect();
            format!("{:.2}", median(ratios))
        }));
        table.add_row(row);
    }
    let mut disk = vec!["MB on disk".to_string()];
    disk.extend(figures.iter().map(|runs| {
        format!(
            "{:.1}",
            median(runs.iter().map(|f| f.bytes_on_disk as f64).collect()) / 1e6
        )
    }));
    table.add_row(disk);
    println!(
        "{keys} u64 keys, u64 values; transactions of {} inserts or lookups, {} scans of {} keys \
         per read transaction; medians of {runs} runs (ratios: medians of each run's ratio)",
        kv::BATCH,
        kv::SCANS_PER_TXN,
        kv::SCAN_LEN
    );
    println!("{table}");
    if let Some(stem) = outputs.plot {
        let categories: Vec<String> = WORKLOADS.iter().map(|w| w.to_string()).collect();
        let series: Vec<(String, Vec<f64>)> = engines
            .iter()
            .zip(&medians)
            .map(|(engine, m)| {
                let relative = (0..WORKLOADS.len()).map(|w| m[w] / medians[0][w]).collect();
                (engine.name().to_string(), relative)
            })
            .collect();
        lodestore_bench::report::plot::grouped_bars(
            stem,
            &format!("{keys} keys: throughput relative to Lodestore (medians of {runs} runs)"),
            "x Lodestore",
            &categories,
            &series,
        )?;
    }
    if let Some(csv) = outputs.csv {
        let mut lines = vec!["engine,run,keys,workload,ops_per_s,bytes_on_disk".to_string()];
        for runs in &figures {
            for (run, f) in runs.iter().enumerate() {
                for (w, name) in WORKLOADS.iter().enumerate() {
                    lines.push(format!(
                        "{},{run},{keys},{name},{:.1},{}",
                        f.engine.name(),
                        f.ops_per_s[w],
                        f.bytes_on_disk
                    ));
                }
            }
        }
        std::fs::write(csv, lines.join("\n") + "\n").map_err(|e| Error::io(csv, "write", e))?;
    }
    Ok(ExitCode::SUCCESS)
}
