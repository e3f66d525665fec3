//! Tables and plots of the OO7 (QuickStore) experiments.

use super::{distinct, fmt_ms, number_name, plot, spread, table, Titled};
use crate::record::RunRecord;
use lodestore::Result;
use std::path::Path;

fn kib(bytes: u64) -> String {
    format!("{}", bytes / 1024)
}

/// One table per preset, traversal, recovery buffer and client count; rows are schemes.
pub fn tables(records: &[RunRecord]) -> Vec<Titled> {
    let oo7: Vec<&RunRecord> = records.iter().filter(|r| r.experiment == "oo7").collect();
    let mut out = Vec::new();
    for key in distinct(oo7.iter().map(|r| {
        (
            r.preset.clone(),
            r.traversal.clone(),
            r.recovery_buffer_bytes,
            r.clients,
        )
    })) {
        let group: Vec<&&RunRecord> = oo7
            .iter()
            .filter(|r| {
                (
                    r.preset.clone(),
                    r.traversal.clone(),
                    r.recovery_buffer_bytes,
                    r.clients,
                ) == key
            })
            .collect();
        let (preset, traversal, buffer, clients) = key;
        let mut titled = table(
            format!(
                "OO7 {traversal} on {preset}, recovery buffer {} KiB, {clients} client(s): medians per transaction",
                buffer / 1024
            ),
            [
                "scheme", "ms", "min-max ms", "txn/s", "retries", "updates", "distinct", "log records", "log KiB",
                "pages shipped", "log pages shipped", "server log pages", "traps", "copied KiB",
            ]
            .map(String::from)
            .to_vec(),
        );
        for scheme in distinct(group.iter().map(|r| r.scheme.clone())) {
            let runs: Vec<&&&RunRecord> = group.iter().filter(|r| r.scheme == scheme).collect();
            let elapsed = spread(runs.iter().map(|r| r.elapsed_ms));
            let med = |f: &dyn Fn(&RunRecord) -> u64| {
                spread(runs.iter().map(|r| f(r) as f64)).median as u64
            };
            let throughput = clients as f64 * 1000.0 / elapsed.median.max(1e-9);
            titled.table.add_row(vec![
                scheme.clone(),
                fmt_ms(elapsed.median),
                format!("{}-{}", fmt_ms(elapsed.min), fmt_ms(elapsed.max)),
                format!("{throughput:.1}"),
                runs.iter().map(|r| r.retries).sum::<u32>().to_string(),
                med(&|r| r.updates).to_string(),
                med(&|r| r.distinct_objects_modified).to_string(),
                med(&|r| r.log_records).to_string(),
                kib(med(&|r| r.log_bytes)),
                med(&|r| r.pages_shipped).to_string(),
                med(&|r| r.log_pages_shipped).to_string(),
                format!(
                    "{:.1}",
                    spread(runs.iter().map(|r| r.server_log_pages_written)).median
                ),
                med(&|r| r.traps).to_string(),
                kib(med(&|r| r.bytes_copied)),
            ]);
        }
        out.push(titled);
    }
    out
}

/// QuickStore figures 4-18: per traversal and recovery buffer, response time per scheme (or
/// response time and throughput against clients when several client counts ran), and pages and
/// log pages shipped per transaction (figures 9 and 14).
pub fn plots(records: &[RunRecord], out: &Path) -> Result<Vec<String>> {
    let oo7: Vec<&RunRecord> = records.iter().filter(|r| r.experiment == "oo7").collect();
    let mut written = Vec::new();
    for (preset, traversal, buffer) in distinct(oo7.iter().map(|r| {
        (
            r.preset.clone(),
            r.traversal.clone(),
            r.recovery_buffer_bytes,
        )
    })) {
        let group: Vec<&&RunRecord> = oo7
            .iter()
            .filter(|r| {
                r.preset == preset && r.traversal == traversal && r.recovery_buffer_bytes == buffer
            })
            .collect();
        let schemes = distinct(group.iter().map(|r| r.scheme.clone()));
        let clients = distinct(group.iter().map(|r| r.clients));
        let buffer_name = number_name(buffer as f64 / (1 << 20) as f64);
        let stem = format!("oo7-{preset}-{traversal}-rb{buffer_name}MiB");
        let median = |scheme: &str, c: u32, f: &dyn Fn(&RunRecord) -> f64| {
            spread(
                group
                    .iter()
                    .filter(|r| r.scheme == scheme && r.clients == c)
                    .map(|r| f(r)),
            )
            .median
        };
        let title_tail = format!("{traversal}, {preset}, recovery buffer {buffer_name} MiB");
        if clients.len() > 1 {
            let response: Vec<(String, Vec<(f64, f64)>)> = schemes
                .iter()
                .map(|s| {
                    (
                        s.clone(),
                        clients
                            .iter()
                            .map(|&c| (c as f64, median(s, c, &|r| r.elapsed_ms) / 1e3))
                            .collect(),
                    )
                })
                .collect();
            plot::lines(
                &out.join(format!("{stem}-response")),
                &format!("Response time: {title_tail}"),
                "clients",
                "seconds per transaction",
                &response,
            )?;
            let throughput: Vec<(String, Vec<(f64, f64)>)> = schemes
                .iter()
                .map(|s| {
                    (
                        s.clone(),
                        clients
                            .iter()
                            .map(|&c| {
                                (
                                    c as f64,
                                    c as f64 * 60_000.0 / median(s, c, &|r| r.elapsed_ms).max(1e-9),
                                )
                            })
                            .collect(),
                    )
                })
                .collect();
            plot::lines(
                &out.join(format!("{stem}-throughput")),
                &format!("Throughput: {title_tail}"),
                "clients",
                "transactions per minute",
                &throughput,
            )?;
            written.push(format!("{stem}-response"));
            written.push(format!("{stem}-throughput"));
        } else {
            let c = clients[0];
            let elapsed = vec![(
                "median ms".to_string(),
                schemes
                    .iter()
                    .map(|s| median(s, c, &|r| r.elapsed_ms))
                    .collect(),
            )];
            plot::grouped_bars(
                &out.join(format!("{stem}-response")),
                &format!("Response time: {title_tail}"),
                "ms per transaction",
                &schemes,
                &elapsed,
            )?;
            written.push(format!("{stem}-response"));
        }
        let c = clients[0];
        let shipped = vec![
            (
                "pages shipped (data + log)".to_string(),
                schemes
                    .iter()
                    .map(|s| median(s, c, &|r| (r.pages_shipped + r.log_pages_shipped) as f64))
                    .collect(),
            ),
            (
                "log pages shipped".to_string(),
                schemes
                    .iter()
                    .map(|s| median(s, c, &|r| r.log_pages_shipped as f64))
                    .collect(),
            ),
            (
                "server log pages written".to_string(),
                schemes
                    .iter()
                    .map(|s| median(s, c, &|r| r.server_log_pages_written))
                    .collect(),
            ),
        ];
        plot::grouped_bars(
            &out.join(format!("{stem}-pages")),
            &format!("Pages per transaction: {title_tail}"),
            "pages",
            &schemes,
            &shipped,
        )?;
        written.push(format!("{stem}-pages"));
    }
    Ok(written)
}
