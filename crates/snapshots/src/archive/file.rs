//! A local archive in a folder of one's choosing (`file://` URLs): a store on a small fast
//! disk can keep its history on a large slow one. The archive file is the local archive's
//! format; it is opened when the page size is first known (the file's header says it, or the
//! first copy put or read), since a URL alone does not tell it.

use super::local::LocalArchive;
use super::{Archive, PageCopy};
use crate::copies::CopyFile;
use lodestore_core::{PageId, Result};
use lodestore_storage::FileSystem;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// The URL scheme of archives in a folder.
pub const FILE_SCHEME: &str = "file://";
/// The archive file's name in its folder.
const FILE_NAME: &str = "archive";

/// A local archive in a folder; see the module's documentation.
pub struct FileArchive {
    fs: Arc<dyn FileSystem>,
    dir: PathBuf,
    opened: OnceLock<LocalArchive>,
    opening: Mutex<()>,
}

impl FileArchive {
    /// The archive in `dir` (made if missing; a relative path is taken from the current
    /// folder, so that the location the store records names one place).
    pub fn new(fs: Arc<dyn FileSystem>, dir: &Path) -> Result<FileArchive> {
        let dir = std::path::absolute(dir)
            .map_err(|e| lodestore_core::Error::io(dir, "resolve the archive folder", e))?;
        fs.create_dir_all(&dir)?;
        Ok(FileArchive {
            fs,
            dir,
            opened: OnceLock::new(),
            opening: Mutex::new(()),
        })
    }

    /// The archive of a `file://PATH` URL.
    pub fn from_url(fs: Arc<dyn FileSystem>, url: &str) -> Result<FileArchive> {
        let path = url
            .strip_prefix(FILE_SCHEME)
            .filter(|p| !p.is_empty())
            .ok_or_else(|| {
                lodestore_core::Error::InvalidArgument(format!(
                    "archive URL {url:?}: {FILE_SCHEME}PATH names a folder"
                ))
            })?;
        Self::new(fs, Path::new(path))
    }

    fn path(&self) -> PathBuf {
        self.dir.join(FILE_NAME)
    }

    /// The archive, holding pages of `size` bytes (refused by name if not).
    fn of_size(&self, size: usize) -> Result<&LocalArchive> {
        let archive = self.opened(Some(size))?.expect("a size given");
        if archive.page_size() != size {
            return Err(lodestore_core::Error::CorruptFile {
                path: self.path(),
                reason: format!(
                    "holds copies of {}-byte pages; the store's are {size} bytes",
                    archive.page_size()
                ),
            });
        }
        Ok(archive)
    }

    /// The archive, opened with `page_size` if not yet and the file does not say it;
    /// `None` when neither tells the page size (no file yet: nothing archived).
    fn opened(&self, page_size: Option<usize>) -> Result<Option<&LocalArchive>> {
        if let Some(archive) = self.opened.get() {
            return Ok(Some(archive));
        }
        let _opening = self.opening.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(archive) = self.opened.get() {
            return Ok(Some(archive));
        }
        let path = self.path();
        let Some(size) = CopyFile::page_size_of(self.fs.as_ref(), &path)?.or(page_size) else {
            return Ok(None);
        };
        let archive = LocalArchive::open(self.fs.clone(), &path, size)?;
        Ok(Some(self.opened.get_or_init(|| archive)))
    }
}

impl Archive for FileArchive {
    fn name(&self) -> String {
        self.path().display().to_string()
    }

    fn location(&self) -> String {
        format!("{FILE_SCHEME}{}", self.dir.display())
    }

    fn put(&self, copies: &[PageCopy<'_>]) -> Result<()> {
        let Some(first) = copies.first() else {
            return Ok(());
        };
        self.of_size(first.image.len())?.put(copies)
    }

    fn get(&self, page: PageId, time_us: u64, buf: &mut [u8]) -> Result<Option<u64>> {
        self.of_size(buf.len())?.get(page, time_us, buf)
    }

    fn get_ts(&self, page: PageId) -> Result<Option<u64>> {
        match self.opened(None)? {
            Some(archive) => archive.get_ts(page),
            None => Ok(None),
        }
    }

    fn newest_times(&self) -> Option<Vec<(PageId, u64)>> {
        match self.opened(None) {
            Ok(Some(archive)) => archive.newest_times(),
            Ok(None) => Some(Vec::new()),
            Err(e) => {
                tracing::error!(archive = %self.name(), error = %e, "the archive cannot be opened; reads as of a snapshot will fail");
                None
            }
        }
    }

    fn list(&self) -> Option<Vec<(PageId, u64)>> {
        match self.opened(None) {
            Ok(Some(archive)) => archive.list(),
            Ok(None) => Some(Vec::new()),
            Err(_) => None,
        }
    }

    fn remove(&self, copies: &[(PageId, u64)]) -> Result<()> {
        match self.opened(None)? {
            Some(archive) => archive.remove(copies),
            None => Ok(()),
        }
    }

    fn bytes(&self) -> u64 {
        match self.opened(None) {
            Ok(Some(archive)) => archive.bytes(),
            _ => 0,
        }
    }

    fn unavailable(&self) -> Option<String> {
        match self.opened(None) {
            Ok(Some(archive)) => archive.unavailable(),
            Ok(None) => None,
            Err(e) => Some(e.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lodestore_protocol::archive::conformance::check_contract;
    use lodestore_storage::MemoryFileSystem;

    #[test]
    fn a_folder_archive_meets_the_contract_and_reopens_with_its_page_size() {
        let fs: Arc<dyn FileSystem> = Arc::new(MemoryFileSystem::new());
        let archive = FileArchive::from_url(fs.clone(), "file:///history/store-a").unwrap();
        assert_eq!(archive.location(), "file:///history/store-a");
        // Nothing archived yet: no file, empty answers, no page size needed.
        assert_eq!(archive.newest_times(), Some(Vec::new()));
        assert_eq!(archive.get_ts(PageId(1)).unwrap(), None);
        check_contract(&archive, 4096).unwrap();
        drop(archive);
        // Opened again, the file tells the page size before anything is read.
        let again = FileArchive::new(fs.clone(), Path::new("/history/store-a")).unwrap();
        assert_eq!(again.get_ts(PageId(9)).unwrap(), Some(20));
        // A read with pages of another size is refused by name.
        let mut small = vec![0u8; 512];
        let other = FileArchive::new(fs, Path::new("/history/store-a")).unwrap();
        let err = other.get(PageId(9), 0, &mut small).unwrap_err().to_string();
        assert!(err.contains("4096") && err.contains("512"), "{err}");
        assert!(FileArchive::from_url(Arc::new(MemoryFileSystem::new()), "file://").is_err());
    }
}
