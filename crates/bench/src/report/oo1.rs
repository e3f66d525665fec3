//! Tables and plots of the OO1 (Hosking, Brown & Moss) experiments.

use super::{distinct, fmt_ms, number_name, plot, spread, table, Titled};
use crate::experiments::oo1::fit_line;
use crate::record::RunRecord;
use lodestore::Result;
use std::path::Path;

fn of<'a>(records: &'a [RunRecord], experiment: &str) -> Vec<&'a RunRecord> {
    records
        .iter()
        .filter(|r| r.experiment == experiment)
        .collect()
}

fn probabilities(records: &[&RunRecord]) -> Vec<f64> {
    let mut ps: Vec<f64> = distinct(
        records
            .iter()
            .filter_map(|r| r.update_probability)
            .map(f64::to_bits),
    )
    .into_iter()
    .map(f64::from_bits)
    .collect();
    ps.sort_by(f64::total_cmp);
    ps
}

/// Median elapsed ms of the update runs of `scheme` at `p` and `temperature`, at `iteration`
/// (or all iterations when `None`).
fn update_ms(
    updates: &[&RunRecord],
    scheme: &str,
    p: f64,
    temperature: &str,
    iteration: Option<u32>,
) -> f64 {
    spread(
        updates
            .iter()
            .filter(|r| {
                r.scheme == scheme
                    && r.update_probability == Some(p)
                    && r.temperature == temperature
            })
            .filter(|r| iteration.is_none() || r.iteration == iteration)
            .map(|r| r.elapsed_ms),
    )
    .median
}

/// Per scheme and update probability: the line y = a + b k through the long-running runs.
pub fn long_running_fits(records: &[RunRecord]) -> Vec<(String, f64, f64, f64)> {
    let long = of(records, "oo1-long");
    let mut fits = Vec::new();
    for scheme in distinct(long.iter().map(|r| r.scheme.clone())) {
        for p in probabilities(&long) {
            let points: Vec<(f64, f64)> = long
                .iter()
                .filter(|r| r.scheme == scheme && r.update_probability == Some(p))
                .filter_map(|r| Some((r.iterations_per_commit? as f64, r.elapsed_ms)))
                .collect();
            if let Some((a, b)) = fit_line(&points) {
                fits.push((scheme.clone(), p, a, b));
            }
        }
    }
    fits
}

pub fn tables(records: &[RunRecord]) -> Vec<Titled> {
    let mut out = Vec::new();
    let lookup = of(records, "oo1-lookup");
    let traversal = of(records, "oo1-traversal");
    if !lookup.is_empty() {
        let mut t = table(
            "OO1 lookup and traversal (Hosking figures 2-3): ms, cold = iteration 1, warm = median of 2-10",
            ["scheme", "lookup cold", "lookup warm", "traversal cold", "traversal warm", "pages fetched cold"].map(String::from).to_vec(),
        );
        for scheme in distinct(lookup.iter().map(|r| r.scheme.clone())) {
            let pick = |set: &[&RunRecord], cold: bool| {
                spread(
                    set.iter()
                        .filter(|r| r.scheme == scheme && (r.iteration == Some(1)) == cold)
                        .map(|r| r.elapsed_ms),
                )
                .median
            };
            let fetched: u64 = lookup
                .iter()
                .filter(|r| r.scheme == scheme && r.iteration == Some(1))
                .map(|r| r.pages_fetched)
                .max()
                .unwrap_or(0);
            t.table.add_row(vec![
                scheme.clone(),
                fmt_ms(pick(&lookup, true)),
                fmt_ms(pick(&lookup, false)),
                fmt_ms(pick(&traversal, true)),
                fmt_ms(pick(&traversal, false)),
                fetched.to_string(),
            ]);
        }
        out.push(t);
    }
    let updates = of(records, "oo1-update");
    let ps = probabilities(&updates);
    let schemes = distinct(updates.iter().map(|r| r.scheme.clone()));
    for (temperature, iteration, label) in [
        ("cold", Some(1), "cold (iteration 1, figure 4)"),
        ("warm", Some(10), "warm (iteration 10, figure 5)"),
        ("hot", None, "hot (median of 10, figure 6)"),
    ] {
        if updates.is_empty() {
            break;
        }
        let mut header = vec!["scheme".to_string()];
        header.extend(ps.iter().map(|p| format!("p={p}")));
        let mut t = table(format!("OO1 update, ms per transaction, {label}"), header);
        for scheme in &schemes {
            let mut row = vec![scheme.clone()];
            row.extend(
                ps.iter()
                    .map(|&p| fmt_ms(update_ms(&updates, scheme, p, temperature, iteration))),
            );
            t.table.add_row(row);
        }
        out.push(t);
    }
    for &p in &ps {
        let mut t = table(
            format!(
                "OO1 hot update at p={p}: ms by Hosking's phases (figures 7-10), medians of 10"
            ),
            [
                "scheme",
                "running",
                "old",
                "new",
                "write",
                "other",
                "total",
                "log records",
                "log KiB",
            ]
            .map(String::from)
            .to_vec(),
        );
        for scheme in &schemes {
            let runs: Vec<&&RunRecord> = updates
                .iter()
                .filter(|r| {
                    r.scheme == *scheme && r.update_probability == Some(p) && r.temperature == "hot"
                })
                .collect();
            let med = |f: &dyn Fn(&RunRecord) -> f64| spread(runs.iter().map(|r| f(r))).median;
            t.table.add_row(vec![
                scheme.clone(),
                fmt_ms(med(&|r| r.running_ms)),
                fmt_ms(med(&|r| r.old_ms)),
                fmt_ms(med(&|r| r.new_ms)),
                fmt_ms(med(&|r| r.write_ms)),
                fmt_ms(med(&|r| r.other_ms)),
                fmt_ms(med(&|r| r.elapsed_ms)),
                format!("{:.0}", med(&|r| r.log_records as f64)),
                format!("{:.0}", med(&|r| r.log_bytes as f64) / 1024.0),
            ]);
        }
        out.push(t);
    }
    let fits = long_running_fits(records);
    if !fits.is_empty() {
        let long_ps = distinct(fits.iter().map(|f| f.1.to_bits()));
        let mut header = vec!["scheme".to_string()];
        for p in &long_ps {
            let p = f64::from_bits(*p);
            header.push(format!("a ms p={p}"));
            header.push(format!("b ms p={p}"));
        }
        let mut t = table(
            "OO1 long-running hot updates: y = a + b k for k traversals per commit (figures 13-14)",
            header,
        );
        for scheme in distinct(fits.iter().map(|f| f.0.clone())) {
            let mut row = vec![scheme.clone()];
            for p in &long_ps {
                match fits.iter().find(|f| f.0 == scheme && f.1.to_bits() == *p) {
                    Some(f) => row.extend([fmt_ms(f.2), format!("{:.3}", f.3)]),
                    None => row.extend([String::new(), String::new()]),
                }
            }
            t.table.add_row(row);
        }
        out.push(t);
    }
    out
}

pub fn plots(records: &[RunRecord], out: &Path) -> Result<Vec<String>> {
    let mut written = Vec::new();
    for (experiment, name, figure) in [
        ("oo1-lookup", "lookup", 2),
        ("oo1-traversal", "traversal", 3),
    ] {
        let set = of(records, experiment);
        if set.is_empty() {
            continue;
        }
        let series: Vec<(String, Vec<(f64, f64)>)> = distinct(set.iter().map(|r| r.scheme.clone()))
            .into_iter()
            .map(|scheme| {
                let points = (1..=10u32)
                    .filter_map(|i| {
                        let runs: Vec<f64> = set
                            .iter()
                            .filter(|r| r.scheme == scheme && r.iteration == Some(i))
                            .map(|r| r.elapsed_ms)
                            .collect();
                        (!runs.is_empty()).then(|| (i as f64, spread(runs).median))
                    })
                    .collect();
                (scheme, points)
            })
            .collect();
        let stem = format!("oo1-{name}-iterations");
        plot::lines(
            &out.join(&stem),
            &format!("OO1 {name}: 1 cold, 9 warm iterations (cf. Hosking figure {figure})"),
            "iteration",
            "ms",
            &series,
        )?;
        written.push(stem);
    }
    let updates = of(records, "oo1-update");
    let ps = probabilities(&updates);
    let schemes = distinct(updates.iter().map(|r| r.scheme.clone()));
    for (temperature, iteration, figure) in [
        ("cold", Some(1), 4),
        ("warm", Some(10), 5),
        ("hot", None, 6),
    ] {
        if updates.is_empty() {
            break;
        }
        let series: Vec<(String, Vec<(f64, f64)>)> = schemes
            .iter()
            .map(|s| {
                (
                    s.clone(),
                    ps.iter()
                        .map(|&p| (p, update_ms(&updates, s, p, temperature, iteration)))
                        .collect(),
                )
            })
            .collect();
        let stem = format!("oo1-update-{temperature}");
        plot::lines(
            &out.join(&stem),
            &format!(
                "OO1 {temperature} update vs update probability (cf. Hosking figure {figure})"
            ),
            "update probability",
            "ms per transaction",
            &series,
        )?;
        written.push(stem);
    }
    for &p in &ps {
        let phase = |f: fn(&RunRecord) -> f64| -> Vec<f64> {
            schemes
                .iter()
                .map(|s| {
                    spread(
                        updates
                            .iter()
                            .filter(|r| {
                                r.scheme == *s
                                    && r.update_probability == Some(p)
                                    && r.temperature == "hot"
                            })
                            .map(|r| f(r)),
                    )
                    .median
                })
                .collect()
        };
        let layers = vec![
            ("running".to_string(), phase(|r| r.running_ms)),
            ("old".to_string(), phase(|r| r.old_ms)),
            ("new".to_string(), phase(|r| r.new_ms)),
            ("write".to_string(), phase(|r| r.write_ms)),
            ("other".to_string(), phase(|r| r.other_ms)),
        ];
        let stem = format!("oo1-hot-phases-p{}", number_name(p));
        plot::stacked_bars(
            &out.join(&stem),
            &format!("OO1 hot update, p = {p}: time by phase (cf. Hosking figures 7-10)"),
            "ms per transaction",
            &schemes,
            &layers,
        )?;
        written.push(stem);
    }
    let fits = long_running_fits(records);
    if !fits.is_empty() {
        let fit_schemes = distinct(fits.iter().map(|f| f.0.clone()));
        let long_ps = distinct(fits.iter().map(|f| f.1.to_bits()));
        for (which, stem, figure) in [(3, "oo1-long-slope", 13), (2, "oo1-long-intercept", 14)] {
            let series: Vec<(String, Vec<f64>)> = long_ps
                .iter()
                .map(|p| {
                    let values = fit_schemes
                        .iter()
                        .map(|s| {
                            fits.iter()
                                .find(|f| f.0 == *s && f.1.to_bits() == *p)
                                .map(|f| if which == 3 { f.3 } else { f.2 })
                                .unwrap_or(0.0)
                        })
                        .collect();
                    (format!("p = {}", f64::from_bits(*p)), values)
                })
                .collect();
            let title = if which == 3 {
                "slope b: ms per hot traversal"
            } else {
                "intercept a: ms per commit"
            };
            plot::grouped_bars(
                &out.join(stem),
                &format!("OO1 long-running updates, {title} (cf. Hosking figure {figure})"),
                "ms",
                &fit_schemes,
                &series,
            )?;
            written.push(stem.to_string());
        }
    }
    Ok(written)
}
