//! Reports of Thor's experiments: the overhead of snapshots on current transactions (Moh
//! Figures 6-1 to 6-3) and T1 as of a snapshot against the archive's delay (Figure 6-5,
//! Table 6.2): tables of medians with their spread, `thor.csv`, `thor.json` and plots.

use super::{distinct, fmt_ms, io_error, plot, spread, table, Titled};
use crate::experiments::thor::{ThorRecord, MODES};
use lodestore::{Error, Result};
use std::path::Path;

fn median_of<'a>(
    records: impl Iterator<Item = &'a ThorRecord>,
    field: fn(&ThorRecord) -> f64,
) -> f64 {
    spread(records.map(field)).median
}

/// The overhead table: per traversal, each setting's median time (min-max) and its ratio to
/// snapshots off; then the same for commits alone.
pub fn overhead_tables(records: &[ThorRecord]) -> Vec<Titled> {
    let overhead: Vec<&ThorRecord> = records.iter().filter(|r| r.part == "overhead").collect();
    if overhead.is_empty() {
        return Vec::new();
    }
    let preset = &overhead[0].preset;
    let scheme = &overhead[0].scheme;
    let runs = overhead.iter().map(|r| r.run).max().unwrap_or(0);
    let mut tables = Vec::new();
    for (what, field) in [
        (
            "traversal and commit",
            (|r: &ThorRecord| r.elapsed_ms) as fn(&ThorRecord) -> f64,
        ),
        ("commit alone", |r: &ThorRecord| r.commit_ms),
    ] {
        let mut header = vec!["traversal".to_string()];
        for mode in MODES {
            header.push(format!("{mode} ms (min-max)"));
            if mode != "off" {
                header.push(format!("{mode}/off"));
            }
        }
        let mut titled = table(
            format!(
                "Thor 6.3-6.5: {what} with snapshots off, on (none taken), and a snapshot \
                 before each transaction ({preset}, {scheme}, medians of {runs} interleaved \
                 runs)"
            ),
            header,
        );
        for traversal in distinct(overhead.iter().map(|r| r.traversal.clone())) {
            let of = |mode: &str| {
                spread(
                    overhead
                        .iter()
                        .filter(|r| r.traversal == traversal && r.mode == mode)
                        .map(|r| field(r)),
                )
            };
            let off = of("off");
            let mut row = vec![traversal.clone()];
            for mode in MODES {
                let s = of(mode);
                row.push(format!(
                    "{} ({}-{})",
                    fmt_ms(s.median),
                    fmt_ms(s.min),
                    fmt_ms(s.max)
                ));
                if mode != "off" {
                    row.push(ratio(s.median, off.median));
                }
            }
            titled.table.add_row(row);
        }
        tables.push(titled);
    }
    tables
}

/// The as-of tables, one per archive backend: per archive delay, T1 current and as of the
/// snapshot, the archive reads, and the fit a + reads x delay.
pub fn as_of_tables(records: &[ThorRecord]) -> Vec<Titled> {
    backends(records)
        .into_iter()
        .filter_map(|backend| as_of_table(&of_backend(records, &backend)))
        .collect()
}

/// The archive backends of the as-of records with their read-ahead (`s3`, `s3, read-ahead
/// 32`), in order of appearance.
fn backends(records: &[ThorRecord]) -> Vec<String> {
    distinct(
        records
            .iter()
            .filter(|r| r.part == "as-of")
            .map(backend_label),
    )
}

fn backend_label(record: &ThorRecord) -> String {
    match record.read_ahead {
        0 | 1 => record.backend.clone(),
        copies => format!("{}, read-ahead {copies}", record.backend),
    }
}

/// The as-of records of one backend.
fn of_backend(records: &[ThorRecord], backend: &str) -> Vec<ThorRecord> {
    records
        .iter()
        .filter(|r| r.part == "as-of" && backend_label(r) == backend)
        .cloned()
        .collect()
}

/// The as-of table of one backend's records: per archive delay, T1 current and as of the snapshot, the archive reads,
/// and the fit a + reads x delay next to the measured time (Table 6.2).
fn as_of_table(records: &[ThorRecord]) -> Option<Titled> {
    let as_of: Vec<&ThorRecord> = records.iter().filter(|r| r.part == "as-of").collect();
    if as_of.is_empty() {
        return None;
    }
    let fit = Fit::of(records)?;
    let mut titled = table(
        format!(
            "Thor 6.6 (Table 6.2): T1 cold, current against as of a snapshot, per archive \
             delay ({} archive, {}, {}); fit: {} ms + reads x delay",
            backend_label(as_of[0]),
            as_of[0].preset,
            as_of[0].scheme,
            fmt_ms(fit.base_ms)
        ),
        [
            "delay ms",
            "current ms (min-max)",
            "as of ms (min-max)",
            "as of/current",
            "archive reads",
            "requests",
            "KiB back",
            "pages fetched",
            "fitted ms",
            "measured/fitted",
        ]
        .map(String::from)
        .to_vec(),
    );
    for delay in distinct(as_of.iter().map(|r| r.delay_ms.to_bits())) {
        let delay = f64::from_bits(delay);
        let of = |mode: &'static str| {
            as_of
                .iter()
                .filter(move |r| r.delay_ms == delay && r.mode == mode)
                .copied()
        };
        let current = spread(of("current").map(|r| r.elapsed_ms));
        let past = spread(of("as-of").map(|r| r.elapsed_ms));
        let reads = median_of(of("as-of"), |r| r.archive_reads as f64);
        let fetched = median_of(of("as-of"), |r| r.pages_fetched as f64);
        let requests = median_of(of("as-of"), |r| r.archive_requests as f64);
        let kib = median_of(of("as-of"), |r| r.archive_bytes as f64) / 1024.0;
        let fitted = fit.base_ms + reads * delay;
        titled.table.add_row(vec![
            fmt_ms(delay),
            format!(
                "{} ({}-{})",
                fmt_ms(current.median),
                fmt_ms(current.min),
                fmt_ms(current.max)
            ),
            format!(
                "{} ({}-{})",
                fmt_ms(past.median),
                fmt_ms(past.min),
                fmt_ms(past.max)
            ),
            ratio(past.median, current.median),
            format!("{reads:.0}"),
            format!("{requests:.0}"),
            format!("{kib:.0}"),
            format!("{fetched:.0}"),
            fmt_ms(fitted),
            ratio(past.median, fitted),
        ]);
    }
    Some(titled)
}

/// The archive-down table: commits that stage page copies with the archive up and down.
pub fn archive_down_table(records: &[ThorRecord]) -> Option<Titled> {
    let part: Vec<&ThorRecord> = records
        .iter()
        .filter(|r| r.part == "archive-down")
        .collect();
    let first = part.first()?;
    let backends = distinct(part.iter().map(|r| r.backend.clone()));
    let mut titled = table(
        format!(
            "Thor, archive down: T2A after a snapshot (every commit stages page copies), \
             the snapshot pages archived remotely, up and then down ({}, {}, {} commits each)",
            first.preset,
            first.scheme,
            part.len() / 2 / backends.len()
        ),
        [
            "archive",
            "state",
            "commit ms (min-max)",
            "p90 commit ms",
            "traversal and commit ms",
            "commit / up",
        ]
        .map(String::from)
        .to_vec(),
    );
    for backend in backends {
        let of_backend = || part.iter().filter(|r| r.backend == backend).copied();
        let up = median_of(of_backend().filter(|r| r.mode == "archive up"), |r| {
            r.commit_ms
        });
        for mode in ["archive up", "archive down"] {
            let of = || of_backend().filter(move |r| r.mode == mode);
            let commits = spread(of().map(|r| r.commit_ms));
            let mut sorted: Vec<f64> = of().map(|r| r.commit_ms).collect();
            if sorted.is_empty() {
                continue;
            }
            sorted.sort_by(f64::total_cmp);
            let p90 = sorted[(sorted.len() * 9 / 10).min(sorted.len() - 1)];
            titled.table.add_row(vec![
                backend.clone(),
                mode.trim_start_matches("archive ").to_string(),
                format!(
                    "{} ({}-{})",
                    fmt_ms(commits.median),
                    fmt_ms(commits.min),
                    fmt_ms(commits.max)
                ),
                fmt_ms(p90),
                fmt_ms(median_of(of(), |r| r.elapsed_ms)),
                ratio(commits.median, up),
            ]);
        }
    }
    Some(titled)
}

/// Time as of a snapshot = a + archive reads x delay, with a the time at no delay.
struct Fit {
    base_ms: f64,
}

impl Fit {
    fn of(records: &[ThorRecord]) -> Option<Fit> {
        let undelayed: Vec<&ThorRecord> = records
            .iter()
            .filter(|r| r.part == "as-of" && r.mode == "as-of" && r.delay_ms == 0.0)
            .collect();
        if undelayed.is_empty() {
            return None;
        }
        Some(Fit {
            base_ms: median_of(undelayed.into_iter(), |r| r.elapsed_ms),
        })
    }
}

fn ratio(value: f64, base: f64) -> String {
    if base > 0.0 {
        format!("{:.3}", value / base)
    } else {
        "-".into()
    }
}

/// Writes `thor.csv`, `thor.json` and the plots into `out`.
pub fn write_files(out: &Path, records: &[ThorRecord]) -> Result<()> {
    std::fs::create_dir_all(out).map_err(|e| io_error(out, "create folder", e))?;
    super::write_csv(&out.join("thor.csv"), records)?;
    let json_path = out.join("thor.json");
    let json = serde_json::json!({
        "generated_by": "lodestore bench thor",
        "version": env!("CARGO_PKG_VERSION"),
        "runs": records,
    });
    std::fs::write(
        &json_path,
        serde_json::to_string_pretty(&json).map_err(|e| Error::InvalidArgument(e.to_string()))?,
    )
    .map_err(|e| io_error(&json_path, "write", e))?;
    plots(out, records)
}

fn plots(out: &Path, records: &[ThorRecord]) -> Result<()> {
    let overhead: Vec<&ThorRecord> = records.iter().filter(|r| r.part == "overhead").collect();
    if !overhead.is_empty() {
        let traversals = distinct(overhead.iter().map(|r| r.traversal.clone()));
        for (stem, title, field) in [
            (
                "thor-overhead",
                "Traversal and commit by snapshot setting (Moh Fig. 6-1 to 6-3)",
                (|r: &ThorRecord| r.elapsed_ms) as fn(&ThorRecord) -> f64,
            ),
            (
                "thor-commit",
                "Commit time by snapshot setting",
                |r: &ThorRecord| r.commit_ms,
            ),
        ] {
            let series: Vec<(String, Vec<f64>)> = MODES
                .iter()
                .map(|mode| {
                    let values = traversals
                        .iter()
                        .map(|t| {
                            median_of(
                                overhead
                                    .iter()
                                    .filter(|r| &r.traversal == t && r.mode == *mode)
                                    .copied(),
                                field,
                            )
                        })
                        .collect();
                    (format!("snapshots {mode}"), values)
                })
                .collect();
            plot::grouped_bars(&out.join(stem), title, "ms (median)", &traversals, &series)?;
        }
    }
    for backend in backends(records) {
        let records = of_backend(records, &backend);
        let Some(fit) = Fit::of(&records) else {
            continue;
        };
        let as_of: Vec<&ThorRecord> = records.iter().collect();
        let delays: Vec<f64> = distinct(as_of.iter().map(|r| r.delay_ms.to_bits()))
            .into_iter()
            .map(f64::from_bits)
            .collect();
        let line = |mode: &str, field: fn(&ThorRecord) -> f64| -> Vec<(f64, f64)> {
            delays
                .iter()
                .map(|&d| {
                    let value = median_of(
                        as_of
                            .iter()
                            .filter(|r| r.delay_ms == d && r.mode == mode)
                            .copied(),
                        field,
                    );
                    (d, value)
                })
                .collect()
        };
        let reads = line("as-of", |r| r.archive_reads as f64);
        let fitted: Vec<(f64, f64)> = reads
            .iter()
            .map(|&(d, n)| (d, fit.base_ms + n * d))
            .collect();
        // The local archive's plot keeps the name it always had.
        let stem = match (records[0].backend.as_str(), records[0].read_ahead) {
            ("local", 0 | 1) => "thor-as-of".to_string(),
            (other, 0 | 1) => format!("thor-as-of-{other}"),
            (other, copies) => format!("thor-as-of-{other}-read-ahead-{copies}"),
        };
        plot::lines(
            &out.join(stem),
            &format!(
                "T1 cold as of a snapshot against archive delay, {backend} archive (Moh Fig. \
                 6-5, Table 6.2)"
            ),
            "delay per archive read (ms)",
            "ms (median)",
            &[
                ("current".into(), line("current", |r| r.elapsed_ms)),
                ("as of, measured".into(), line("as-of", |r| r.elapsed_ms)),
                ("as of, a + reads x delay".into(), fitted),
            ],
        )?;
    }
    Ok(())
}
