//! Reading a closed store without serving it: integrity check, figures, and every object.
//! None of these writes to the store; [`recover_in_memory`] gives them a store that was not
//! closed cleanly as recovery would leave it, without writing it either.

use crate::{Options, Store};
use lodestore_core::{Oid, Result};
use lodestore_server::check::CheckReport;
use lodestore_server::inspect::{self, StoreInfo, StoredObject};
use lodestore_server::RestartReport;
use lodestore_storage::overlay::{Change, OverlayFileSystem};
use lodestore_storage::{FileSystem, OpenMode, Volume};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// A store as recovery leaves it, held in memory over its files, which stay untouched: read it
/// through [`RecoveredView::file_system`] with the functions of this module.
pub struct RecoveredView {
    file_system: Arc<OverlayFileSystem>,
    restart: RestartReport,
}

impl RecoveredView {
    /// The store's files with recovery's writes on top (in memory only).
    pub fn file_system(&self) -> &dyn FileSystem {
        self.file_system.as_ref()
    }

    /// The same, shared.
    pub fn shared_file_system(&self) -> Arc<dyn FileSystem> {
        self.file_system.clone()
    }

    /// What recovery found and did.
    pub fn restart(&self) -> &RestartReport {
        &self.restart
    }

    /// Everything opening the store for real would write: files created, renamed and removed,
    /// and the blocks written to each existing file (including the checkpoint every open and
    /// close takes, so a cleanly closed store lists some too).
    pub fn changes(&self) -> Vec<Change> {
        self.file_system.changes()
    }
}

/// Opens the store in `path` read-only, runs its recovery and closing checkpoint into memory,
/// and returns the result. The files beneath are opened read-only (a read-only file system or
/// read-only files serve) and never written; a store another process has open for writing is
/// refused with [`Error::StoreLocked`](crate::Error::StoreLocked), as by any open.
pub fn recover_in_memory(file_system: Arc<dyn FileSystem>, path: &Path) -> Result<RecoveredView> {
    let overlay = Arc::new(OverlayFileSystem::new(file_system));
    let mut options = Options::new()
        .file_system(overlay.clone())
        .background_install(false);
    // `info` says so itself, once.
    options.warn_outgrown = false;
    let store = Store::open(path, options)?;
    let restart = store.restart_report().clone();
    drop(store);
    Ok(RecoveredView {
        file_system: overlay,
        restart,
    })
}

/// Verifies every page of the store in `path`, then (when the pages are sound) every
/// collection: order, key bounds, equal depth, no node that no collection reaches. `Err` only
/// when it cannot be opened at all.
pub fn check(file_system: &dyn FileSystem, path: &Path) -> Result<CheckReport> {
    let mut report = lodestore_server::check::check(file_system, path)?;
    // Collections are walked only over sound pages: the page check names any other damage.
    if report.is_sound() {
        let volume = Volume::open(file_system, path, None, OpenMode::ReadOnly)?;
        crate::collections::offline::check_collections(&volume, &mut report)?;
    }
    Ok(report)
}

/// Counters of the sessions of earlier processes on the store in `path`, by scheme (summed
/// over every session that ended before its store was closed).
pub fn session_counters(
    file_system: &dyn FileSystem,
    path: &Path,
) -> Result<crate::counters::CountersByScheme> {
    crate::counters::read(file_system, path)
}

/// Figures about the store in `path`.
pub fn info(file_system: &dyn FileSystem, path: &Path) -> Result<StoreInfo> {
    let volume = Volume::open(file_system, path, None, OpenMode::ReadOnly)?;
    let mut info = inspect::info(&volume)?;
    let sb = volume.superblock();
    if lodestore_server::RecoveryMethodKind::from_code(sb.recovery_method).is_main_memory() {
        info.differential = lodestore_server::recovery::differential::inspect::info(
            file_system,
            path,
            sb.log_segment_bytes,
            volume.page_size(),
        )?;
    }
    Ok(info)
}

/// The server's log of the store in `path` from its last checkpoint, both levels of
/// multi-level transactions counted apart; `None` for a main-memory method (its streams are in
/// [`info`]). Give it the store's own files to see the log as the last run left it.
pub fn log_summary(
    file_system: &dyn FileSystem,
    path: &Path,
) -> Result<Option<lodestore_server::log_inspect::LogSummary>> {
    let volume = Volume::open(file_system, path, None, OpenMode::ReadOnly)?;
    let sb = volume.superblock();
    if lodestore_server::RecoveryMethodKind::from_code(sb.recovery_method).is_main_memory() {
        return Ok(None);
    }
    lodestore_server::log_inspect::log_summary(file_system, path, &volume).map(Some)
}

/// The snapshots of the store in `path` and the figures of their archive and snapshot log,
/// when it keeps snapshots. Opens the snapshot files over `file_system` (give it a
/// [`RecoveredView`]'s to leave them untouched).
pub fn snapshot_summary(
    file_system: Arc<dyn FileSystem>,
    path: &Path,
) -> Result<
    Option<(
        Vec<lodestore_server::versions::Snapshot>,
        lodestore_snapshots::SnapshotStats,
    )>,
> {
    if !lodestore_snapshots::Snapshots::exist_in(file_system.as_ref(), path) {
        return Ok(None);
    }
    let page_size = Volume::open(file_system.as_ref(), path, None, OpenMode::ReadOnly)?.page_size();
    let snapshots = lodestore_snapshots::Snapshots::open(file_system, path, page_size, None)?;
    Ok(Some((snapshots.list(), snapshots.stats())))
}

/// The named roots of the store in `path`.
pub fn roots(file_system: &dyn FileSystem, path: &Path) -> Result<BTreeMap<String, Oid>> {
    let volume = Volume::open(file_system, path, None, OpenMode::ReadOnly)?;
    inspect::roots(&volume)
}

/// Every application object of the store in `path`, in OID order, passed to `visit`.
pub fn objects(
    file_system: &dyn FileSystem,
    path: &Path,
    mut visit: impl FnMut(StoredObject) -> Result<()>,
) -> Result<()> {
    let volume = Volume::open(file_system, path, None, OpenMode::ReadOnly)?;
    inspect::for_each_object(&volume, |object| {
        if object.type_id.is_reserved() {
            Ok(())
        } else {
            visit(object)
        }
    })
}

/// Every application object of the store in `path` that can be read, passed to `visit`; each
/// damaged page is passed to `damaged` (which returns `Ok` to go on past it) and the objects
/// it holds or reaches are skipped. What `dump` and `salvage` read.
pub fn readable_objects(
    file_system: &dyn FileSystem,
    path: &Path,
    mut visit: impl FnMut(StoredObject) -> Result<()>,
    damaged: impl FnMut(crate::Error) -> Result<()>,
) -> Result<()> {
    let volume = Volume::open(file_system, path, None, OpenMode::ReadOnly)?;
    inspect::for_each_readable_object(
        &volume,
        |object| {
            if object.type_id.is_reserved() {
                Ok(())
            } else {
                visit(object)
            }
        },
        damaged,
    )
}

/// What `salvage` did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Salvaged {
    /// Pages and objects copied and left out.
    pub report: lodestore_server::salvage::SalvageReport,
    /// Why the source's log could not be used, if it could not: then the data file was read as
    /// it lay, and changes since its last checkpoint are not in the copy.
    pub log_unusable: Option<String>,
}

/// Copies every object that can be read from the store in `source` into a new store in `out`
/// (missing or an empty folder), page by page at the same page numbers, so every object keeps
/// its OID. The source is only read. Its log is used when it can be (the copy then holds every
/// committed change); when the log is damaged or missing, the data file is read as it lies.
/// Damaged pages, large objects that lost a page and pages whose owner was lost are left out
/// and reported. The copy is built beside `out` and renamed into place when complete.
pub fn salvage(source: &Path, out: &Path) -> Result<Salvaged> {
    let real: Arc<dyn FileSystem> = Arc::new(lodestore_storage::RealFileSystem);
    let out_is_free = |fs: &dyn FileSystem| -> Result<bool> {
        Ok(!fs.exists(out)
            || (fs.is_dir(out) && fs.list(out)?.is_empty() && fs.list_dirs(out)?.is_empty()))
    };
    if !out_is_free(real.as_ref())? {
        return Err(crate::Error::AlreadyExists {
            path: out.to_path_buf(),
        });
    }
    let (view, log_unusable) = match recover_in_memory(real.clone(), source) {
        Ok(view) => (Some(view), None),
        Err(
            e @ (crate::Error::NotAStore { .. }
            | crate::Error::StoreLocked { .. }
            | crate::Error::UnsupportedFormat { .. }),
        ) => return Err(e),
        Err(e) => (None, Some(e.to_string())),
    };
    let source_fs: &dyn FileSystem = match &view {
        Some(view) => view.file_system(),
        None => real.as_ref(),
    };
    let source_volume = Volume::open(source_fs, source, None, OpenMode::ReadOnly)?;
    let page_size = source_volume.page_size();

    let building = crate::folder::sibling(out, "salvaging")?;
    crate::folder::clear_leftover(real.as_ref(), &building)?;
    drop(Store::create(
        &building,
        Options::new().page_size(page_size),
    )?);
    let report = {
        let target = Volume::open(
            real.as_ref(),
            &building,
            Some(page_size),
            OpenMode::Existing,
        )?;
        lodestore_server::salvage::copy_pages(&source_volume, &target)?
    };
    // One open and close through the engine: the copy must stand as a store on its own.
    drop(Store::open(&building, Options::new())?);
    if !out_is_free(real.as_ref())? {
        real.remove_dir_all(&building)?;
        return Err(crate::Error::AlreadyExists {
            path: out.to_path_buf(),
        });
    }
    real.rename_dir(&building, out)?;
    Ok(Salvaged {
        report,
        log_unusable,
    })
}
