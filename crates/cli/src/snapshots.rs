//! `snapshot`, `snapshots` and `dump --as-of/--snapshot`: taking, listing, deleting and
//! reading snapshots from the command line.

use crate::security::{ArchiveArgs, ClientSecurityArgs};
use lodestore::{AsOf, Error, Options, OverlayFileSystem, RealFileSystem, Result, Snapshot, Store};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where the store is: a folder (with its archive), or a server.
pub struct Target<'a> {
    pub path: Option<&'a Path>,
    pub connect: Option<&'a str>,
    pub security: &'a ClientSecurityArgs,
    pub archive: &'a ArchiveArgs,
}

impl Target<'_> {
    /// The store, opened for writing (`snapshot`) or over an in-memory overlay that leaves
    /// its files untouched (`snapshots`, `dump`).
    fn open(&self, writes: bool) -> Result<Store> {
        if self.connect.is_some() && self.archive.archive.is_some() {
            return Err(Error::InvalidArgument(
                "--archive names a folder store's archive; a server at --connect has its own \
                 (give it to `serve`)"
                    .into(),
            ));
        }
        match (self.path, self.connect) {
            (_, Some(address)) => {
                let credentials = self.security.credentials()?;
                let mut options = Options::new();
                if let Some(token) = credentials.token {
                    options = options.token(token);
                }
                if let Some(tls) = credentials.tls {
                    options = options.tls(tls);
                }
                Store::connect(address, options)
            }
            (Some(path), None) if writes => Store::open(path, self.archive.apply(Options::new())?),
            (Some(path), None) => {
                let overlay = Arc::new(OverlayFileSystem::new(Arc::new(RealFileSystem)));
                let options = Options::new()
                    .file_system(overlay)
                    .background_install(false);
                Store::open(path, self.archive.apply(options)?)
            }
            (None, None) => Err(Error::InvalidArgument(
                "give a store folder PATH or --connect ADDRESS".into(),
            )),
        }
    }
}

/// A time given on the command line: RFC 3339 (`2026-11-25T01:02:03Z`, fractions allowed) or
/// microseconds since the Unix epoch.
pub fn parse_time(text: &str) -> std::result::Result<SystemTime, String> {
    if let Ok(micros) = text.parse::<u64>() {
        return Ok(UNIX_EPOCH + Duration::from_micros(micros));
    }
    humantime::parse_rfc3339_weak(text).map_err(|e| {
        format!(
            "{text:?} is neither an RFC 3339 time (2026-11-25T01:02:03Z) nor microseconds \
             since the Unix epoch: {e}"
        )
    })
}

fn show_time(time_us: u64) -> String {
    humantime::format_rfc3339_micros(UNIX_EPOCH + Duration::from_micros(time_us)).to_string()
}

fn json(snapshot: &Snapshot) -> serde_json::Value {
    serde_json::json!({
        "id": snapshot.id,
        "time_us": snapshot.time_us,
        "time": show_time(snapshot.time_us),
        "lsn": snapshot.lsn.0,
    })
}

fn line(snapshot: &Snapshot) -> String {
    format!(
        "snapshot {} at {} (log position {})",
        snapshot.id,
        show_time(snapshot.time_us),
        snapshot.lsn.0
    )
}

/// `lodestore snapshot`: takes one, or deletes some.
pub fn snapshot(
    target: &Target<'_>,
    delete: &[u64],
    delete_before: Option<SystemTime>,
    as_json: bool,
) -> Result<ExitCode> {
    let store = target.open(true)?;
    if delete.is_empty() && delete_before.is_none() {
        let taken = store.snapshot()?;
        if as_json {
            println!("{}", json(&taken));
        } else {
            println!("took {}", line(&taken));
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut deleted = Vec::new();
    for &id in delete {
        deleted.push(store.delete_snapshot(id)?);
    }
    if let Some(before) = delete_before {
        deleted.extend(store.delete_snapshots_before(before)?);
    }
    if as_json {
        let list: Vec<_> = deleted.iter().map(json).collect();
        println!("{}", serde_json::Value::Array(list));
    } else if deleted.is_empty() {
        println!("no snapshot was taken before that time");
    } else {
        for snapshot in &deleted {
            println!("deleted {}", line(snapshot));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `lodestore snapshots`: lists them, with the archive's figures for a local store.
pub fn list(target: &Target<'_>, as_json: bool) -> Result<ExitCode> {
    let store = target.open(false)?;
    let snapshots = store.snapshots()?;
    let stats = store.snapshot_stats();
    if as_json {
        let list: Vec<_> = snapshots.iter().map(json).collect();
        let mut report = serde_json::json!({ "snapshots": list });
        if let Some(stats) = stats {
            report["archive_bytes"] = stats.archive_bytes.into();
            report["snapshot_log_bytes"] = stats.snapshot_log_bytes.into();
            report["copies_waiting"] = (stats.staged_copies as u64).into();
        }
        println!("{report}");
        return Ok(ExitCode::SUCCESS);
    }
    if snapshots.is_empty() {
        println!("no snapshots");
    }
    for snapshot in &snapshots {
        println!("{}", line(snapshot));
    }
    if let Some(stats) = stats {
        println!(
            "archive {} bytes; snapshot log {} bytes ({} page copies waiting for the archive)",
            stats.archive_bytes, stats.snapshot_log_bytes, stats.staged_copies
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `lodestore dump PATH --snapshot ID | --as-of TIME`: every object as it was, in the format
/// of `dump`, so two dumps compare with `diff`.
pub fn dump(path: &Path, archive: &ArchiveArgs, at: AsOf, as_json: bool) -> Result<ExitCode> {
    let target = Target {
        path: Some(path),
        connect: None,
        security: &ClientSecurityArgs::default(),
        archive,
    };
    let store = target.open(false)?;
    let mut session = store.session()?;
    let mut txn = session.begin_as_of(at)?;
    let roots = txn.roots()?;
    let mut objects = Vec::new();
    txn.for_each_object(|object| {
        objects.push(object);
        Ok(())
    })?;
    txn.finish()?;
    crate::inspect::print_dump(&roots, objects.into_iter().map(Ok), as_json)?;
    Ok(ExitCode::SUCCESS)
}
