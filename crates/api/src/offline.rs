//! Reading a closed store without serving it: integrity check, figures, and every object.

use lodestore_core::{Oid, Result};
use lodestore_server::check::CheckReport;
use lodestore_server::inspect::{self, StoreInfo, StoredObject};
use lodestore_storage::{FileSystem, OpenMode, Volume};
use std::collections::BTreeMap;
use std::path::Path;

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
