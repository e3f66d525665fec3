//! `lodestore bench difflog`: differential logging (dl1p, dl2p) against its physical-logging
//! baseline (pl2p) on the paper's workload (see `lodestore_bench::experiments::difflog`). The
//! methods take turns within each run, each run starting with the next one; the table shows
//! medians of the runs, and each ratio is the median of the ratios within the runs.

use crate::bench::median;
use lodestore::{Error, Result};
use lodestore_bench::experiments::difflog::{self, Figures, Setup, METHODS};
use lodestore_bench::workspace::progress_bar;
use std::path::Path;
use std::process::ExitCode;

pub fn difflog(path: &Path, setup: &Setup, runs: usize, csv: Option<&Path>) -> Result<ExitCode> {
    std::fs::create_dir_all(path).map_err(|e| Error::io(path, "create folder", e))?;
    let bar = progress_bar((runs * METHODS.len()) as u64, "method runs", false);
    let mut figures: Vec<Vec<Figures>> = vec![Vec::new(); METHODS.len()];
    for run in 0..runs {
        for turn in 0..METHODS.len() {
            let i = (run + turn) % METHODS.len();
            bar.set_message(format!("run {}: {}", run + 1, METHODS[i].name()));
            let dir = path.join(METHODS[i].name());
            figures[i].push(difflog::run(METHODS[i], &dir, setup, run as u64)?);
            let _ = std::fs::remove_dir_all(&dir);
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let baseline = METHODS.len() - 1;
    type Field = fn(&Figures) -> f64;
    let fields: [(&str, Field); 7] = [
        ("bytes logged per transaction", |f| f.log_bytes as f64),
        ("transactions/s", |f| f.txns_per_s),
        ("restart ms", |f| f.restart_ms),
        ("  backup load ms", |f| f.backup_load_ms),
        ("  log read ms", |f| f.log_read_ms),
        ("  replay ms", |f| f.replay_ms),
        ("  log read + replay ms", |f| f.log_read_ms + f.replay_ms),
    ];
    let per_txn = setup.transactions.max(1) as f64;
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
    for (name, field) in fields {
        let scale = if name.starts_with("bytes") {
            per_txn
        } else {
            1.0
        };
        let mut row = vec![name.to_string()];
        row.extend(figures.iter().map(|runs| {
            format!(
                "{:.1}",
                median(runs.iter().map(|f| field(f) / scale).collect())
            )
        }));
        row.extend(figures[..baseline].iter().map(|runs| {
            let ratios = runs
                .iter()
                .zip(&figures[baseline])
                .map(|(ours, base)| field(ours) / field(base))
                .collect();
            format!("{:.2}", median(ratios))
        }));
        table.add_row(row);
    }
    println!(
        "{} records of {} bytes, {} transactions (2% aborted), {} log streams, {} threads, {runs} runs",
        setup.records, setup.slot_bytes, setup.transactions, setup.streams, setup.threads
    );
    println!("{table}");
    if let Some(csv) = csv {
        let mut out = String::from(
            "method,run,log_bytes,txns_per_s,restart_ms,backup_load_ms,log_read_ms,replay_ms,records_replayed\n",
        );
        for runs in &figures {
            for (run, f) in runs.iter().enumerate() {
                out.push_str(&format!(
                    "{},{run},{},{:.1},{:.2},{:.2},{:.2},{:.2},{}\n",
                    f.method,
                    f.log_bytes,
                    f.txns_per_s,
                    f.restart_ms,
                    f.backup_load_ms,
                    f.log_read_ms,
                    f.replay_ms,
                    f.records_replayed
                ));
            }
        }
        std::fs::write(csv, out).map_err(|e| Error::io(csv, "write", e))?;
    }
    Ok(ExitCode::SUCCESS)
}
