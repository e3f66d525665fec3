//! The userfaultfd write-protect mechanism for page protection (Linux 5.19 and later for
//! shared memory): frames are write-protected in the page tables, without splitting the
//! mapping, and a write to one blocks the writing thread while a handler thread of the arena
//! takes the capture and removes the protection, which wakes the writer.
//!
//! The few kernel definitions needed are written out here from `linux/userfaultfd.h`: the
//! crate that wraps them generates its bindings with libclang at build time, which a fresh
//! machine does not have.

use lodestore_core::{Error, Result};
use std::ffi::c_void;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

const UFFD_API: u64 = 0xAA;
/// `_IOWR(0xAA, 0x3F, struct uffdio_api)`.
const UFFDIO_API: libc::c_ulong = 0xC018_AA3F;
/// `_IOWR(0xAA, 0x00, struct uffdio_register)`.
const UFFDIO_REGISTER: libc::c_ulong = 0xC020_AA00;
/// `_IOWR(0xAA, 0x06, struct uffdio_writeprotect)`.
const UFFDIO_WRITEPROTECT: libc::c_ulong = 0xC018_AA06;
const UFFDIO_REGISTER_MODE_WP: u64 = 1 << 1;
const UFFDIO_WRITEPROTECT_MODE_WP: u64 = 1 << 0;
/// Write protection of shared memory (our arena is a memory file).
const UFFD_FEATURE_WP_HUGETLBFS_SHMEM: u64 = 1 << 12;
/// Protection of page-table entries not populated yet (Linux 6.5); used when offered.
const UFFD_FEATURE_WP_UNPOPULATED: u64 = 1 << 13;
/// Asynchronous write protection (Linux 6.7): a write to a protected page does not stop the
/// writer; the kernel lifts the protection itself, and PAGEMAP_SCAN reports the page written.
const UFFD_FEATURE_WP_ASYNC: u64 = 1 << 15;
const UFFD_EVENT_PAGEFAULT: u8 = 0x12;
const UFFD_PAGEFAULT_FLAG_WP: u64 = 1 << 1;

#[repr(C)]
#[derive(Default)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

#[repr(C)]
struct UffdioRange {
    start: u64,
    len: u64,
}

#[repr(C)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}

#[repr(C)]
struct UffdioWriteprotect {
    range: UffdioRange,
    mode: u64,
}

/// `struct uffd_msg`, as far as page faults need it.
#[repr(C)]
#[derive(Default)]
struct UffdMsg {
    event: u8,
    reserved: [u8; 7],
    flags: u64,
    address: u64,
    thread_id: u32,
    padding: u32,
}

fn os_error(operation: &'static str) -> Error {
    Error::io("userfaultfd", operation, std::io::Error::last_os_error())
}

/// A userfaultfd with the write-protect features negotiated.
fn open_with(features: u64) -> Result<(OwnedFd, u64)> {
    // Non-blocking: poll on a blocking userfaultfd always reports an error, and the handler
    // thread must wait on the fault queue and its stop pipe together.
    // SAFETY: the userfaultfd system call takes flags only; the descriptor it returns is owned.
    let fd = unsafe { libc::syscall(libc::SYS_userfaultfd, libc::O_CLOEXEC | libc::O_NONBLOCK) };
    if fd < 0 {
        return Err(os_error("userfaultfd"));
    }
    // SAFETY: `fd` is a fresh descriptor no one else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    let mut api = UffdioApi {
        api: UFFD_API,
        features,
        ioctls: 0,
    };
    // SAFETY: UFFDIO_API reads and writes one `struct uffdio_api`.
    if unsafe { libc::ioctl(fd.as_raw_fd(), UFFDIO_API, &mut api) } != 0 {
        return Err(os_error("UFFDIO_API"));
    }
    Ok((fd, api.features))
}

/// Opens a userfaultfd able to write-protect shared memory.
pub fn open() -> Result<OwnedFd> {
    // A first descriptor asks for nothing, and so learns what the kernel offers.
    let (_, offered) = open_with(0)?;
    if offered & UFFD_FEATURE_WP_HUGETLBFS_SHMEM == 0 {
        return Err(Error::Unsupported(
            "this kernel cannot write-protect shared memory with userfaultfd (Linux 5.19+)".into(),
        ));
    }
    let wanted = UFFD_FEATURE_WP_HUGETLBFS_SHMEM | (offered & UFFD_FEATURE_WP_UNPOPULATED);
    Ok(open_with(wanted)?.0)
}

/// Opens a userfaultfd whose write protection of shared memory is asynchronous.
pub fn open_async() -> Result<OwnedFd> {
    let (_, offered) = open_with(0)?;
    let needed = UFFD_FEATURE_WP_HUGETLBFS_SHMEM | UFFD_FEATURE_WP_ASYNC;
    if offered & needed != needed {
        return Err(Error::Unsupported(
            "this kernel has no asynchronous userfaultfd write protection of shared memory \
             (Linux 6.7+)"
                .into(),
        ));
    }
    Ok(open_with(needed | (offered & UFFD_FEATURE_WP_UNPOPULATED))?.0)
}

/// Registers `start..start + len` for write-protect faults.
pub fn register(fd: &OwnedFd, start: usize, len: usize) -> Result<()> {
    let mut register = UffdioRegister {
        range: UffdioRange {
            start: start as u64,
            len: len as u64,
        },
        mode: UFFDIO_REGISTER_MODE_WP,
        ioctls: 0,
    };
    // SAFETY: UFFDIO_REGISTER reads and writes one `struct uffdio_register`.
    if unsafe { libc::ioctl(fd.as_raw_fd(), UFFDIO_REGISTER, &mut register) } != 0 {
        return Err(os_error("UFFDIO_REGISTER"));
    }
    Ok(())
}

/// Write-protects (or, with `writable`, unprotects and wakes the threads waiting on) a range.
/// Async-signal-safe and callable from the handler thread.
pub fn set_writable(fd: libc::c_int, start: usize, len: usize, writable: bool) -> bool {
    let mut protect = UffdioWriteprotect {
        range: UffdioRange {
            start: start as u64,
            len: len as u64,
        },
        mode: if writable {
            0
        } else {
            UFFDIO_WRITEPROTECT_MODE_WP
        },
    };
    // SAFETY: UFFDIO_WRITEPROTECT reads one `struct uffdio_writeprotect`.
    unsafe { libc::ioctl(fd, UFFDIO_WRITEPROTECT, &mut protect) == 0 }
}

/// What the handler thread waits for.
pub enum Event {
    /// A write to a protected page at this address.
    WriteFault(usize),
    /// The arena is being dropped.
    Stop,
}

/// Waits for the next write-protect fault on `fd`, or for a byte on `stop`. For `spin` it
/// polls the queue without sleeping first: faults come in bursts (a transaction's first
/// writes), and a sleeping handler costs each fault a wake-up of its CPU.
pub fn next_event(fd: libc::c_int, stop: libc::c_int, spin: Duration) -> Result<Event> {
    let spinning_since = Instant::now();
    loop {
        if let Some(event) = try_read(fd)? {
            return Ok(event);
        }
        if spinning_since.elapsed() < spin {
            std::hint::spin_loop();
            continue;
        }
        let mut polled = [
            libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: stop,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: `polled` is an array of two pollfd structs.
        let ready = unsafe { libc::poll(polled.as_mut_ptr(), 2, -1) };
        if ready < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(os_error("poll"));
        }
        if polled[1].revents != 0 {
            return Ok(Event::Stop);
        }
    }
}

/// Reads one message if one is queued: the fault it reports, or None.
fn try_read(fd: libc::c_int) -> Result<Option<Event>> {
    let mut message = UffdMsg::default();
    // SAFETY: reading at most one `struct uffd_msg` into a buffer of its size.
    let read = unsafe {
        libc::read(
            fd,
            &mut message as *mut UffdMsg as *mut c_void,
            size_of::<UffdMsg>(),
        )
    };
    if read < 0 {
        let error = std::io::Error::last_os_error();
        if error.kind() == std::io::ErrorKind::WouldBlock
            || error.kind() == std::io::ErrorKind::Interrupted
        {
            return Ok(None);
        }
        return Err(Error::io("userfaultfd", "read", error));
    }
    let fault = read as usize == size_of::<UffdMsg>()
        && message.event == UFFD_EVENT_PAGEFAULT
        && message.flags & UFFD_PAGEFAULT_FLAG_WP != 0;
    Ok(fault.then_some(Event::WriteFault(message.address as usize)))
}

/// A pipe whose write end, once written or closed, stops the handler thread.
pub fn stop_pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills two descriptors, owned below.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(os_error("pipe2"));
    }
    // SAFETY: both descriptors are fresh and owned by no one else.
    unsafe { Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_definitions_have_the_kernel_sizes() {
        assert_eq!(size_of::<UffdioApi>(), 24);
        assert_eq!(size_of::<UffdioRegister>(), 32);
        assert_eq!(size_of::<UffdioWriteprotect>(), 24);
        assert_eq!(size_of::<UffdMsg>(), 32);
    }
}
