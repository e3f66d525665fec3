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
    let options = Options::new()
        .file_system(overlay.clone())
        .background_install(false);
    let store = Store::open(path, options)?;
    let restart = store.restart_report().clone();
    drop(store);
    Ok(RecoveredView {
        file_system: overlay,
        restart,
    })
}

/// Verifies every page of the store in `path`. `Err` only when it cannot be opened at all.
pub fn check(file_system: &dyn FileSystem, path: &Path) -> Result<CheckReport> {
    lodestore_server::check::check(file_system, path)
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
    inspect::info(&volume)
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
