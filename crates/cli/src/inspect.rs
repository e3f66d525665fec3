//! `init`, `info`, `check` and `dump`.

use lodestore::{Options, RealFileSystem, Result, Store, StoredObject};
use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::ExitCode;

pub fn init(path: &Path, page_size: usize) -> Result<ExitCode> {
    let store = Store::create(path, Options::new().page_size(page_size))?;
    println!(
        "created store {} with {}-byte pages",
        store.path().display(),
        store.page_size()
    );
    Ok(ExitCode::SUCCESS)
}

/// Opens the store once, which recovers it from its log if it was not closed cleanly and leaves
/// a data file that holds every committed change; the readers below read that file.
pub fn recover(path: &Path) -> Result<()> {
    let store = Store::open(path, Options::new())?;
    let report = store.restart_report().clone();
    drop(store);
    if report.losers > 0 || report.redo_applied > 0 || report.discarded_bytes > 0 {
        eprintln!(
            "recovered: {} changes redone, {} unfinished transactions rolled back, {} bytes of a torn log tail dropped",
            report.redo_applied, report.losers, report.discarded_bytes
        );
    }
    Ok(())
}

pub fn info(path: &Path, json: bool) -> Result<ExitCode> {
    recover(path)?;
    let info = lodestore::info(&RealFileSystem, path)?;
    // Counters are a report: a damaged file is named, and the rest is still shown.
    let counters = lodestore::session_counters(&RealFileSystem, path);
    if json {
        let mut value = serde_json::to_value(&info).expect("info serialises");
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
    println!("pages          {}", info.pages);
    for (kind, count) in &info.pages_by_kind {
        println!("  {kind:<12} {count}");
    }
    println!(
        "objects        {} ({} large), {} bytes",
        info.objects, info.large_objects, info.object_bytes
    );
    println!("free space     {} bytes", info.free_bytes);
    println!("named roots    {}", info.roots);
    println!("last LSN       {}", info.last_lsn);
    match counters {
        Ok(counters) if counters.is_empty() => {}
        Ok(counters) => print_counters(&counters),
        Err(e) => eprintln!("session counters: {e}"),
    }
    Ok(ExitCode::SUCCESS)
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

pub fn check(path: &Path, recover_first: bool) -> Result<ExitCode> {
    let mut recovery_failed = false;
    if recover_first {
        match recover(path) {
            Ok(()) => {}
            // A store that cannot even be opened is reported as such; one whose recovery fails
            // is still checked as it lies on disk.
            Err(
                e @ (lodestore::Error::NotAStore { .. }
                | lodestore::Error::StoreLocked { .. }
                | lodestore::Error::UnsupportedFormat { .. }
                | lodestore::Error::CorruptSuperblock { .. }),
            ) => return Err(e),
            Err(e) => {
                println!("problem: recovery failed: {e}");
                recovery_failed = true;
            }
        }
    }
    let report = lodestore::check(&RealFileSystem, path)?;
    for note in &report.notes {
        println!("note: {note}");
    }
    for problem in &report.problems {
        println!("problem: {}", problem.message);
    }
    println!(
        "{}: {} pages, {} objects checked; {} problems",
        report.path,
        report.pages_checked,
        report.objects,
        report.problems.len() + usize::from(recovery_failed)
    );
    Ok(if report.is_sound() && !recovery_failed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

pub fn dump(path: &Path, json: bool) -> Result<ExitCode> {
    recover(path)?;
    let roots = lodestore::roots(&RealFileSystem, path)?;
    let stdout = std::io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    let io = |e: std::io::Error| lodestore::Error::io("standard output", "write", e);
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
        .map_err(io)?;
        let mut first = true;
        lodestore::objects(&RealFileSystem, path, |object| {
            let separator = if first { "" } else { "," };
            first = false;
            writeln!(out, "{separator}{}", object_json(&object)).map_err(io)
        })?;
        writeln!(out, "]}}").map_err(io)?;
    } else {
        for (name, oid) in &roots {
            writeln!(out, "root {name} {}", oid.0).map_err(io)?;
        }
        lodestore::objects(&RealFileSystem, path, |object| {
            writeln!(
                out,
                "object {} type {} length {} {}",
                object.oid.0,
                object.type_id.0,
                object.bytes.len(),
                hex::encode(&object.bytes)
            )
            .map_err(io)
        })?;
    }
    out.flush().map_err(io)?;
    Ok(ExitCode::SUCCESS)
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
