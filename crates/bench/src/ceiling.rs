//! The machine's limits for durable writes and for reading back, measured on the file system
//! the stores use: the latency of one small write plus fdatasync and the bandwidth of large
//! writes plus one fdatasync ([`measure`]), and the bandwidth of reading a file sequentially
//! from the disk, not from the page cache ([`sequential_read`]). Benchmarks of durable commits
//! and of restarts report against them, measured in the same run.

use lodestore::{Error, FileSystem, OpenMode, RealFileSystem, Result};
use std::path::Path;
use std::time::Instant;

/// Small synced writes the latency probe times.
const PROBE_SYNCS: usize = 500;
const PROBE_BATCH_BYTES: usize = 8 << 20;
const PROBE_BATCHES: usize = 5;
/// Bytes of the file the read probe reads, and of each read (what a log scan reads at once).
const READ_PROBE_BYTES: usize = 64 << 20;
const READ_PROBE_CHUNK: usize = 1 << 20;

/// The machine's limits, measured.
#[derive(Clone, Copy, Debug)]
pub struct Ceiling {
    pub fdatasync_median_us: f64,
    pub batched_sync_mb_per_s: f64,
}

/// Measures both limits with a probe file in `dir`, overwriting a pre-written file as a log
/// does; the file is removed after.
pub fn measure(dir: &Path) -> Result<Ceiling> {
    let path = dir.join("fsync-probe");
    if path.exists() {
        std::fs::remove_file(&path).map_err(|e| Error::io(&path, "remove", e))?;
    }
    let file = RealFileSystem.open(&path, OpenMode::CreateNew)?;
    let zeros = vec![0u8; PROBE_BATCH_BYTES];
    file.write_at(0, &zeros)?;
    file.sync()?;
    let small = [7u8; 512];
    let mut latencies = Vec::with_capacity(PROBE_SYNCS);
    for i in 0..PROBE_SYNCS {
        let started = Instant::now();
        file.write_at((i * 512) as u64, &small)?;
        file.sync()?;
        latencies.push(started.elapsed().as_secs_f64() * 1e6);
    }
    let batch = vec![9u8; PROBE_BATCH_BYTES];
    let started = Instant::now();
    for _ in 0..PROBE_BATCHES {
        file.write_at(0, &batch)?;
        file.sync()?;
    }
    let seconds = started.elapsed().as_secs_f64();
    drop(file);
    std::fs::remove_file(&path).map_err(|e| Error::io(&path, "remove", e))?;
    latencies.sort_by(|a, b| a.total_cmp(b));
    Ok(Ceiling {
        fdatasync_median_us: latencies[latencies.len() / 2],
        batched_sync_mb_per_s: (PROBE_BATCH_BYTES * PROBE_BATCHES) as f64 / seconds / 1e6,
    })
}

/// MB/s of reading a file of 64 MiB written in `dir` and dropped from the page cache, in reads
/// of 1 MiB; the file is removed after. Separate from
/// [`measure`]: its 64 MiB of writes would disturb a commit measurement that follows.
pub fn sequential_read(dir: &Path) -> Result<f64> {
    let path = dir.join("read-probe");
    if path.exists() {
        std::fs::remove_file(&path).map_err(|e| Error::io(&path, "remove", e))?;
    }
    let file = RealFileSystem.open(&path, OpenMode::CreateNew)?;
    // Bytes that no layer below could store as a hole or compress away.
    let mut chunk = vec![0u8; READ_PROBE_CHUNK];
    for (i, byte) in chunk.iter_mut().enumerate() {
        *byte = (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[3];
    }
    for at in (0..READ_PROBE_BYTES).step_by(READ_PROBE_CHUNK) {
        file.write_at(at as u64, &chunk)?;
    }
    file.sync()?;
    crate::workspace::evict_from_page_cache(&path)?;
    let started = Instant::now();
    for at in (0..READ_PROBE_BYTES).step_by(READ_PROBE_CHUNK) {
        file.read_at(at as u64, &mut chunk)?;
    }
    let seconds = started.elapsed().as_secs_f64();
    drop(file);
    std::fs::remove_file(&path).map_err(|e| Error::io(&path, "remove", e))?;
    Ok(READ_PROBE_BYTES as f64 / seconds.max(1e-9) / 1e6)
}
