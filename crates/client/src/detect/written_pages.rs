//! The kernel's written bits as a detector (for whole-page logging, QuickStore section 3.4.1,
//! which needs to know which pages a transaction dirtied but no pre-images): the client cache's
//! user view is write-protected with userfaultfd in asynchronous mode (Linux 6.7), so a write
//! never stops the writer; the kernel lifts the protection of the page itself. At commit, and
//! when a frame leaves the cache, one PAGEMAP_SCAN of `/proc/self/pagemap` lists the pages
//! written since and write-protects them again in the same call.
//!
//! The arena is mapped twice, like the page-protection arena: frames are filled through the
//! shadow view, which is not registered, so a fetch does not count as a write.
//!
//! The kernel definitions are written out from `linux/fs.h` (the build machine's headers
//! predate them).

use super::protection::{map_twice, os_page_bytes, unmap};
use super::userfaultfd;
use lodestore_core::frames::FrameId;
use lodestore_core::{Error, Result};
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr;

/// `_IOWR('f', 16, struct pm_scan_arg)`.
const PAGEMAP_SCAN: libc::c_ulong = 0xC060_6610;
/// Write-protect the pages the scan matched.
const PM_SCAN_WP_MATCHING: u64 = 1 << 0;
/// Fail rather than report a page that is not under asynchronous write protection.
const PM_SCAN_CHECK_WPASYNC: u64 = 1 << 1;
/// The page was written since it was last write-protected.
const PAGE_IS_WRITTEN: u64 = 1 << 1;
/// Regions one scan call returns at most; the scan resumes where it stopped.
const REGIONS_PER_CALL: usize = 256;

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

#[repr(C)]
#[derive(Default)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

pub struct WrittenPageArena {
    user: usize,
    shadow: usize,
    len: usize,
    frame_bytes: usize,
    uffd: OwnedFd,
    pagemap: File,
    regions: Vec<PageRegion>,
    scans: u64,
}

// SAFETY: the arena owns its mappings and descriptors; the raw addresses are plain numbers
// used only through `&self` / `&mut self`.
unsafe impl Send for WrittenPageArena {}

impl WrittenPageArena {
    /// Maps `frame_count` frames of `frame_bytes` (a multiple of the OS page), all
    /// write-protected.
    pub fn new(frame_bytes: usize, frame_count: usize) -> Result<WrittenPageArena> {
        let os_page = os_page_bytes();
        if !frame_bytes.is_multiple_of(os_page) {
            return Err(Error::InvalidArgument(format!(
                "written-page detection needs pages that are a multiple of the {os_page}-byte \
                 OS page"
            )));
        }
        let len = frame_bytes
            .checked_mul(frame_count)
            .ok_or_else(|| Error::InvalidArgument("client cache is too large".into()))?;
        let uffd = userfaultfd::open_async()?;
        let pagemap = File::open("/proc/self/pagemap")
            .map_err(|e| Error::io("/proc/self/pagemap", "open", e))?;
        let (user, shadow) = map_twice(len, true)?;
        let arena = WrittenPageArena {
            user,
            shadow,
            len,
            frame_bytes,
            uffd,
            pagemap,
            regions: vec![PageRegion::default(); REGIONS_PER_CALL],
            scans: 0,
        };
        // Populate the user view so every page-table entry exists to carry the protection.
        // SAFETY: both views span `len` bytes; the shadow view is writable.
        unsafe {
            ptr::write_bytes(arena.shadow as *mut u8, 0, len);
            let mut sum = 0u8;
            for offset in (0..len).step_by(os_page) {
                sum = sum.wrapping_add(ptr::read_volatile((user + offset) as *const u8));
            }
            std::hint::black_box(sum);
        }
        userfaultfd::register(&arena.uffd, user, len)?;
        if !userfaultfd::set_writable(arena.uffd.as_raw_fd(), user, len, false) {
            return Err(Error::io(
                "userfaultfd",
                "UFFDIO_WRITEPROTECT",
                std::io::Error::last_os_error(),
            ));
        }
        Ok(arena)
    }

    pub fn user(&self) -> *mut u8 {
        self.user as *mut u8
    }

    pub fn shadow(&self) -> *mut u8 {
        self.shadow as *mut u8
    }

    /// PAGEMAP_SCAN calls made so far.
    pub fn scans(&self) -> u64 {
        self.scans
    }

    /// The frames of `frames` written since the last scan (each once, in order), protected
    /// again.
    pub fn take_written(&mut self, frames: std::ops::Range<FrameId>) -> Result<Vec<FrameId>> {
        debug_assert!(frames.end * self.frame_bytes <= self.len);
        let start = (self.user + frames.start * self.frame_bytes) as u64;
        let end = (self.user + frames.end * self.frame_bytes) as u64;
        let mut written: Vec<FrameId> = Vec::new();
        let mut at = start;
        while at < end {
            let mut arg = PmScanArg {
                size: size_of::<PmScanArg>() as u64,
                flags: PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC,
                start: at,
                end,
                vec: self.regions.as_mut_ptr() as u64,
                vec_len: self.regions.len() as u64,
                category_mask: PAGE_IS_WRITTEN,
                return_mask: PAGE_IS_WRITTEN,
                ..PmScanArg::default()
            };
            // SAFETY: PAGEMAP_SCAN reads `arg` and writes at most `vec_len` regions to `vec`,
            // which points at that many.
            let found = unsafe { libc::ioctl(self.pagemap.as_raw_fd(), PAGEMAP_SCAN, &mut arg) };
            self.scans += 1;
            if found < 0 {
                return Err(Error::io(
                    "/proc/self/pagemap",
                    "PAGEMAP_SCAN",
                    std::io::Error::last_os_error(),
                ));
            }
            for region in &self.regions[..found as usize] {
                let first = (region.start as usize - self.user) / self.frame_bytes;
                let last = (region.end as usize - self.user).div_ceil(self.frame_bytes);
                for frame in first..last {
                    if written.last() != Some(&frame) {
                        written.push(frame);
                    }
                }
            }
            if arg.walk_end <= at {
                break; // no progress: the kernel says the walk is done
            }
            at = arg.walk_end;
        }
        Ok(written)
    }
}

impl Drop for WrittenPageArena {
    fn drop(&mut self) {
        unmap(self.user, self.shadow, self.len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_definitions_have_the_kernel_sizes() {
        assert_eq!(size_of::<PmScanArg>(), 96);
        assert_eq!(size_of::<PageRegion>(), 24);
    }

    #[test]
    fn writes_through_the_user_view_are_found_once_and_fills_are_not() {
        let frame_bytes = 8192;
        let mut arena = match WrittenPageArena::new(frame_bytes, 64) {
            Ok(arena) => arena,
            Err(Error::Unsupported(reason)) => {
                eprintln!("skipped: {reason}");
                return;
            }
            Err(other) => panic!("{other}"),
        };
        assert!(arena.take_written(0..64).unwrap().is_empty());
        // SAFETY: offsets inside the 64 frames of both views.
        unsafe {
            *arena.user().add(3 * frame_bytes + 100) = 1;
            *arena.user().add(4 * frame_bytes + 5000) = 2; // second OS page of frame 4
            *arena.user().add(40 * frame_bytes) = 3;
            *arena.shadow().add(10 * frame_bytes) = 4; // a fill: not a write
        }
        assert_eq!(arena.take_written(0..64).unwrap(), vec![3, 4, 40]);
        // Protected again by the scan: nothing until the next write.
        assert!(arena.take_written(0..64).unwrap().is_empty());
        // SAFETY: as above.
        unsafe {
            *arena.user().add(4 * frame_bytes) = 5;
        }
        assert!(arena.take_written(0..4).unwrap().is_empty());
        assert_eq!(arena.take_written(4..5).unwrap(), vec![4]);
        // SAFETY: as above.
        unsafe {
            assert_eq!(*arena.shadow().add(4 * frame_bytes), 5);
            assert_eq!(*arena.user().add(10 * frame_bytes), 4);
        }
    }
}
