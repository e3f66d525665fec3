//! A file system that crashes. Every file keeps its durable bytes apart from the writes made
//! since its last sync; reads see both, as they would through an operating system's cache.
//! `arm(n)` makes the n-th mutating operation from now (write, sync, set length, create,
//! rename, remove) fail as if the machine died in it; from then on every operation fails until
//! `recover` decides, with the chosen fault, what of the unsynced writes reached the disk.
//!
//! Faults of a crash (what the disk kept of writes since the last sync of each file):
//! - `DropUnsynced`: nothing.
//! - `KeepPrefix`: the first k writes, for a random k.
//! - `TearLast`: the first k writes and a prefix of write k+1 cut at a sector boundary
//!   (512 B or 4 KiB).
//! - `Reorder`: a random subset of the writes, applied in random order.
//!
//! Media faults, applied on top of a crash (the store may then fail to open, but must say so):
//! - `FlipBit`: one bit of one durable byte of one file flips.
//! - `Misdirect`: one unsynced write lands one sector away from where it was aimed.
//!
//! Metadata operations (create, rename, remove) take effect at once and durably; the crash
//! point can fall just before one of them.

use crate::fs::{FileSystem, OpenMode, Storage};
use lodestore_core::{Error, Result};
use rand::rngs::StdRng;
use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng, SeedableRng};
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// What a crash does to unsynced data (and, for media faults, to synced data).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fault {
    DropUnsynced,
    KeepPrefix,
    TearLast { sector_bytes: usize },
    Reorder,
    FlipBit,
    Misdirect,
}

impl Fault {
    /// The faults a correct store must recover from without losing committed work.
    pub const CRASHES: [Fault; 5] = [
        Fault::DropUnsynced,
        Fault::KeepPrefix,
        Fault::TearLast { sector_bytes: 512 },
        Fault::TearLast { sector_bytes: 4096 },
        Fault::Reorder,
    ];
    /// Faults that damage data the store already made durable: it may refuse to open, but must
    /// never return wrong data.
    pub const MEDIA: [Fault; 2] = [Fault::FlipBit, Fault::Misdirect];

    pub fn is_media(self) -> bool {
        matches!(self, Fault::FlipBit | Fault::Misdirect)
    }

    pub fn name(self) -> &'static str {
        match self {
            Fault::DropUnsynced => "drop-unsynced",
            Fault::KeepPrefix => "keep-prefix",
            Fault::TearLast { sector_bytes: 512 } => "tear-512",
            Fault::TearLast { .. } => "tear-4096",
            Fault::Reorder => "reorder",
            Fault::FlipBit => "flip-bit",
            Fault::Misdirect => "misdirect",
        }
    }
}

#[derive(Clone)]
struct Write {
    offset: u64,
    data: Vec<u8>,
}

#[derive(Default)]
struct SimFile {
    durable: Vec<u8>,
    current: Vec<u8>,
    /// Writes since the last sync, in order; a set-length is recorded as its effect on
    /// `current` and made durable by the next sync.
    pending: Vec<Write>,
    pending_len: Option<u64>,
}

#[derive(Default)]
struct State {
    files: BTreeMap<PathBuf, SimFile>,
    dirs: BTreeSet<PathBuf>,
    operations: u64,
    crash_at: Option<u64>,
    crashed: bool,
}

/// The crashing file system. Its open files share its state.
#[derive(Default)]
pub struct SimFileSystem {
    state: Arc<Mutex<State>>,
}

/// Counters of one crash's resolution.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CrashOutcome {
    pub writes_pending: usize,
    pub writes_kept: usize,
}

impl SimFileSystem {
    pub fn new() -> SimFileSystem {
        SimFileSystem::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Crash at the `n`-th mutating operation from now (1 = the next one).
    pub fn arm(&self, n: u64) {
        assert!(n > 0);
        let mut state = self.lock();
        state.crash_at = Some(state.operations + n);
    }

    pub fn disarm(&self) {
        self.lock().crash_at = None;
    }

    pub fn has_crashed(&self) -> bool {
        self.lock().crashed
    }

    /// Mutating operations so far.
    pub fn operations(&self) -> u64 {
        self.lock().operations
    }

    /// Every file's durable bytes, by path: what the crash left, once `recover` resolved it.
    /// For copying a crashed store out to inspect it.
    pub fn durable_files(&self) -> Vec<(PathBuf, Vec<u8>)> {
        self.lock()
            .files
            .iter()
            .map(|(path, file)| (path.clone(), file.durable.clone()))
            .collect()
    }

    /// Crashes now, if it has not already.
    pub fn crash_now(&self) {
        self.lock().crashed = true;
    }

    /// Resolves a crash: decides per file what of its unsynced writes survived, by `fault`,
    /// and makes the file system usable again. Also usable without a crash (a power cut).
    pub fn recover(&self, fault: Fault, seed: u64) -> CrashOutcome {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut state = self.lock();
        let mut outcome = CrashOutcome::default();
        let paths: Vec<PathBuf> = state.files.keys().cloned().collect();
        let mirected = if fault == Fault::Misdirect {
            let with_pending: Vec<&PathBuf> = paths
                .iter()
                .filter(|p| !state.files[*p].pending.is_empty())
                .collect();
            with_pending.choose(&mut rng).map(|p| (*p).clone())
        } else {
            None
        };
        for path in &paths {
            let file = state.files.get_mut(path).expect("listed");
            outcome.writes_pending += file.pending.len();
            let mut pending = std::mem::take(&mut file.pending);
            if mirected.as_ref() == Some(path) {
                let victim = rng.random_range(0..pending.len());
                pending[victim].offset += 512;
            }
            let kept: Vec<Write> = match fault {
                Fault::DropUnsynced | Fault::FlipBit => Vec::new(),
                Fault::KeepPrefix | Fault::Misdirect => {
                    let k = rng.random_range(0..=pending.len());
                    pending.truncate(k);
                    pending
                }
                Fault::TearLast { sector_bytes } => {
                    let k = rng.random_range(0..=pending.len());
                    let mut kept: Vec<Write> = pending[..k].to_vec();
                    if let Some(next) = pending.get(k) {
                        kept.push(tear(next, sector_bytes, &mut rng));
                    }
                    kept
                }
                Fault::Reorder => {
                    pending.shuffle(&mut rng);
                    let k = rng.random_range(0..=pending.len());
                    pending.truncate(k);
                    pending
                }
            };
            outcome.writes_kept += kept.len();
            if let Some(len) = file.pending_len.take() {
                // A length change is metadata: kept or not as a whole, with the writes.
                if !kept.is_empty() || rng.random_bool(0.5) {
                    file.durable.resize(len as usize, 0);
                }
            }
            for write in kept {
                apply(&mut file.durable, &write);
            }
            file.current = file.durable.clone();
        }
        if fault == Fault::FlipBit {
            let nonempty: Vec<&PathBuf> = paths
                .iter()
                .filter(|p| !state.files[*p].durable.is_empty())
                .collect();
            if let Some(path) = nonempty.choose(&mut rng).map(|p| (*p).clone()) {
                let file = state.files.get_mut(&path).expect("listed");
                let at = rng.random_range(0..file.durable.len());
                file.durable[at] ^= 1 << rng.random_range(0..8);
                file.current = file.durable.clone();
            }
        }
        state.crashed = false;
        state.crash_at = None;
        outcome
    }

    /// Counts a mutating operation; fails it if the crash point is reached or passed.
    fn operation(state: &mut State, path: &Path, what: &'static str) -> Result<()> {
        if state.crashed {
            return Err(crashed(path, what));
        }
        state.operations += 1;
        if state.crash_at == Some(state.operations) {
            state.crashed = true;
            return Err(crashed(path, what));
        }
        Ok(())
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

fn crashed(path: &Path, what: &'static str) -> Error {
    Error::io(path, what, io::Error::other("simulated crash"))
}

fn apply(bytes: &mut Vec<u8>, write: &Write) {
    let start = write.offset as usize;
    let end = start + write.data.len();
    if bytes.len() < end {
        bytes.resize(end, 0);
    }
    bytes[start..end].copy_from_slice(&write.data);
}

/// The part of `write` that reached the disk when the power failed during it: whole sectors
/// from its start up to a random sector boundary inside it.
fn tear(write: &Write, sector_bytes: usize, rng: &mut StdRng) -> Write {
    let start = write.offset as usize;
    let end = start + write.data.len();
    let first_boundary = start.next_multiple_of(sector_bytes).max(start);
    let boundaries: Vec<usize> = (first_boundary..end)
        .step_by(sector_bytes)
        .filter(|&b| b > start)
        .collect();
    let cut = boundaries.choose(rng).copied().unwrap_or(start);
    Write {
        offset: write.offset,
        data: write.data[..cut - start].to_vec(),
    }
}

impl FileSystem for SimFileSystem {
    fn open(&self, path: &Path, mode: OpenMode) -> Result<Arc<dyn Storage>> {
        let mut state = self.lock();
        match mode {
            OpenMode::CreateNew => {
                if state.files.contains_key(path) {
                    return Err(Error::io(path, "open", io::ErrorKind::AlreadyExists.into()));
                }
                SimFileSystem::operation(&mut state, path, "create")?;
                state.files.insert(path.to_path_buf(), SimFile::default());
            }
            _ => {
                if state.crashed {
                    return Err(crashed(path, "open"));
                }
                if !state.files.contains_key(path) {
                    return Err(Error::io(path, "open", io::ErrorKind::NotFound.into()));
                }
            }
        }
        drop(state);
        Ok(Arc::new(SimStorage {
            state: self.state.clone(),
            path: path.to_path_buf(),
        }))
    }

    fn exists(&self, path: &Path) -> bool {
        let state = self.lock();
        state.files.contains_key(path) || state.dirs.contains(path)
    }

    fn create_dir_all(&self, path: &Path) -> Result<()> {
        let mut state = self.lock();
        for ancestor in path.ancestors() {
            state.dirs.insert(ancestor.to_path_buf());
        }
        Ok(())
    }

    fn is_dir(&self, path: &Path) -> bool {
        self.lock().dirs.contains(path)
    }

    fn remove(&self, path: &Path) -> Result<()> {
        let mut state = self.lock();
        SimFileSystem::operation(&mut state, path, "remove")?;
        state
            .files
            .remove(path)
            .map(|_| ())
            .ok_or_else(|| Error::io(path, "remove", io::ErrorKind::NotFound.into()))
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let mut state = self.lock();
        SimFileSystem::operation(&mut state, from, "rename")?;
        let file = state
            .files
            .remove(from)
            .ok_or_else(|| Error::io(from, "rename", io::ErrorKind::NotFound.into()))?;
        state.files.insert(to.to_path_buf(), file);
        Ok(())
    }

    fn list(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        let state = self.lock();
        if state.crashed {
            return Err(crashed(dir, "list"));
        }
        Ok(state
            .files
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .cloned()
            .collect())
    }

    fn list_dirs(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        let state = self.lock();
        if state.crashed {
            return Err(crashed(dir, "list"));
        }
        Ok(state
            .dirs
            .iter()
            .filter(|p| p.parent() == Some(dir))
            .cloned()
            .collect())
    }

    fn rename_dir(&self, from: &Path, to: &Path) -> Result<()> {
        let mut state = self.lock();
        SimFileSystem::operation(&mut state, from, "rename folder")?;
        crate::fs::check_folder_rename(
            from,
            to,
            state.dirs.contains(from),
            state.dirs.iter().chain(state.files.keys()),
        )?;
        let moved: Vec<PathBuf> = state
            .files
            .keys()
            .filter(|p| p.starts_with(from))
            .cloned()
            .collect();
        for old in moved {
            let file = state.files.remove(&old).expect("listed above");
            let new = to.join(old.strip_prefix(from).expect("under the folder"));
            state.files.insert(new, file);
        }
        let moved: Vec<PathBuf> = state
            .dirs
            .iter()
            .filter(|p| p.starts_with(from))
            .cloned()
            .collect();
        for old in moved {
            state.dirs.remove(&old);
            let new = to.join(old.strip_prefix(from).expect("under the folder"));
            state.dirs.insert(new);
        }
        Ok(())
    }

    fn remove_dir_all(&self, path: &Path) -> Result<()> {
        let mut state = self.lock();
        SimFileSystem::operation(&mut state, path, "remove folder")?;
        if !state.dirs.contains(path) {
            return Err(Error::io(
                path,
                "remove folder",
                io::ErrorKind::NotFound.into(),
            ));
        }
        state.dirs.retain(|p| !p.starts_with(path));
        state.files.retain(|p, _| !p.starts_with(path));
        Ok(())
    }
}

/// An open file of a `SimFileSystem`, named by its path.
struct SimStorage {
    state: Arc<Mutex<State>>,
    path: PathBuf,
}

impl SimStorage {
    fn with_file<R>(
        &self,
        what: &'static str,
        mutating: bool,
        action: impl FnOnce(&mut SimFile) -> Result<R>,
    ) -> Result<R> {
        let mut state = lock(&self.state);
        if mutating {
            SimFileSystem::operation(&mut state, &self.path, what)?;
        } else if state.crashed {
            return Err(crashed(&self.path, what));
        }
        let file = state
            .files
            .get_mut(&self.path)
            .ok_or_else(|| Error::io(&self.path, what, io::ErrorKind::NotFound.into()))?;
        action(file)
    }
}

impl Storage for SimStorage {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let path = self.path.clone();
        self.with_file("read", false, |file| {
            let start = offset as usize;
            match start.checked_add(buf.len()) {
                Some(end) if end <= file.current.len() => {
                    buf.copy_from_slice(&file.current[start..end]);
                    Ok(())
                }
                _ => Err(Error::io(
                    &path,
                    "read",
                    io::ErrorKind::UnexpectedEof.into(),
                )),
            }
        })
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        let mut state = lock(&self.state);
        let already_crashed = state.crashed;
        let result = SimFileSystem::operation(&mut state, &self.path, "write");
        let file = state
            .files
            .get_mut(&self.path)
            .ok_or_else(|| Error::io(&self.path, "write", io::ErrorKind::NotFound.into()))?;
        let write = Write {
            offset,
            data: data.to_vec(),
        };
        match result {
            Ok(()) => {
                apply(&mut file.current, &write);
                file.pending.push(write);
                Ok(())
            }
            Err(e) => {
                if !already_crashed {
                    // In flight when the power failed: the crash decides whether it (or a torn
                    // part of it) reached the disk.
                    file.pending.push(write);
                }
                Err(e)
            }
        }
    }

    fn sync(&self) -> Result<()> {
        self.with_file("sync", true, |file| {
            if let Some(len) = file.pending_len.take() {
                file.durable.resize(len as usize, 0);
            }
            for write in std::mem::take(&mut file.pending) {
                apply(&mut file.durable, &write);
            }
            Ok(())
        })
    }

    fn len(&self) -> Result<u64> {
        self.with_file("stat", false, |file| Ok(file.current.len() as u64))
    }

    fn set_len(&self, len: u64) -> Result<()> {
        self.with_file("set length", true, |file| {
            file.current.resize(len as usize, 0);
            // Earlier unsynced writes past the new end are gone for good.
            for write in &mut file.pending {
                let end = write.offset as usize + write.data.len();
                if end > len as usize {
                    let keep = (len as usize).saturating_sub(write.offset as usize);
                    write.data.truncate(keep);
                }
            }
            file.pending_len = Some(len);
            Ok(())
        })
    }

    fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (SimFileSystem, Arc<dyn Storage>) {
        let fs = SimFileSystem::new();
        let file = fs.open(Path::new("/f"), OpenMode::CreateNew).unwrap();
        file.write_at(0, &[1u8; 4096]).unwrap();
        file.sync().unwrap();
        (fs, file)
    }

    #[test]
    fn unsynced_writes_are_dropped_synced_ones_kept() {
        let (fs, file) = setup();
        file.write_at(0, &[2u8; 100]).unwrap();
        let mut buf = [0u8; 1];
        file.read_at(0, &mut buf).unwrap();
        assert_eq!(buf[0], 2, "reads see unsynced writes");
        fs.crash_now();
        assert!(
            file.read_at(0, &mut buf).is_err(),
            "nothing works after a crash"
        );
        fs.recover(Fault::DropUnsynced, 1);
        file.read_at(0, &mut buf).unwrap();
        assert_eq!(buf[0], 1);
    }

    #[test]
    fn armed_crash_fails_that_operation_and_every_later_one() {
        let (fs, file) = setup();
        fs.arm(2);
        file.write_at(0, &[3u8; 10]).unwrap();
        assert!(file.sync().is_err(), "the second operation is the crash");
        assert!(file.write_at(0, &[4u8; 10]).is_err());
        assert!(fs.has_crashed());
        fs.recover(Fault::KeepPrefix, 7);
        let mut buf = [0u8; 1];
        file.read_at(0, &mut buf).unwrap();
        assert!(buf[0] == 1 || buf[0] == 3);
    }

    #[test]
    fn torn_write_keeps_whole_sectors_from_its_start() {
        for seed in 0..50 {
            let (fs, file) = setup();
            file.write_at(100, &[9u8; 3000]).unwrap();
            fs.crash_now();
            fs.recover(Fault::TearLast { sector_bytes: 512 }, seed);
            let mut buf = vec![0u8; 4096];
            file.read_at(0, &mut buf).unwrap();
            let nines = buf.iter().filter(|&&b| b == 9).count();
            // Nothing, or the write's bytes up to a sector boundary (512, 1024, ...).
            assert!(
                nines == 0 || (100 + nines) % 512 == 0 || nines == 3000,
                "{nines}"
            );
            assert!(buf[..100].iter().all(|&b| b == 1));
            assert!(buf[100 + nines..].iter().all(|&b| b == 1));
        }
    }

    #[test]
    fn flip_bit_changes_exactly_one_bit() {
        let (fs, file) = setup();
        fs.crash_now();
        fs.recover(Fault::FlipBit, 3);
        let mut buf = vec![0u8; 4096];
        file.read_at(0, &mut buf).unwrap();
        let flipped: u32 = buf.iter().map(|&b| (b ^ 1).count_ones()).sum();
        assert_eq!(flipped, 1);
    }
}
