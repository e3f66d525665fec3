//! `init`, `info`, `check` and `dump`.

use lodestore::multilevel::Strategy;
use lodestore::{Options, RealFileSystem, RecoveredView, Result, Store, StoredObject};
use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

pub fn init(
    path: &Path,
    page_size: usize,
    log_segment_bytes: u64,
    snapshots: bool,
    method: lodestore::RecoveryMethodKind,
    strategy: Option<Strategy>,
    log_streams: usize,
) -> Result<ExitCode> {
    let mut options = Options::new()
        .page_size(page_size)
        .log_segment_bytes(log_segment_bytes)
        .snapshots(snapshots)
        .recovery_method(method)
        .log_streams(log_streams);
    if let Some(strategy) = strategy {
        options = options.multi_level_strategy(strategy);
    }
    let store = Store::create(path, options)?;
    let streams = if method.is_main_memory() {
        format!(", {log_streams} log stream(s)")
    } else {
        String::new()
    };
    println!(
        "created store {} with {}-byte pages, recovery method {}{streams}, multi-level strategy {}",
        store.path().display(),
        store.page_size(),
        store.recovery_method(),
        store.multi_level_strategy()
    );
    Ok(ExitCode::SUCCESS)
}

/// `init --method`: a recovery method, or a multi-level strategy standing for the
/// database-cache method (`dbcache`) with that strategy (refused beside a different
/// `--strategy`).
pub fn init_method(
    method: &str,
    strategy: Option<Strategy>,
) -> Result<(lodestore::RecoveryMethodKind, Option<Strategy>)> {
    match method.parse::<Strategy>() {
        Ok(named) => match strategy {
            Some(other) if other != named => Err(lodestore::Error::InvalidArgument(format!(
                "--method {named} and --strategy {other} name two strategies"
            ))),
            _ => Ok((lodestore::RecoveryMethodKind::Dbcache, Some(named))),
        },
        Err(_) => method
            .parse::<lodestore::RecoveryMethodKind>()
            .map_err(|_| {
                lodestore::Error::InvalidArgument(format!(
                    "unknown --method {method:?}: a recovery method ({}) or a multi-level \
                     strategy (s1, s2, s2ps)",
                    lodestore::RecoveryMethodKind::ALL
                        .map(|m| m.name())
                        .join(", ")
                ))
            })
            .map(|m| (m, strategy)),
    }
}

/// `lodestore recover`: opens the store for writing once, which recovers it from its log if it
/// was not closed cleanly, and closes it, leaving a data file that holds every committed change.
pub fn recover(path: &Path, restart_level: lodestore::RestartLevel) -> Result<ExitCode> {
    let started = std::time::Instant::now();
    let store = Store::open(path, Options::new().restart_level(restart_level))?;
    let opened_us = started.elapsed().as_micros() as u64;
    let report = store.restart_report().clone();
    drop(store);
    if report.needed_recovery() {
        println!(
            "recovered {}: {}",
            path.display(),
            describe_restart(&report)
        );
    } else {
        println!(
            "{}: closed cleanly; recovery had nothing to do",
            path.display()
        );
    }
    println!("{}", describe_restart_time(opened_us, &report));
    Ok(ExitCode::SUCCESS)
}

fn describe_restart(report: &lodestore::RestartReport) -> String {
    format!(
        "{} changes redone, {} page images installed, {} unfinished transactions rolled back \
         ({} changes undone), {} bytes of a torn log tail dropped, {} unused pages repaired",
        report.redo_applied,
        report.images_installed,
        report.losers,
        report.records_undone,
        report.discarded_bytes,
        report.pages_repaired
    )
}

/// How long opening the store took with its restart, split as the main-memory methods split
/// it.
fn describe_restart_time(opened_us: u64, report: &lodestore::RestartReport) -> String {
    let ms = |us: u64| us as f64 / 1e3;
    let mut line = format!("opened and recovered in {:.1} ms", ms(opened_us));
    if report.backup_load_us + report.log_read_us + report.replay_us > 0 {
        line += &format!(
            ": backup load {:.1} ms, log read {:.1} ms (the longest stream), replay after the \
             reads {:.1} ms",
            ms(report.backup_load_us),
            ms(report.log_read_us),
            ms(report.replay_us)
        );
    }
    line
}

/// The store as recovery would leave it, in memory: `info` and `dump` read it without writing
/// a byte of the store. Says so on standard error when the store was not closed cleanly.
fn recovered_view(path: &Path) -> Result<RecoveredView> {
    let view = lodestore::recover_in_memory(Arc::new(RealFileSystem), path)
        .map_err(|error| with_salvage_hint(error, path))?;
    if view.restart().needed_recovery() {
        eprintln!(
            "note: {} was not closed cleanly; shown as recovery leaves it ({}), in memory only: \
             `lodestore recover {}` writes it",
            path.display(),
            describe_restart(view.restart()),
            path.display()
        );
    }
    Ok(view)
}

/// A store whose log cannot be read can still give up its objects: say how.
fn with_salvage_hint(error: lodestore::Error, path: &Path) -> lodestore::Error {
    match error {
        lodestore::Error::CorruptLog {
            path: file,
            offset,
            reason,
        } => lodestore::Error::CorruptLog {
            path: file,
            offset,
            reason: format!(
                "{reason} (`lodestore check --no-recover {0}` shows the data file as it \
                     lies; `lodestore salvage {0} NEW` copies every readable object out)",
                path.display()
            ),
        },
        other => other,
    }
}

pub fn info(path: &Path, json: bool) -> Result<ExitCode> {
    let view = recovered_view(path)?;
    let mut info = lodestore::info(view.file_system(), path)?;
    // The log as the last run left it (the view's was rewritten by recovery's checkpoint).
    info.log = lodestore::log_summary(&RealFileSystem, path)?;
    // Counters are a report: a damaged file is named, and the rest is still shown.
    let counters = lodestore::session_counters(&RealFileSystem, path);
    let snapshots = lodestore::snapshot_summary(view.shared_file_system(), path)?;
    if json {
        let mut value = serde_json::to_value(&info).expect("info serialises");
        if let Some((list, stats)) = &snapshots {
            value["snapshots"] = serde_json::json!({
                "count": list.len(),
                "first_time_us": list.first().map(|s| s.time_us),
                "last_time_us": list.last().map(|s| s.time_us),
                "archive_bytes": stats.archive_bytes,
                "snapshot_log_bytes": stats.snapshot_log_bytes,
                "copies_waiting": stats.staged_copies,
            });
        }
        value["session_counters"] = match &counters {
            Ok(counters) => serde_json::to_value(counters).expect("counters serialise"),
            Err(e) => serde_json::json!({ "error": e.to_string() }),
        };
        println!(
            "{}",
            serde_json::to_string_pretty(&value).expect("info serialises")
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!("store          {}", info.path);
    println!("format version {}", info.format_version);
    println!("page size      {} bytes", info.page_size);
    println!("recovery       {}", info.recovery_method);
    println!("multi-level    strategy {}", info.multi_level_strategy);
    println!("pages          {}", info.pages);
    for (kind, count) in &info.pages_by_kind {
        println!("  {kind:<12} {count}");
    }
    println!(
        "objects        {} ({} large), {} bytes",
        info.objects, info.large_objects, info.object_bytes
    );
    println!("free space     {} bytes", info.free_bytes);
    let defaults = lodestore::Options::new();
    if let Some(factor) = defaults.outgrown_by(info.pages * info.page_size as u64) {
        println!(
            "caches         the store is {factor:.1} times the default caches ({} MiB client \
             cache and {} MiB server pool): most page visits will read the data file; open it \
             with larger Options::client_cache_bytes and server_pool_bytes",
            lodestore::default_client_cache_bytes() >> 20,
            lodestore::default_server_pool_bytes() >> 20
        );
    }
    println!("named roots    {}", info.roots);
    println!("last LSN       {}", info.last_lsn);
    if let Some(dl) = &info.differential {
        println!(
            "checkpoint     {} (differential logging): backup-{}.image, {} pages, BackupID {}",
            dl.checkpoint,
            dl.backup,
            dl.backup_pages,
            u8::from(dl.backup_id)
        );
        for (s, stream) in dl.streams.iter().enumerate() {
            println!(
                "  stream {s:<3}   begin mark {}, end mark {}, ends at {}; {} records to replay",
                stream.begin, stream.end_mark, stream.log_end, stream.records
            );
        }
    }
    if let Some(log) = &info.log {
        print_log(log);
    }
    if let Some((list, stats)) = &snapshots {
        println!(
            "snapshots      {} (ids {}); archive {} bytes, snapshot log {} bytes",
            list.len(),
            match (list.first(), list.last()) {
                (Some(first), Some(last)) => format!("{} to {}", first.id, last.id),
                _ => "none".into(),
            },
            stats.archive_bytes,
            stats.snapshot_log_bytes
        );
    }
    match counters {
        Ok(counters) if counters.is_empty() => {}
        Ok(counters) => print_counters(&counters),
        Err(e) => eprintln!("session counters: {e}"),
    }
    Ok(ExitCode::SUCCESS)
}

/// The server's log from its last checkpoint, level 0 and level 1 apart.
fn print_log(log: &lodestore::LogSummary) {
    let torn = if log.torn_bytes > 0 {
        format!(" ({} bytes of a torn last write after it)", log.torn_bytes)
    } else {
        String::new()
    };
    println!(
        "log            from the checkpoint at {} to {}{torn}",
        log.checkpoint_lsn, log.end_lsn
    );
    println!(
        "  level 0      {} records of the recovery method ({} commits), {} after-image records",
        log.level0_records, log.commits, log.after_image_records
    );
    println!(
        "  level 1      {} undo, {} compensation, {} committed and {} aborted ends, {} active lists",
        log.undo_records,
        log.compensation_records,
        log.ends_committed,
        log.ends_aborted,
        log.active_lists
    );
    if log.unfinished > 0 {
        let ids: Vec<String> = log.unfinished_ids.iter().map(u64::to_string).collect();
        let more = if log.unfinished as usize > ids.len() {
            ", ..."
        } else {
            ""
        };
        println!(
            "  unfinished   {} level-1 transactions for the warm start to compensate: {}{more}",
            log.unfinished,
            ids.join(", ")
        );
    }
    for problem in &log.problems {
        println!("  problem      {problem}");
    }
}

/// The session counters kept with the store, a column per scheme.
fn print_counters(counters: &lodestore::CountersByScheme) {
    let names: std::collections::BTreeSet<&String> =
        counters.values().flat_map(|c| c.keys()).collect();
    let mut table = comfy_table::Table::new();
    table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
    let mut header = vec!["sessions of earlier runs".to_string()];
    header.extend(counters.keys().cloned());
    table.set_header(header);
    for name in names {
        let mut row = vec![name.clone()];
        row.extend(
            counters
                .values()
                .map(|c| c.get(name).copied().unwrap_or(0).to_string()),
        );
        table.add_row(row);
    }
    println!("{table}");
}

/// `lodestore check`: the data file as it lies on disk, then (unless `--no-recover`) the store
/// as recovery would leave it, in memory. Writes nothing. Damage on disk that recovery would
/// rewrite is still reported: as a repair when the store was left by a crash (recovery is
/// expected to rewrite what a crash tore), as a problem when it was closed cleanly (then
/// nothing but damage explains it, and opening the store would hide it).
pub fn check(path: &Path, recover_first: bool) -> Result<ExitCode> {
    let on_disk = lodestore::check(&RealFileSystem, path)?;
    for note in &on_disk.notes {
        println!("note: {note}");
    }
    if !recover_first {
        for problem in &on_disk.problems {
            println!("problem: {}", problem.message);
        }
        return Ok(summary(&on_disk, on_disk.problems.len()));
    }
    let view = match lodestore::recover_in_memory(Arc::new(RealFileSystem), path) {
        Ok(view) => view,
        // A store that cannot even be opened is reported as such; one whose recovery fails
        // is still checked as it lies on disk.
        Err(
            e @ (lodestore::Error::NotAStore { .. }
            | lodestore::Error::StoreLocked { .. }
            | lodestore::Error::UnsupportedFormat { .. }
            | lodestore::Error::CorruptSuperblock { .. }),
        ) => return Err(e),
        Err(e) => {
            println!("problem: recovery failed: {}", with_salvage_hint(e, path));
            for problem in &on_disk.problems {
                println!("problem: {}", problem.message);
            }
            return Ok(summary(&on_disk, on_disk.problems.len() + 1));
        }
    };
    let recovered = lodestore::check(view.file_system(), path)?;
    let crashed = view.restart().needed_recovery();
    if crashed {
        println!(
            "note: the store was not closed cleanly; recovery (run in memory only; `lodestore \
             recover {}` writes it) would make: {}",
            path.display(),
            describe_restart(view.restart())
        );
        for line in written_by_recovery(&view, recovered.page_size) {
            println!("recovery would {line}");
        }
    }
    let mut problems = 0;
    for problem in &on_disk.problems {
        if recovered.problems.contains(problem) {
            continue;
        }
        if crashed {
            println!("repair: recovery rewrites this: {}", problem.message);
        } else {
            problems += 1;
            println!(
                "problem: {} (on disk, in a store closed cleanly: opening it for writing would \
                 rewrite this and hide the damage)",
                problem.message
            );
        }
    }
    for note in &recovered.notes {
        if !on_disk.notes.contains(note) {
            println!("note: after recovery: {note}");
        }
    }
    for problem in &recovered.problems {
        problems += 1;
        println!("problem: {}", problem.message);
    }
    let code = summary(&recovered, problems);
    if problems == 0 && crashed {
        println!(
            "sound once recovered; the recovery is not written yet (`lodestore recover {}`)",
            path.display()
        );
        return Ok(ExitCode::from(EXIT_NEEDS_RECOVERY));
    }
    Ok(code)
}

/// `check`'s exit code for a store that is sound once recovered, and was not closed cleanly:
/// nothing is wrong, but its data file alone is not the store until `recover` runs.
pub const EXIT_NEEDS_RECOVERY: u8 = 3;

/// What recovery and its closing checkpoint would write, file by file: the data file's pages
/// (as ranges), and for other files the bytes, or that they are created, renamed or removed.
fn written_by_recovery(view: &RecoveredView, page_size: usize) -> Vec<String> {
    const BLOCK: u64 = lodestore::CHANGE_BLOCK_BYTES;
    let mut lines = Vec::new();
    for change in view.changes() {
        match change {
            lodestore::FileChange::Named(what) => lines.push(what),
            lodestore::FileChange::Written { path, blocks } => {
                let is_data = path.file_name().is_some_and(|n| n == "volume-0.data");
                if is_data && page_size > 0 {
                    let pages: std::collections::BTreeSet<u64> = blocks
                        .iter()
                        .map(|b| b * BLOCK / page_size as u64)
                        .collect();
                    lines.push(format!("write {} pages {}", path.display(), ranges(&pages)));
                } else {
                    lines.push(format!(
                        "write {} KiB of {}",
                        blocks.len() as u64 * BLOCK / 1024,
                        path.display()
                    ));
                }
            }
        }
    }
    lines
}

/// `1-3, 7, 9-10` for the set {1, 2, 3, 7, 9, 10}.
fn ranges(numbers: &std::collections::BTreeSet<u64>) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut run: Option<(u64, u64)> = None;
    for &n in numbers {
        run = match run {
            Some((first, last)) if last + 1 == n => Some((first, n)),
            Some((first, last)) => {
                parts.push(span(first, last));
                Some((n, n))
            }
            None => Some((n, n)),
        };
    }
    if let Some((first, last)) = run {
        parts.push(span(first, last));
    }
    parts.join(", ")
}

fn span(first: u64, last: u64) -> String {
    if first == last {
        first.to_string()
    } else {
        format!("{first}-{last}")
    }
}

fn summary(report: &lodestore::CheckReport, problems: usize) -> ExitCode {
    println!(
        "{}: {} pages, {} objects checked; {} problems",
        report.path, report.pages_checked, report.objects, problems
    );
    if problems == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// `lodestore dump`: every readable object of the store as recovery would leave it; a damaged
/// page is named on standard error and skipped, and the exit code is then 1.
pub fn dump(path: &Path, json: bool) -> Result<ExitCode> {
    let view = recovered_view(path)?;
    let fs = view.file_system();
    let mut damaged_pages = 0usize;
    let mut damaged = |error: lodestore::Error| {
        damaged_pages += 1;
        eprintln!("damaged, skipped: {error}");
        Ok(())
    };
    let roots = match lodestore::roots(fs, path) {
        Ok(roots) => roots,
        Err(error @ lodestore::Error::CorruptPage { .. }) => {
            damaged(error)?;
            Default::default()
        }
        Err(error) => return Err(error),
    };
    let stdout = std::io::stdout();
    let mut out = DumpWriter::begin(BufWriter::new(stdout.lock()), &roots, json)?;
    lodestore::readable_objects(fs, path, |object| out.object(&object), &mut damaged)?;
    out.finish()?;
    if damaged_pages > 0 {
        eprintln!("{damaged_pages} damaged pages skipped");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints a dump of `roots` and `objects` to standard output.
pub fn print_dump(
    roots: &std::collections::BTreeMap<String, lodestore::RawOid>,
    objects: impl IntoIterator<Item = Result<StoredObject>>,
    json: bool,
) -> Result<()> {
    let stdout = std::io::stdout();
    let mut out = DumpWriter::begin(BufWriter::new(stdout.lock()), roots, json)?;
    for object in objects {
        out.object(&object?)?;
    }
    out.finish()
}

/// The dump format: roots, then one object a line (or one JSON document), the same for the
/// current store and for a snapshot, so two dumps compare with `diff`.
struct DumpWriter<W: Write> {
    out: W,
    json: bool,
    first: bool,
}

fn write_error(e: std::io::Error) -> lodestore::Error {
    lodestore::Error::io("standard output", "write", e)
}

impl<W: Write> DumpWriter<W> {
    fn begin(
        mut out: W,
        roots: &std::collections::BTreeMap<String, lodestore::RawOid>,
        json: bool,
    ) -> Result<DumpWriter<W>> {
        if json {
            let roots: serde_json::Map<String, serde_json::Value> = roots
                .iter()
                .map(|(name, oid)| (name.clone(), oid.0.into()))
                .collect();
            write!(
                out,
                "{{\"roots\":{},\"objects\":[",
                serde_json::Value::Object(roots)
            )
            .map_err(write_error)?;
        } else {
            for (name, oid) in roots {
                writeln!(out, "root {name} {}", oid.0).map_err(write_error)?;
            }
        }
        Ok(DumpWriter {
            out,
            json,
            first: true,
        })
    }

    fn object(&mut self, object: &StoredObject) -> Result<()> {
        if self.json {
            let separator = if self.first { "" } else { "," };
            self.first = false;
            writeln!(self.out, "{separator}{}", object_json(object)).map_err(write_error)
        } else {
            writeln!(
                self.out,
                "object {} type {} length {} {}",
                object.oid.0,
                object.type_id.0,
                object.bytes.len(),
                hex::encode(&object.bytes)
            )
            .map_err(write_error)
        }
    }

    fn finish(mut self) -> Result<()> {
        if self.json {
            writeln!(self.out, "]}}").map_err(write_error)?;
        }
        self.out.flush().map_err(write_error)
    }
}

fn object_json(object: &StoredObject) -> serde_json::Value {
    serde_json::json!({
        "oid": object.oid.0,
        "type_id": object.type_id.0,
        "length": object.bytes.len(),
        "large": object.large,
        "bytes": hex::encode(&object.bytes),
    })
}

/// `lodestore salvage`: every readable object of a damaged store copied into a new one.
pub fn salvage(source: &Path, out: &Path, json: bool) -> Result<ExitCode> {
    let salvaged = lodestore::salvage(source, out)?;
    let check = lodestore::check(&RealFileSystem, out)?;
    if json {
        let mut value = serde_json::to_value(&salvaged).expect("report serialises");
        value["check_problems"] = check.problems.len().into();
        println!(
            "{}",
            serde_json::to_string_pretty(&value).expect("report serialises")
        );
        return Ok(ExitCode::SUCCESS);
    }
    let report = &salvaged.report;
    match &salvaged.log_unusable {
        None => println!(
            "log of {} read: the copy holds every committed change",
            source.display()
        ),
        Some(reason) => println!(
            "log of {} unusable ({reason}); the data file was read as it lies: changes since its \
             last checkpoint are not in the copy",
            source.display()
        ),
    }
    for (page, reason) in &report.damaged_pages {
        println!("damaged page {page} left out: {reason}");
    }
    for oid in &report.large_objects_lost {
        println!("large object {oid} left out: a page of it was damaged");
    }
    println!(
        "{} of {} pages copied, {} objects; {} damaged pages, {} large objects lost, {} \
         orphaned pages freed; named roots {}",
        report.pages_copied,
        report.pages_read,
        report.objects_copied,
        report.damaged_pages.len(),
        report.large_objects_lost.len(),
        report.orphaned_pages_freed,
        if report.roots_copied {
            "copied"
        } else {
            "lost (their page was damaged)"
        }
    );
    println!(
        "new store {}: {} problems found by check",
        out.display(),
        check.problems.len()
    );
    Ok(if check.is_sound() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
