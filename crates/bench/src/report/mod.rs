//! Reports of a benchmark run: terminal tables (medians with min-max), `runs.csv` with every
//! run, `summary.json` (`{"runs": [...]}`, the schema in docs/BENCHMARKS.md) and plots.

pub mod oo1;
pub mod oo7;
pub mod plot;
pub mod thor;

use crate::record::RunRecord;
use comfy_table::{presets, Table};
use lodestore::{Error, Result};
use serde::{Deserialize, Serialize};
use std::fs;
use std::path::Path;

/// A table with its title.
pub struct Titled {
    pub title: String,
    pub table: Table,
}

impl std::fmt::Display for Titled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{}", self.title)?;
        writeln!(f, "{}", self.table)
    }
}

pub(crate) fn table(title: impl Into<String>, header: Vec<String>) -> Titled {
    let mut table = Table::new();
    table
        .load_preset(presets::UTF8_FULL_CONDENSED)
        .set_header(header);
    Titled {
        title: title.into(),
        table,
    }
}

/// Median, minimum and maximum.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

pub fn spread(values: impl IntoIterator<Item = f64>) -> Spread {
    let mut values: Vec<f64> = values.into_iter().filter(|v| v.is_finite()).collect();
    if values.is_empty() {
        return Spread::default();
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    let median = if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    };
    Spread {
        median,
        min: values[0],
        max: values[n - 1],
    }
}

/// Values in order of first appearance, without repeats.
pub(crate) fn distinct<T: PartialEq + Clone>(items: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut out = Vec::new();
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

pub(crate) fn fmt_ms(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.2}")
    }
}

#[derive(Serialize)]
struct Summary<'a> {
    generated_by: &'static str,
    version: &'static str,
    runs: &'a [RunRecord],
}

pub(crate) fn io_error(path: &Path, operation: &'static str, source: std::io::Error) -> Error {
    Error::Io {
        path: path.to_path_buf(),
        operation,
        source,
    }
}

/// Writes `records` as CSV, a header and a row each, to `path`.
pub(crate) fn write_csv<T: Serialize>(path: &Path, records: &[T]) -> Result<()> {
    let mut writer = csv::Writer::from_path(path)
        .map_err(|e| io_error(path, "create", std::io::Error::other(e)))?;
    for record in records {
        writer
            .serialize(record)
            .map_err(|e| io_error(path, "write", std::io::Error::other(e)))?;
    }
    writer.flush().map_err(|e| io_error(path, "write", e))
}

/// Writes `runs.csv` and `summary.json` into `out`.
pub fn write_files(out: &Path, records: &[RunRecord]) -> Result<()> {
    fs::create_dir_all(out).map_err(|e| io_error(out, "create folder", e))?;
    write_csv(&out.join("runs.csv"), records)?;
    let json_path = out.join("summary.json");
    let summary = Summary {
        generated_by: "lodestore bench",
        version: env!("CARGO_PKG_VERSION"),
        runs: records,
    };
    let json = serde_json::to_vec_pretty(&summary)
        .map_err(|e| io_error(&json_path, "encode", std::io::Error::other(e)))?;
    fs::write(&json_path, json).map_err(|e| io_error(&json_path, "write", e))?;
    Ok(())
}

/// A file-name-safe rendering of a number (`0.05` stays `0.05`, `1` becomes `1`).
pub(crate) fn number_name(value: f64) -> String {
    let text = format!("{value}");
    text.replace('-', "m")
}

#[derive(Deserialize)]
struct SummaryIn {
    runs: Vec<RunRecord>,
}

/// The runs of a `summary.json` written by [`write_files`].
pub fn read_summary(path: &Path) -> Result<Vec<RunRecord>> {
    let bytes = fs::read(path).map_err(|e| io_error(path, "read", e))?;
    let summary: SummaryIn = serde_json::from_slice(&bytes).map_err(|e| {
        Error::InvalidArgument(format!(
            "{} is not a benchmark summary: {e}",
            path.display()
        ))
    })?;
    Ok(summary.runs)
}
