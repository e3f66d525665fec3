//! A store's folder as a whole: created in one step (built under a temporary name, then
//! renamed), and removed in one step (under the store's exclusive lock, renamed away, then
//! deleted). So a failed or killed creation never leaves a half-made store under the user's
//! name, and removal never pulls a store from under a process using it.

use lodestore_core::{Error, Result};
use lodestore_server::LOG_DIR_NAME;
use lodestore_storage::volume::data_file_path;
use lodestore_storage::{FileSystem, OpenMode};
use std::path::{Path, PathBuf};

/// The files a store's folder may hold; anything else is not Lodestore's to delete.
const STORE_FILES: [&str; 4] = [
    "volume-0.data",
    lodestore_storage::doublewrite::DOUBLE_WRITE_FILE_NAME,
    "session-counters",
    "session-counters.new",
];
const LOG_FILE_PREFIXES: [&str; 4] = ["segment-", "spare-", "creating-", "anchor"];
/// The folder of differential logging (`lodestore_server`'s main-memory methods) and the
/// files it may hold.
const DIFFERENTIAL_DIR_NAME: &str = "differential";
const DIFFERENTIAL_FILE_PREFIXES: [&str; 3] = ["anchor", "creating-anchor", "backup-"];

/// `.NAME.SUFFIX` beside the folder `path`: where a store is built before it takes its name,
/// or goes before it is deleted.
pub(crate) fn sibling(path: &Path, suffix: &str) -> Result<PathBuf> {
    let name = path.file_name().ok_or_else(|| {
        Error::InvalidArgument(format!(
            "{} names no folder a store could live in",
            path.display()
        ))
    })?;
    let name = format!(".{}.{suffix}", name.to_string_lossy());
    Ok(match path.parent() {
        Some(parent) => parent.join(name),
        None => PathBuf::from(name),
    })
}

/// Removes what a killed earlier creation left at `temporary`, unless a creator still holds it.
pub(crate) fn clear_leftover(fs: &dyn FileSystem, temporary: &Path) -> Result<()> {
    if !fs.exists(temporary) {
        return Ok(());
    }
    let data = data_file_path(temporary);
    let holder = if fs.exists(&data) {
        // The exclusive lock fails while another process is still building this store.
        Some(fs.open(&data, OpenMode::Existing)?)
    } else {
        None
    };
    tracing::info!(path = %temporary.display(), "removing what an interrupted store creation left");
    let result = fs.remove_dir_all(temporary);
    drop(holder);
    result
}

/// Checks that `path` is a folder holding a store and nothing else Lodestore did not write.
fn check_only_store_files(fs: &dyn FileSystem, path: &Path) -> Result<()> {
    let foreign = |found: &Path| {
        Error::InvalidArgument(format!(
            "{} holds {}, which is not part of a Lodestore store; refusing to remove the folder",
            path.display(),
            found.display()
        ))
    };
    for file in fs.list(path)? {
        let name = file.file_name().unwrap_or_default().to_string_lossy();
        if !STORE_FILES.contains(&name.as_ref()) {
            return Err(foreign(&file));
        }
    }
    // A log folder holds segments and its anchor, nothing else.
    let only_log_files = |dir: &Path| -> Result<()> {
        if let Some(subfolder) = fs.list_dirs(dir)?.into_iter().next() {
            return Err(foreign(&subfolder));
        }
        for file in fs.list(dir)? {
            let name = file.file_name().unwrap_or_default().to_string_lossy();
            if !LOG_FILE_PREFIXES.iter().any(|p| name.starts_with(p)) {
                return Err(foreign(&file));
            }
        }
        Ok(())
    };
    for dir in fs.list_dirs(path)? {
        let name = dir.file_name().unwrap_or_default().to_string_lossy();
        if name == LOG_DIR_NAME {
            only_log_files(&dir)?;
        } else if name == DIFFERENTIAL_DIR_NAME {
            // Differential logging: its anchor, two backups, and a log folder per stream.
            for file in fs.list(&dir)? {
                let name = file.file_name().unwrap_or_default().to_string_lossy();
                if !DIFFERENTIAL_FILE_PREFIXES
                    .iter()
                    .any(|p| name.starts_with(p))
                {
                    return Err(foreign(&file));
                }
            }
            for stream in fs.list_dirs(&dir)? {
                let name = stream.file_name().unwrap_or_default().to_string_lossy();
                let numbered = name
                    .strip_prefix("stream-")
                    .is_some_and(|n| n.parse::<u32>().is_ok());
                if !numbered {
                    return Err(foreign(&stream));
                }
                only_log_files(&stream)?;
            }
        } else {
            return Err(foreign(&dir));
        }
    }
    Ok(())
}

/// Removes the store in the folder `path`, whole: its exclusive lock is taken first (a store in
/// use is refused with `Error::StoreLocked`), the folder is renamed away in one step, then
/// deleted. A folder that holds no store, or files that are not a store's, is refused.
pub fn remove_store(fs: &dyn FileSystem, path: &Path) -> Result<()> {
    let data = data_file_path(path);
    if !fs.exists(&data) {
        return Err(Error::NotAStore {
            path: path.to_path_buf(),
            reason: format!(
                "{} is missing; refusing to remove the folder",
                data.display()
            ),
        });
    }
    let lock = fs.open(&data, OpenMode::Existing)?;
    check_only_store_files(fs, path)?;
    let doomed = sibling(path, "removing")?;
    if fs.exists(&doomed) {
        fs.remove_dir_all(&doomed)?;
    }
    fs.rename_dir(path, &doomed)?;
    drop(lock);
    fs.remove_dir_all(&doomed)
}
