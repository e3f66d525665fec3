//! Emulated disks, for benchmarks: files placed on devices of their own, each with a
//! bandwidth and a sync latency, over another file system that holds the bytes.
//!
//! Lee, Kim & Cha measured logging and restart with one disk per log stream, each sustaining
//! about 29 MB/s; this machine has one disk whose bandwidth dwarfs the engine's need. A device
//! here is a queue in time: a write occupies it for `bytes / bandwidth` (the caller does not
//! wait, as with a write-back cache), a sync waits for everything queued before it and then
//! for the sync latency, a read waits for its own transfer behind whatever is queued. Devices
//! run in parallel with one another, so the scaling with streams the paper shows appears here.
//!
//! A sync of a file on an emulated device does not sync the file beneath: the bytes stay in
//! the operating system's cache and the device's clock says when they would be durable. This
//! is for measuring only; crashes are the simulated file system's business
//! ([`crate::SimFileSystem`]). Files the placement leaves off every device pass straight
//! through, syncs included.

use crate::fs::{FileSystem, OpenMode, Storage};
use lodestore_core::{Error, Result};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Most devices one emulation has.
pub const DEVICES_MAX: usize = 256;

/// What one emulated device sustains.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskModel {
    /// Bytes per second a read or write moves.
    pub bytes_per_s: u64,
    /// Time a sync takes once the writes before it are transferred.
    pub sync_latency: Duration,
    /// Time each read waits beyond its transfer, beside the other reads rather than queued
    /// behind them: the seek and rotation of a disk in an array that serves many reads at
    /// once (Hasse & Weikum's data disks), or an SSD's access time. Zero: reads cost only
    /// their transfer.
    pub read_latency: Duration,
}

impl DiskModel {
    fn transfer(&self, bytes: usize) -> Duration {
        Duration::from_nanos((bytes as u128 * 1_000_000_000 / self.bytes_per_s as u128) as u64)
    }
}

/// What one device did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceStats {
    pub bytes_written: u64,
    pub bytes_read: u64,
    pub syncs: u64,
}

struct Device {
    /// When everything queued on the device so far is done.
    free_at: Mutex<Instant>,
    bytes_written: AtomicU64,
    bytes_read: AtomicU64,
    syncs: AtomicU64,
}

impl Device {
    fn new() -> Device {
        Device {
            free_at: Mutex::new(Instant::now()),
            bytes_written: AtomicU64::new(0),
            bytes_read: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
        }
    }

    /// Queues `busy` of work on the device; returns when it will be done.
    fn queue(&self, busy: Duration) -> Instant {
        let mut free_at = self.free_at.lock().unwrap_or_else(|e| e.into_inner());
        let start = (*free_at).max(Instant::now());
        *free_at = start + busy;
        *free_at
    }
}

fn wait_until(at: Instant) {
    let now = Instant::now();
    if at > now {
        std::thread::sleep(at - now);
    }
}

/// Says which device a file lives on; `None` leaves it on the file system beneath as it is.
pub type Placement = dyn Fn(&Path) -> Option<usize> + Send + Sync;

/// A file system whose files live on emulated devices (see the module's documentation).
pub struct EmulatedDisks {
    base: Arc<dyn FileSystem>,
    model: DiskModel,
    devices: Vec<Arc<Device>>,
    place: Box<Placement>,
}

impl EmulatedDisks {
    /// `devices` devices of `model` over `base`; `place` puts each file on one of them (an
    /// index past the last is refused when the file is opened).
    pub fn new(
        base: Arc<dyn FileSystem>,
        model: DiskModel,
        devices: usize,
        place: Box<Placement>,
    ) -> Result<EmulatedDisks> {
        if devices == 0 || devices > DEVICES_MAX {
            return Err(Error::InvalidArgument(format!(
                "emulated devices: {devices}; 1 to {DEVICES_MAX}"
            )));
        }
        if model.bytes_per_s == 0 {
            return Err(Error::InvalidArgument(
                "an emulated device moves at least one byte a second".into(),
            ));
        }
        Ok(EmulatedDisks {
            base,
            model,
            devices: (0..devices).map(|_| Arc::new(Device::new())).collect(),
            place,
        })
    }

    /// What each device did so far.
    pub fn stats(&self) -> Vec<DeviceStats> {
        self.devices
            .iter()
            .map(|d| DeviceStats {
                bytes_written: d.bytes_written.load(Ordering::Relaxed),
                bytes_read: d.bytes_read.load(Ordering::Relaxed),
                syncs: d.syncs.load(Ordering::Relaxed),
            })
            .collect()
    }
}

struct EmulatedFile {
    inner: Arc<dyn Storage>,
    model: DiskModel,
    device: Arc<Device>,
}

impl Storage for EmulatedFile {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.inner.read_at(offset, buf)?;
        self.device
            .bytes_read
            .fetch_add(buf.len() as u64, Ordering::Relaxed);
        let transferred = self.device.queue(self.model.transfer(buf.len()));
        wait_until(transferred.max(Instant::now() + self.model.read_latency));
        Ok(())
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.inner.write_at(offset, data)?;
        self.device
            .bytes_written
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        self.device.queue(self.model.transfer(data.len()));
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        self.device.syncs.fetch_add(1, Ordering::Relaxed);
        wait_until(self.device.queue(self.model.sync_latency));
        Ok(())
    }

    fn len(&self) -> Result<u64> {
        self.inner.len()
    }

    fn set_len(&self, len: u64) -> Result<()> {
        self.inner.set_len(len)
    }

    fn path(&self) -> &Path {
        self.inner.path()
    }
}

impl FileSystem for EmulatedDisks {
    fn open(&self, path: &Path, mode: OpenMode) -> Result<Arc<dyn Storage>> {
        let inner = self.base.open(path, mode)?;
        match (self.place)(path) {
            None => Ok(inner),
            Some(d) => {
                let device = self.devices.get(d).ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "{} placed on emulated device {d}, past the {} there are",
                        path.display(),
                        self.devices.len()
                    ))
                })?;
                Ok(Arc::new(EmulatedFile {
                    inner,
                    model: self.model,
                    device: device.clone(),
                }))
            }
        }
    }

    fn exists(&self, path: &Path) -> bool {
        self.base.exists(path)
    }

    fn create_dir_all(&self, path: &Path) -> Result<()> {
        self.base.create_dir_all(path)
    }

    fn is_dir(&self, path: &Path) -> bool {
        self.base.is_dir(path)
    }

    fn remove(&self, path: &Path) -> Result<()> {
        self.base.remove(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.base.rename(from, to)
    }

    fn list(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        self.base.list(dir)
    }

    fn list_dirs(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        self.base.list_dirs(dir)
    }

    fn rename_dir(&self, from: &Path, to: &Path) -> Result<()> {
        self.base.rename_dir(from, to)
    }

    fn remove_dir_all(&self, path: &Path) -> Result<()> {
        self.base.remove_dir_all(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryFileSystem;

    fn disks(bytes_per_s: u64, latency_ms: u64) -> EmulatedDisks {
        EmulatedDisks::new(
            Arc::new(MemoryFileSystem::new()),
            DiskModel {
                bytes_per_s,
                sync_latency: Duration::from_millis(latency_ms),
                read_latency: Duration::ZERO,
            },
            2,
            Box::new(|p: &Path| {
                let name = p.file_name()?.to_str()?;
                name.strip_prefix("dev")?.parse().ok()
            }),
        )
        .unwrap()
    }

    /// When everything queued on device `d` is done: the device's own clock, so the tests
    /// check the queueing without upper bounds on wall time that a loaded machine could miss.
    fn free_at(fs: &EmulatedDisks, d: usize) -> Instant {
        *fs.devices[d].free_at.lock().unwrap()
    }

    #[test]
    fn a_write_queues_its_transfer_and_a_sync_waits_for_it_and_the_latency() {
        let fs = disks(1_000_000, 20);
        let f = fs.open(Path::new("/dev0"), OpenMode::CreateNew).unwrap();
        let started = Instant::now();
        f.write_at(0, &[7u8; 50_000]).unwrap(); // 50 ms of transfer, queued
        assert!(free_at(&fs, 0) >= started + Duration::from_millis(50));
        f.sync().unwrap();
        assert!(started.elapsed() >= Duration::from_millis(70));
        let mut back = [0u8; 50_000];
        f.read_at(0, &mut back).unwrap();
        assert!(started.elapsed() >= Duration::from_millis(120));
        assert_eq!(back, [7u8; 50_000]);
        assert_eq!(
            fs.stats()[0],
            DeviceStats {
                bytes_written: 50_000,
                bytes_read: 50_000,
                syncs: 1
            }
        );
        assert_eq!(fs.stats()[1], DeviceStats::default());
    }

    #[test]
    fn a_write_returns_before_its_transfer_is_done() {
        // Ten seconds of transfer queued; the write itself must not wait for it.
        let fs = disks(1_000, 0);
        let f = fs.open(Path::new("/dev0"), OpenMode::CreateNew).unwrap();
        let started = Instant::now();
        f.write_at(0, &[1u8; 10_000]).unwrap();
        assert!(started.elapsed() < Duration::from_secs(5));
        assert!(free_at(&fs, 0) >= started + Duration::from_secs(10));
    }

    #[test]
    fn devices_run_side_by_side_and_unplaced_files_pass_through() {
        let fs = disks(1_000_000, 0);
        let a = fs.open(Path::new("/dev0"), OpenMode::CreateNew).unwrap();
        let b = fs.open(Path::new("/dev1"), OpenMode::CreateNew).unwrap();
        let other = fs.open(Path::new("/other"), OpenMode::CreateNew).unwrap();
        let started = Instant::now();
        a.write_at(0, &[1u8; 60_000]).unwrap();
        b.write_at(0, &[1u8; 60_000]).unwrap();
        // Device 1's transfer did not queue behind device 0's (that would end 60 ms later).
        let (end_a, end_b) = (free_at(&fs, 0), free_at(&fs, 1));
        assert!(end_a >= started + Duration::from_millis(60));
        assert!(end_b >= started + Duration::from_millis(60));
        assert!(end_b < end_a + Duration::from_millis(60), "in parallel");
        // A file on no device adds nothing to any device's queue.
        other.write_at(0, &[1u8; 1_000_000]).unwrap();
        other.sync().unwrap();
        assert_eq!((free_at(&fs, 0), free_at(&fs, 1)), (end_a, end_b));
        a.sync().unwrap();
        b.sync().unwrap();
        assert!(started.elapsed() >= Duration::from_millis(60));
    }

    #[test]
    fn reads_wait_their_latency_side_by_side() {
        let fs = EmulatedDisks::new(
            Arc::new(MemoryFileSystem::new()),
            DiskModel {
                bytes_per_s: 1_000_000_000,
                sync_latency: Duration::ZERO,
                read_latency: Duration::from_millis(40),
            },
            1,
            Box::new(|_: &Path| Some(0)),
        )
        .unwrap();
        let f = fs.open(Path::new("/data"), OpenMode::CreateNew).unwrap();
        f.write_at(0, &[3u8; 4096]).unwrap();
        let started = Instant::now();
        let readers: Vec<_> = (0..4)
            .map(|_| {
                let f = f.clone();
                std::thread::spawn(move || {
                    let mut page = [0u8; 4096];
                    f.read_at(0, &mut page).unwrap();
                    (Instant::now(), page[4095])
                })
            })
            .collect();
        let done: Vec<_> = readers.into_iter().map(|r| r.join().unwrap()).collect();
        for (at, byte) in &done {
            assert_eq!(*byte, 3);
            assert!(*at >= started + Duration::from_millis(40));
        }
        // Not queued: four reads end within one latency of each other, not 40 ms apart.
        let first = done.iter().map(|d| d.0).min().unwrap();
        let last = done.iter().map(|d| d.0).max().unwrap();
        assert!(
            last < first + Duration::from_millis(40) * 3,
            "{:?}",
            last - first
        );
        assert_eq!(fs.stats()[0].bytes_read, 4 * 4096);
    }

    #[test]
    fn a_file_placed_past_the_devices_is_refused() {
        let fs = disks(1_000, 0);
        let Err(e) = fs.open(Path::new("/dev7"), OpenMode::CreateNew) else {
            panic!("a file past the devices opened")
        };
        assert!(e.to_string().contains("device 7"), "{e}");
        assert!(EmulatedDisks::new(
            Arc::new(MemoryFileSystem::new()),
            DiskModel {
                bytes_per_s: 0,
                sync_latency: Duration::ZERO,
                read_latency: Duration::ZERO,
            },
            1,
            Box::new(|_: &Path| None)
        )
        .is_err());
    }
}
