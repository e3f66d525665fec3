//! The storage layer: every byte Lodestore keeps on disk passes through here.
//!
//! - [`fs`]: the [`Storage`] trait (positional read/write, sync, length) and the [`FileSystem`]
//!   that opens files. All file I/O goes through these two traits so that tests can substitute a
//!   file system that crashes, tears and corrupts writes.
//! - [`page`]: the header every page carries (checksum, format version, kind, LSN, number).
//! - [`superblock`], [`slotted`], [`large`], [`spacemap`]: the layouts of each page kind.
//! - [`volume`]: one data file of fixed-size pages, read and written whole and checksummed;
//!   [`unwritten`]: the pages it grew by without writing them yet.
//! - [`doublewrite`]: the ring of page slots a page goes through before a home write a crash
//!   could tear.
//! - [`staging`]: a folder built whole before anything reads it (a new store), its syncs
//!   deferred to one pass at the end.

pub mod bytes;
pub mod directory;
pub mod doublewrite;
pub mod emulated;
pub mod fs;
pub mod large;
pub mod memory;
pub mod overlay;
pub mod page;
pub mod sim;
pub mod slotted;
pub mod spacemap;
pub mod staging;
pub mod superblock;
pub mod unwritten;
pub mod volume;

pub use emulated::{DiskModel, EmulatedDisks};
pub use fs::{FileSystem, OpenMode, RealFileSystem, Storage};
pub use memory::MemoryFileSystem;
pub use overlay::OverlayFileSystem;
pub use page::PageKind;
pub use sim::{Fault, SimFileSystem};
pub use staging::StagingFileSystem;
pub use volume::{Volume, DATA_FILE_NAME};

/// The size of the system's memory pages (4 KiB on most x86-64 systems, 16 or 64 KiB on some
/// ARM ones): what `mprotect` and `madvise` work in. 4096 where the system does not say.
pub fn os_page_bytes() -> usize {
    // SAFETY: sysconf has no preconditions.
    let bytes = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if bytes > 0 {
        bytes as usize
    } else {
        4096
    }
}
