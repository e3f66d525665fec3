//! The snapshot log (Moh section 3.4.1): page copies made for snapshots, durable before the
//! commit that would destroy the state they hold, kept here until the archiver has put them
//! in the archive. It is apart from the transaction log, so an archive that is slow or down
//! never holds up the transaction log's recycling; and a crash loses no copy that is not yet
//! archived, since a restart reads them back from here.

use crate::copies::{CopyFile, CopyFileKind};
use lodestore_core::{PageId, Result};
use lodestore_storage::FileSystem;
use std::collections::BTreeMap;
use std::path::Path;

/// Copies waiting for the archive, and where each is.
pub struct SnapshotLog {
    file: CopyFile,
    /// (page, snapshot time) -> offset in the file.
    staged: BTreeMap<(PageId, u64), u64>,
}

impl SnapshotLog {
    /// Opens the snapshot log at `path`. Copies made for snapshots that `keep` refuses (ones
    /// whose taking never became durable) are left out.
    pub fn open(
        fs: &dyn FileSystem,
        path: &Path,
        page_size: usize,
        keep: impl Fn(u64) -> bool,
    ) -> Result<(SnapshotLog, OpenedLog)> {
        let (file, entries) = CopyFile::open(fs, path, page_size, CopyFileKind::SnapshotLog)?;
        let mut opened = OpenedLog::default();
        let mut staged = BTreeMap::new();
        for entry in entries {
            opened.time_max = opened.time_max.max(entry.time_us);
            if keep(entry.time_us) {
                staged.insert((entry.page, entry.time_us), entry.offset);
            } else {
                opened.dropped += 1;
            }
        }
        Ok((SnapshotLog { file, staged }, opened))
    }

    /// Appends copies and makes them durable.
    pub fn stage(&mut self, time_us: u64, copies: &[(PageId, &[u8])]) -> Result<()> {
        let records: Vec<_> = copies
            .iter()
            .map(|(p, image)| (*p, time_us, *image))
            .collect();
        let offsets = self.file.append(&records)?;
        self.file.sync()?;
        for ((page, _), offset) in copies.iter().zip(offsets) {
            self.staged.insert((*page, time_us), offset);
        }
        Ok(())
    }

    /// The oldest staged copy of `page` at or after `time_us`: its time and offset.
    pub fn oldest_at_or_after(&self, page: PageId, time_us: u64) -> Option<(u64, u64)> {
        self.staged
            .range((page, time_us)..=(page, u64::MAX))
            .next()
            .map(|(&(_, time), &offset)| (time, offset))
    }

    /// Reads a staged copy.
    pub fn read(&self, page: PageId, time_us: u64, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.file.read(offset, page, time_us, buf)
    }

    /// Staged copies, oldest snapshot first within each page, with their offsets.
    pub fn staged(&self) -> impl Iterator<Item = (PageId, u64, u64)> + '_ {
        self.staged.iter().map(|(&(p, t), &o)| (p, t, o))
    }

    /// The copies are in the archive now: forget them, and empty the file once nothing waits.
    pub fn archived(&mut self, copies: &[(PageId, u64)]) -> Result<()> {
        for key in copies {
            self.staged.remove(key);
        }
        if self.staged.is_empty() && !self.file.is_empty() {
            self.file.clear()?;
        }
        Ok(())
    }

    /// Forgets staged copies no snapshot reads any more (they are never archived), and
    /// empties the file once nothing waits.
    pub fn forget(&mut self, copies: &[(PageId, u64)]) -> Result<()> {
        self.archived(copies)
    }

    /// Copies waiting.
    pub fn len(&self) -> usize {
        self.staged.len()
    }

    pub fn is_empty(&self) -> bool {
        self.staged.is_empty()
    }

    /// Bytes of the file.
    pub fn bytes(&self) -> u64 {
        self.file.len()
    }
}

/// What opening the snapshot log found.
#[derive(Debug, Default)]
pub struct OpenedLog {
    /// Latest snapshot time of any copy in the file.
    pub time_max: u64,
    /// Copies left out: made for snapshots that never became durable.
    pub dropped: usize,
}
