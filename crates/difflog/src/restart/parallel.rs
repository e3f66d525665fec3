//! Parallel restart (section 4.2). The XOR restarts decide every change from its record and
//! the checkpoint alone, so the streams replay on threads of their own into one image, and the
//! backup can be XORed into a zeroed image while they do (level 4 of Table 1).

use super::{one_pass, two_pass, Image, MemoryImage, Replay, StreamTail};
use lodestore_core::{Error, Result};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Which XOR restart replays each stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XorRestart {
    OnePass,
    TwoPass,
}

/// Replays every stream into `image`, on up to `threads` threads (each takes the next stream
/// not yet replayed). Returns the sum of the streams' replays.
pub fn replay_streams(
    restart: XorRestart,
    tails: &[StreamTail<'_>],
    checkpoint_id: bool,
    image: &dyn Image,
    threads: usize,
) -> Result<Replay> {
    let next = AtomicUsize::new(0);
    let total = Mutex::new(Ok(Replay::default()));
    let work = || loop {
        let s = next.fetch_add(1, Ordering::Relaxed);
        let Some(tail) = tails.get(s) else { return };
        let result = match restart {
            XorRestart::OnePass => one_pass(tail, checkpoint_id, image),
            XorRestart::TwoPass => two_pass(tail, checkpoint_id, image),
        };
        let mut total = total.lock().unwrap_or_else(|e| e.into_inner());
        match (&mut *total, result) {
            (Ok(sum), Ok(replay)) => sum.add(&replay),
            (Ok(_), Err(e)) => *total = Err(e),
            (Err(_), _) => return,
        }
    };
    let threads = threads.clamp(1, tails.len().max(1));
    std::thread::scope(|scope| {
        for _ in 1..threads {
            scope.spawn(work);
        }
        work();
    });
    total.into_inner().unwrap_or_else(|e| e.into_inner())
}

/// Level 4: `image` starts as zeros; `loaders` threads XOR the backup's pages into it (read by
/// `read_backup_page(page, buf)`) while the streams replay on `threads` more.
pub fn restore_level4(
    restart: XorRestart,
    image: &MemoryImage,
    read_backup_page: &(dyn Fn(usize, &mut [u8]) -> Result<()> + Sync),
    loaders: usize,
    tails: &[StreamTail<'_>],
    checkpoint_id: bool,
    threads: usize,
) -> Result<Replay> {
    debug_assert!((0..image.page_count()).all(|p| image.page(p).iter().all(|&b| b == 0)));
    let next = AtomicUsize::new(0);
    let failed: Mutex<Option<Error>> = Mutex::new(None);
    let load = || {
        let mut buf = vec![0u8; image.page_size()];
        loop {
            let page = next.fetch_add(1, Ordering::Relaxed);
            if page >= image.page_count() {
                return;
            }
            if let Err(e) = read_backup_page(page, &mut buf) {
                failed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .get_or_insert(e);
                return;
            }
            image.xor_page(page, &buf);
        }
    };
    let replay = std::thread::scope(|scope| {
        for _ in 0..loaders.max(1) {
            scope.spawn(load);
        }
        replay_streams(restart, tails, checkpoint_id, image, threads)
    })?;
    match failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(e) => Err(e),
        None => Ok(replay),
    }
}
