//! Page protection (QuickStore section 3.2.1; Hosking section 2.2's "pages"): the client cache's
//! frames are read-only until a transaction writes them. The first write to a frame faults; the
//! fault is *captured*: the frame is copied into the recovery buffer (its pre-image) and made
//! writable, and the write runs again. Later writes to the frame cost nothing.
//!
//! Two mechanisms deliver the fault ([`FaultMechanism`]): a SIGSEGV handler with mprotect, run
//! on the writing thread; or userfaultfd write protection (see [`super::userfaultfd`]), where
//! the writing thread waits while the arena's handler thread captures, and which never splits
//! the mapping.
//!
//! The arena is one memory file mapped twice: the *user view*, whose frames are protected and
//! into which references handed to the application point, and the *shadow view*, always
//! writable, through which the client fills frames from the server and stamps LSNs without
//! faulting.
//!
//! Only one frame is *armed* at a time: the one the session is about to hand out for writing
//! (Rust's borrows guarantee that the reference of an earlier call is dead by then). A fault on
//! an armed frame is a capture; a fault anywhere else in an arena, or outside every arena, is a
//! real fault and goes to the handler that was installed before ours (by default: the process
//! dies as it would have).
//!
//! Mappings: every frame made writable splits the user view's mapping, and Linux limits a
//! process to `vm.max_map_count` (65,530 here) mappings. Writable frames are bounded by the
//! recovery buffer (a frame is writable only while its pre-image is in the buffer) and by
//! [`WRITABLE_FRAMES_MAX`]; re-protecting the whole view at the end of a transaction merges it
//! back into one mapping.

use super::userfaultfd::{self, Event};
use lodestore_core::frames::FrameId;
use lodestore_core::{Error, Result};
use std::ffi::c_void;
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;

/// How write faults on protected frames reach Lodestore.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FaultMechanism {
    /// A SIGSEGV handler on the writing thread; mprotect changes protection.
    Signal,
    /// userfaultfd write protection with a handler thread; ioctls change protection.
    Userfaultfd,
}

/// Frames of one arena that may be writable at once; past it the session evicts the oldest
/// pre-images first. Each writable run of frames costs up to two kernel mappings.
pub const WRITABLE_FRAMES_MAX: usize = 16_384;
/// How long the userfaultfd handler thread polls for the next fault before it sleeps. A
/// sleeping handler makes each fault wait for its CPU to wake as well as the writer's: about 60
/// us a fault on a two-CPU virtual machine, against 16-23 us while it polls. The poll must
/// outlast a fault's round trip plus the writer's work before its next fault, or every fault
/// of a burst finds the handler asleep: with 20 us, a round trip of about 20 us on the current
/// build machine and 5 us of work between faults cost 47-60 us a fault, with 100 us 22-24.
const HANDLER_SPIN: std::time::Duration = std::time::Duration::from_micros(100);
/// Protected arenas (sessions using page protection) in one process at once.
pub const ARENAS_MAX: usize = 256;

const PROTECTED: u8 = 0;
const ARMED: u8 = 1;
const WRITABLE: u8 = 2;
const NO_FRAME: usize = usize::MAX;

/// What the fault handler reads and writes for one arena. Lives at a fixed address (boxed) for
/// as long as the arena is registered.
struct TrapShared {
    /// The userfaultfd, or -1 with the signal mechanism.
    uffd: libc::c_int,
    user: usize,
    shadow: usize,
    frame_bytes: usize,
    states: Box<[AtomicU8]>,
    /// Where the handler copies the next pre-image; null when no room was reserved.
    pre_image: AtomicPtr<u8>,
    /// The frame the handler captured since the session last looked.
    captured: AtomicUsize,
    traps: AtomicU64,
}

impl TrapShared {
    /// Makes `len` bytes at `address` of the user view writable or read-only. With
    /// userfaultfd, making them writable also wakes the thread waiting to write them.
    /// Async-signal-safe.
    fn set_writable(&self, address: usize, len: usize, writable: bool) -> bool {
        if self.uffd >= 0 {
            userfaultfd::set_writable(self.uffd, address, len, writable)
        } else {
            set_protection(address, len, writable)
        }
    }

    /// Handles a write fault at `address` inside this arena. False if it is not a write the
    /// session allowed: a real fault.
    ///
    /// Runs in a signal handler: no allocation, no locks, only atomics, a copy and mprotect.
    fn capture(&self, address: usize) -> bool {
        let frame = (address - self.user) / self.frame_bytes;
        match self.states[frame].load(Ordering::Acquire) {
            // Already captured (a second OS page of the frame, or a race): let the write
            // proceed, waking the writer if it waits on userfaultfd.
            WRITABLE => {
                self.uffd < 0
                    || self.set_writable(
                        self.user + frame * self.frame_bytes,
                        self.frame_bytes,
                        true,
                    )
            }
            ARMED => {
                let target = self.pre_image.swap(ptr::null_mut(), Ordering::AcqRel);
                if target.is_null() {
                    report_in_handler(
                        b"lodestore: write fault with no room reserved in the recovery buffer\n",
                    );
                    return false;
                }
                let offset = frame * self.frame_bytes;
                // SAFETY: the shadow view maps the same bytes as the user view and is readable;
                // `target` points at `frame_bytes` bytes the session reserved in its recovery
                // buffer and does not touch until it collects this capture.
                unsafe {
                    ptr::copy_nonoverlapping(
                        (self.shadow + offset) as *const u8,
                        target,
                        self.frame_bytes,
                    );
                }
                // Published before the protection goes: with userfaultfd, removing it wakes the
                // writer, which may then look for the capture.
                self.states[frame].store(WRITABLE, Ordering::Release);
                self.captured.store(frame, Ordering::Release);
                self.traps.fetch_add(1, Ordering::Relaxed);
                if !self.set_writable(self.user + offset, self.frame_bytes, true) {
                    report_in_handler(b"lodestore: could not enable a write to a frame\n");
                    return false;
                }
                true
            }
            _ => false,
        }
    }
}

/// One slot of the registry the handler searches. Plain atomics, so the handler can read a
/// slot while another thread claims or frees it.
struct ArenaSlot {
    claimed: AtomicBool,
    start: AtomicUsize,
    len: AtomicUsize,
    shared: AtomicPtr<TrapShared>,
}

#[allow(clippy::declare_interior_mutable_const)]
const FREE_SLOT: ArenaSlot = ArenaSlot {
    claimed: AtomicBool::new(false),
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    shared: AtomicPtr::new(ptr::null_mut()),
};
static REGISTRY: [ArenaSlot; ARENAS_MAX] = [FREE_SLOT; ARENAS_MAX];

/// The SIGSEGV action that was installed before ours.
static PREVIOUS_ACTION: OnceLock<libc::sigaction> = OnceLock::new();

/// A client cache arena whose frames are write-protected until written.
pub struct ProtectedArena {
    shared: Arc<TrapShared>,
    mechanism: FaultMechanism,
    /// Registry slot (signal mechanism).
    slot: Option<usize>,
    /// The userfaultfd, its handler thread and the pipe end that stops it.
    uffd: Option<OwnedFd>,
    handler: Option<JoinHandle<()>>,
    stop: Option<OwnedFd>,
    len: usize,
    armed: Option<FrameId>,
    writable: usize,
    /// One past the highest frame armed or made writable since the last `protect_all`: the
    /// frames above it are all protected, so that a large arena's reset walks only what was
    /// used.
    touched_end: FrameId,
}

// SAFETY: the raw addresses are owned by this arena alone; it is moved between threads with its
// session, never shared, and the mapping is valid on any thread.
unsafe impl Send for ProtectedArena {}

impl ProtectedArena {
    /// Maps `frame_count` frames of `frame_bytes` (a multiple of the OS page size), all
    /// protected, with faults delivered by `mechanism`.
    pub fn new(
        frame_bytes: usize,
        frame_count: usize,
        mechanism: FaultMechanism,
    ) -> Result<ProtectedArena> {
        let os_page = os_page_bytes();
        if !frame_bytes.is_multiple_of(os_page) {
            return Err(Error::InvalidArgument(format!(
                "page protection needs pages that are a multiple of the {os_page}-byte OS page"
            )));
        }
        let len = frame_bytes
            .checked_mul(frame_count)
            .ok_or_else(|| Error::InvalidArgument("client cache is too large".into()))?;
        let uffd = match mechanism {
            FaultMechanism::Signal => {
                install_handler()?;
                None
            }
            FaultMechanism::Userfaultfd => Some(userfaultfd::open()?),
        };
        let (user, shadow) = map_twice(len, uffd.is_some())?;
        let shared = Arc::new(TrapShared {
            uffd: uffd.as_ref().map_or(-1, |fd| fd.as_raw_fd()),
            user,
            shadow,
            frame_bytes,
            states: (0..frame_count).map(|_| AtomicU8::new(PROTECTED)).collect(),
            pre_image: AtomicPtr::new(ptr::null_mut()),
            captured: AtomicUsize::new(NO_FRAME),
            traps: AtomicU64::new(0),
        });
        // From here on, dropping the arena unmaps the views and stops any handler thread.
        let mut arena = ProtectedArena {
            shared,
            mechanism,
            slot: None,
            uffd: None,
            handler: None,
            stop: None,
            len,
            armed: None,
            writable: 0,
            touched_end: 0,
        };
        match uffd {
            None => {
                arena.slot = claim_slot(user, len, &arena.shared);
                if arena.slot.is_none() {
                    return Err(Error::InvalidArgument(format!(
                        "at most {ARENAS_MAX} sessions may use signal page protection at once"
                    )));
                }
            }
            Some(fd) => arena.start_handler_thread(fd)?,
        }
        Ok(arena)
    }

    /// userfaultfd: populates the user view (so every page-table entry exists to be
    /// protected), registers it, protects it all and starts the thread that captures faults.
    fn start_handler_thread(&mut self, fd: OwnedFd) -> Result<()> {
        let (user, len) = (self.shared.user, self.len);
        // SAFETY: both views span `len` bytes; the shadow view is writable.
        unsafe {
            ptr::write_bytes(self.shadow(), 0, len);
            let mut sum = 0u8;
            for offset in (0..len).step_by(os_page_bytes()) {
                sum = sum.wrapping_add(ptr::read_volatile((user + offset) as *const u8));
            }
            std::hint::black_box(sum);
        }
        userfaultfd::register(&fd, user, len)?;
        if !userfaultfd::set_writable(fd.as_raw_fd(), user, len, false) {
            return Err(Error::io(
                "userfaultfd",
                "UFFDIO_WRITEPROTECT",
                std::io::Error::last_os_error(),
            ));
        }
        let (stop_read, stop_write) = userfaultfd::stop_pipe()?;
        let shared = Arc::clone(&self.shared);
        let raw = fd.as_raw_fd();
        // Polling only pays where the writer has a CPU of its own to run on meanwhile: on one
        // CPU the polling handler holds the writer off instead (pinned to one CPU here, a
        // fault cost 4.1-4.6 us with no polling and 4.7-7.2 with 100 us of it).
        let spin = if std::thread::available_parallelism().map_or(1, |n| n.get()) > 1 {
            HANDLER_SPIN
        } else {
            std::time::Duration::ZERO
        };
        let handler = std::thread::Builder::new()
            .name("lodestore-uffd".into())
            .spawn(move || loop {
                match userfaultfd::next_event(raw, stop_read.as_raw_fd(), spin) {
                    Ok(Event::Stop) => return,
                    Ok(Event::WriteFault(address)) => {
                        if !shared.capture(address) {
                            // A write into the cache that Lodestore did not allow: the process
                            // would have crashed on it without page protection, so it does.
                            eprintln!(
                                "lodestore: write to a protected client cache page at \
                                 {address:#x} that no transaction allowed; aborting"
                            );
                            std::process::abort();
                        }
                    }
                    Err(error) => {
                        eprintln!("lodestore: userfaultfd handler failed: {error}; aborting");
                        std::process::abort();
                    }
                }
            })
            .map_err(|e| Error::io("userfaultfd", "spawn handler thread", e))?;
        self.uffd = Some(fd);
        self.stop = Some(stop_write);
        self.handler = Some(handler);
        Ok(())
    }

    pub fn mechanism(&self) -> FaultMechanism {
        self.mechanism
    }

    /// How many frames may be writable at once: bounded with mprotect, whose every writable
    /// frame splits the mapping; not with userfaultfd.
    pub fn writable_frames_max(&self) -> usize {
        match self.mechanism {
            FaultMechanism::Signal => WRITABLE_FRAMES_MAX,
            FaultMechanism::Userfaultfd => usize::MAX,
        }
    }

    /// Start of the user view (protected frames).
    pub fn user(&self) -> *mut u8 {
        self.shared.user as *mut u8
    }

    /// Start of the shadow view (always writable).
    pub fn shadow(&self) -> *mut u8 {
        self.shared.shadow as *mut u8
    }

    pub fn is_writable(&self, frame: FrameId) -> bool {
        self.shared.states[frame].load(Ordering::Acquire) == WRITABLE
    }

    /// Frames writable now.
    pub fn writable_frames(&self) -> usize {
        self.writable
    }

    /// Lets the next write to `frame` fault into a capture that copies the frame to
    /// `pre_image` (`frame_bytes` bytes the caller reserved). The frame armed before, if it
    /// was not written, goes back to plain protected.
    pub fn arm(&mut self, frame: FrameId, pre_image: *mut u8) {
        debug_assert!(!self.is_writable(frame));
        self.disarm();
        self.shared.pre_image.store(pre_image, Ordering::Release);
        self.shared.states[frame].store(ARMED, Ordering::Release);
        self.touched_end = self.touched_end.max(frame + 1);
        self.armed = Some(frame);
    }

    fn disarm(&mut self) {
        if let Some(frame) = self.armed.take() {
            let _ = self.shared.states[frame].compare_exchange(
                ARMED,
                PROTECTED,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
        self.shared
            .pre_image
            .store(ptr::null_mut(), Ordering::Release);
    }

    /// The frame captured since the last call, if the armed frame was written.
    pub fn take_capture(&mut self) -> Option<FrameId> {
        // Every write through the API asks, and almost always there is none: a plain load
        // answers that, where the swap is a locked instruction (about 6 ns here, 15 % of a
        // hot update). A capture stored just after the load is taken at the next call.
        if self.shared.captured.load(Ordering::Acquire) == NO_FRAME {
            return None;
        }
        let frame = self.shared.captured.swap(NO_FRAME, Ordering::AcqRel);
        if frame == NO_FRAME {
            return None;
        }
        if self.armed == Some(frame) {
            self.armed = None;
        }
        self.writable += 1;
        Some(frame)
    }

    /// Makes `frame` writable without a capture (a page new in this transaction, with no
    /// pre-image to keep).
    pub fn unprotect(&mut self, frame: FrameId) -> Result<()> {
        if self.is_writable(frame) {
            return Ok(());
        }
        if self.armed == Some(frame) {
            self.disarm();
        }
        let offset = frame * self.shared.frame_bytes;
        if !self
            .shared
            .set_writable(self.shared.user + offset, self.shared.frame_bytes, true)
        {
            return Err(protection_error("enable writes to"));
        }
        self.shared.states[frame].store(WRITABLE, Ordering::Release);
        self.touched_end = self.touched_end.max(frame + 1);
        self.writable += 1;
        Ok(())
    }

    /// Makes `frame` read-only again, so its next write faults (re-arming it).
    pub fn protect(&mut self, frame: FrameId) -> Result<()> {
        if self.armed == Some(frame) {
            self.disarm();
        }
        if !self.is_writable(frame) {
            return Ok(());
        }
        let offset = frame * self.shared.frame_bytes;
        if !self
            .shared
            .set_writable(self.shared.user + offset, self.shared.frame_bytes, false)
        {
            return Err(protection_error("protect"));
        }
        self.shared.states[frame].store(PROTECTED, Ordering::Release);
        self.writable -= 1;
        Ok(())
    }

    /// Makes every frame read-only with one call, which also merges the view back into one
    /// kernel mapping.
    pub fn protect_all(&mut self) -> Result<()> {
        self.disarm();
        if self.writable == 0 {
            return Ok(());
        }
        if !self.shared.set_writable(self.shared.user, self.len, false) {
            return Err(protection_error("protect"));
        }
        for state in &self.shared.states[..self.touched_end] {
            state.store(PROTECTED, Ordering::Release);
        }
        debug_assert!(self.shared.states[self.touched_end..]
            .iter()
            .all(|state| state.load(Ordering::Acquire) == PROTECTED));
        self.writable = 0;
        self.touched_end = 0;
        Ok(())
    }

    /// Write faults captured since the arena was made.
    pub fn traps(&self) -> u64 {
        self.shared.traps.load(Ordering::Relaxed)
    }
}

impl Drop for ProtectedArena {
    fn drop(&mut self) {
        if let Some(index) = self.slot {
            let slot = &REGISTRY[index];
            slot.len.store(0, Ordering::Release);
            slot.shared.store(ptr::null_mut(), Ordering::Release);
            slot.start.store(0, Ordering::Release);
            slot.claimed.store(false, Ordering::Release);
        }
        // Closing the pipe's write end stops the handler thread; the userfaultfd closes after.
        drop(self.stop.take());
        if let Some(handler) = self.handler.take() {
            let _ = handler.join();
        }
        drop(self.uffd.take());
        unmap(self.shared.user, self.shared.shadow, self.len);
    }
}

fn claim_slot(start: usize, len: usize, shared: &Arc<TrapShared>) -> Option<usize> {
    let index = REGISTRY.iter().position(|slot| {
        slot.claimed
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    })?;
    let slot = &REGISTRY[index];
    slot.shared
        .store(Arc::as_ptr(shared) as *mut TrapShared, Ordering::Release);
    slot.start.store(start, Ordering::Release);
    slot.len.store(len, Ordering::Release);
    Some(index)
}

pub use lodestore_storage::os_page_bytes;

/// Maps one anonymous memory file twice: the user view read-only (or writable, when userfaultfd
/// protects it), the shadow view writable.
pub(crate) fn map_twice(len: usize, user_writable: bool) -> Result<(usize, usize)> {
    let os_error = |operation: &'static str| {
        Error::io(
            "client cache arena",
            operation,
            std::io::Error::last_os_error(),
        )
    };
    // SAFETY: plain system calls on a descriptor this function owns; every failure is checked,
    // and what was made before it is released.
    unsafe {
        let fd = libc::memfd_create(c"lodestore-client-cache".as_ptr(), libc::MFD_CLOEXEC);
        if fd < 0 {
            return Err(os_error("memfd_create"));
        }
        if libc::ftruncate(fd, len as libc::off_t) != 0 {
            let e = os_error("ftruncate");
            libc::close(fd);
            return Err(e);
        }
        let map =
            |protection| libc::mmap(ptr::null_mut(), len, protection, libc::MAP_SHARED, fd, 0);
        let user = map(if user_writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        });
        if user == libc::MAP_FAILED {
            let e = os_error("mmap");
            libc::close(fd);
            return Err(e);
        }
        let shadow = map(libc::PROT_READ | libc::PROT_WRITE);
        if shadow == libc::MAP_FAILED {
            let e = os_error("mmap");
            libc::munmap(user, len);
            libc::close(fd);
            return Err(e);
        }
        // The mappings keep the memory alive.
        libc::close(fd);
        Ok((user as usize, shadow as usize))
    }
}

pub(crate) fn unmap(user: usize, shadow: usize, len: usize) {
    // SAFETY: both views were mapped by `map_twice` with this length and nothing refers to
    // them any more (the arena owning them is being dropped).
    unsafe {
        libc::munmap(user as *mut c_void, len);
        libc::munmap(shadow as *mut c_void, len);
    }
}

/// mprotect, async-signal-safe.
fn set_protection(address: usize, len: usize, writable: bool) -> bool {
    let protection = if writable {
        libc::PROT_READ | libc::PROT_WRITE
    } else {
        libc::PROT_READ
    };
    // SAFETY: the range lies inside a user view this module mapped.
    unsafe { libc::mprotect(address as *mut c_void, len, protection) == 0 }
}

fn protection_error(what: &str) -> Error {
    Error::io(
        "client cache arena",
        "change protection",
        std::io::Error::other(format!(
            "could not {what} a frame: {}",
            std::io::Error::last_os_error()
        )),
    )
}

/// Writes a message to standard error from inside the signal handler (write(2) is
/// async-signal-safe; formatting is not).
fn report_in_handler(message: &[u8]) {
    // SAFETY: writing a static buffer to file descriptor 2.
    unsafe {
        libc::write(2, message.as_ptr() as *const c_void, message.len());
    }
}

/// Installs the SIGSEGV handler once per process, remembering the one it replaces.
fn install_handler() -> Result<()> {
    static INSTALLED: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            // SAFETY: sigaction with a zeroed, then filled, action struct; the previous action
            // is saved before ours can run.
            unsafe {
                let mut previous: libc::sigaction = std::mem::zeroed();
                if libc::sigaction(libc::SIGSEGV, ptr::null(), &mut previous) != 0 {
                    return Err(std::io::Error::last_os_error().to_string());
                }
                let _ = PREVIOUS_ACTION.set(previous);
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_fault as *const () as usize;
                action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
                libc::sigemptyset(&mut action.sa_mask);
                if libc::sigaction(libc::SIGSEGV, &action, ptr::null_mut()) != 0 {
                    return Err(std::io::Error::last_os_error().to_string());
                }
            }
            Ok(())
        })
        .clone()
        .map_err(|reason| {
            Error::io(
                "SIGSEGV handler",
                "sigaction",
                std::io::Error::other(reason),
            )
        })
}

extern "C" fn on_fault(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let address = unsafe { (*info).si_addr() } as usize;
    for slot in REGISTRY.iter() {
        let len = slot.len.load(Ordering::Acquire);
        let start = slot.start.load(Ordering::Acquire);
        if len == 0 || address < start || address >= start + len {
            continue;
        }
        let shared = slot.shared.load(Ordering::Acquire);
        // SAFETY: a registered arena's shared state lives until its slot is cleared, and a
        // fault inside an arena comes from a thread using that arena's session.
        if !shared.is_null() && unsafe { (*shared).capture(address) } {
            return;
        }
        break;
    }
    chain(signal, info, context);
}

/// Passes a fault that is not ours to the handler installed before ours, or, if that was the
/// default action, restores it and returns so the faulting instruction kills the process as
/// it would have.
fn chain(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    let Some(previous) = PREVIOUS_ACTION.get() else {
        restore_default(signal);
        return;
    };
    let handler = previous.sa_sigaction;
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        restore_default(signal);
    } else if previous.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous action was installed with SA_SIGINFO, so it has this signature.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void) =
            unsafe { std::mem::transmute(handler) };
        f(signal, info, context);
    } else {
        // SAFETY: without SA_SIGINFO the handler takes the signal number only.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
        f(signal);
    }
}

fn restore_default(signal: libc::c_int) {
    // SAFETY: installs the default action for `signal`; async-signal-safe.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = libc::SIG_DFL;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(signal, &action, ptr::null_mut());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_write_captures_the_pre_image_with_signals() {
        first_write_captures_the_pre_image_and_later_writes_do_not_fault(FaultMechanism::Signal);
    }

    #[test]
    fn first_write_captures_the_pre_image_with_userfaultfd() {
        first_write_captures_the_pre_image_and_later_writes_do_not_fault(
            FaultMechanism::Userfaultfd,
        );
    }

    fn first_write_captures_the_pre_image_and_later_writes_do_not_fault(mechanism: FaultMechanism) {
        let frame_bytes = os_page_bytes() * 2;
        let mut arena = ProtectedArena::new(frame_bytes, 4, mechanism).unwrap();
        // SAFETY: the shadow view is writable; frame 1 lies inside it.
        unsafe { ptr::write_bytes(arena.shadow().add(frame_bytes), 7, frame_bytes) };
        let mut pre_image = vec![0u8; frame_bytes];
        arena.arm(1, pre_image.as_mut_ptr());
        // SAFETY: frame 1 is armed: the write faults, is captured, and then proceeds.
        unsafe {
            let p = arena.user().add(frame_bytes + 100);
            ptr::write_volatile(p, 42);
            ptr::write_volatile(p.add(1), 43);
        }
        assert_eq!(arena.take_capture(), Some(1));
        assert_eq!(arena.traps(), 1);
        assert!(
            pre_image.iter().all(|&b| b == 7),
            "pre-image is the frame before the write"
        );
        // SAFETY: reading the shadow view.
        let now = unsafe { *arena.shadow().add(frame_bytes + 100) };
        assert_eq!(now, 42);
        arena.protect_all().unwrap();
        assert!(!arena.is_writable(1));
        assert_eq!(arena.writable_frames(), 0);
    }
}
