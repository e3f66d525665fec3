//! Frames: every message travels as a 24-byte header and a body.
//!
//! ```text
//! offset size field
//!      0    4 magic  "LDSP" (Lodestore protocol)
//!      4    2 protocol version (little-endian), PROTOCOL_VERSION
//!      6    2 reserved, zero
//!      8    8 request id: a response carries its request's id
//!     16    4 body length in bytes, at most MAX_FRAME_BODY
//!     20    4 crc32c of the body
//!     24    … body (a postcard-encoded Request or Response)
//! ```
//!
//! A frame that breaks any rule is refused with an error naming the rule; the connection it
//! came on is then closed, since the byte stream can no longer be trusted.

use std::io::{self, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

pub const MAGIC: [u8; 4] = *b"LDSP";
/// Version of the frame layout and of the messages. Both ends must speak the same.
pub const PROTOCOL_VERSION: u16 = 12;
pub const HEADER_BYTES: usize = 24;
/// Largest body accepted: a batch of pages or log records never grows past this; the client
/// splits larger batches.
pub const MAX_FRAME_BODY: usize = 32 << 20;
/// Bytes of the buffered reader and writer at each end of a connection: a frame of a page of
/// the largest size, header and body, leaves in one write and arrives in one read.
pub const STREAM_BUFFER_BYTES: usize = HEADER_BYTES + (64 << 10) + 64;

// A frame carrying a page of the largest size fits the stream buffers (so it leaves in one
// write), and a frame holds at least a couple of such pages (batches split under the limit).
const _: () = assert!(STREAM_BUFFER_BYTES >= HEADER_BYTES + lodestore_core::limits::PAGE_SIZE_MAX);
const _: () = assert!(MAX_FRAME_BODY >= 4 * lodestore_core::limits::PAGE_SIZE_MAX);
const _: () = assert!(MAX_FRAME_BODY <= u32::MAX as usize);

/// Why a frame was refused.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("connection closed")]
    Closed,
    #[error("connection closed in the middle of a frame ({got} of {expected} bytes)")]
    Truncated { got: usize, expected: usize },
    #[error("bad magic {0:02x?}: not a Lodestore peer")]
    BadMagic([u8; 4]),
    #[error("protocol version {found}, this side speaks {PROTOCOL_VERSION}")]
    Version { found: u16 },
    #[error("frame body of {0} bytes exceeds the limit of {MAX_FRAME_BODY}")]
    TooLarge(usize),
    #[error("frame body checksum mismatch")]
    Checksum,
    #[error("reserved header field is {0}, not zero")]
    Reserved(u16),
    #[error("a frame body of {0} bytes does not fit in the memory the server buffers for all connections")]
    OverBudget(usize),
    #[error("I/O: {0}")]
    Io(#[from] io::Error),
}

/// A frame as read off the wire.
#[derive(Debug, PartialEq, Eq)]
pub struct Frame {
    pub request_id: u64,
    pub body: Vec<u8>,
}

/// The header of a frame carrying `body`.
pub fn header(request_id: u64, body: &[u8]) -> [u8; HEADER_BYTES] {
    assert!(
        body.len() <= MAX_FRAME_BODY,
        "callers split bodies under the limit"
    );
    let mut header = [0u8; HEADER_BYTES];
    header[0..4].copy_from_slice(&MAGIC);
    header[4..6].copy_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    header[8..16].copy_from_slice(&request_id.to_le_bytes());
    header[16..20].copy_from_slice(&(body.len() as u32).to_le_bytes());
    header[20..24].copy_from_slice(&crc32c::crc32c(body).to_le_bytes());
    header
}

pub fn write_frame(out: &mut impl Write, request_id: u64, body: &[u8]) -> io::Result<()> {
    out.write_all(&header(request_id, body))?;
    out.write_all(body)?;
    out.flush()
}

/// Checks a header and returns the request id, body length and body checksum.
pub fn parse_header(header: &[u8; HEADER_BYTES]) -> Result<(u64, usize, u32), FrameError> {
    let magic: [u8; 4] = header[0..4].try_into().expect("4 bytes");
    if magic != MAGIC {
        return Err(FrameError::BadMagic(magic));
    }
    let version = u16::from_le_bytes([header[4], header[5]]);
    if version != PROTOCOL_VERSION {
        return Err(FrameError::Version { found: version });
    }
    let reserved = u16::from_le_bytes([header[6], header[7]]);
    if reserved != 0 {
        return Err(FrameError::Reserved(reserved));
    }
    let request_id = u64::from_le_bytes(header[8..16].try_into().expect("8 bytes"));
    let len = u32::from_le_bytes(header[16..20].try_into().expect("4 bytes")) as usize;
    if len > MAX_FRAME_BODY {
        return Err(FrameError::TooLarge(len));
    }
    let crc = u32::from_le_bytes(header[20..24].try_into().expect("4 bytes"));
    Ok((request_id, len, crc))
}

/// Reads one frame. `Closed` when the peer closed the connection between frames.
pub fn read_frame(input: &mut impl Read) -> Result<Frame, FrameError> {
    read_frame_admitted(input, |_| Ok(()))
}

/// Reads one frame, asking `admit` for the body's length before the body is allocated: a peer
/// can make the reader hold only what `admit` allows.
pub fn read_frame_admitted(
    input: &mut impl Read,
    admit: impl FnOnce(usize) -> Result<(), FrameError>,
) -> Result<Frame, FrameError> {
    let mut header = [0u8; HEADER_BYTES];
    let got = read_full(input, &mut header)?;
    if got == 0 {
        return Err(FrameError::Closed);
    }
    // A peer that is not a Lodestore peer (a TLS alert is 7 bytes) is named as such even when
    // it sends less than a header.
    if got >= MAGIC.len() && header[..MAGIC.len()] != MAGIC {
        return Err(FrameError::BadMagic(
            header[..MAGIC.len()].try_into().expect("4 bytes"),
        ));
    }
    if got < HEADER_BYTES {
        return Err(FrameError::Truncated {
            got,
            expected: HEADER_BYTES,
        });
    }
    let (request_id, len, crc) = parse_header(&header)?;
    admit(len)?;
    let mut body = vec![0u8; len];
    let got = read_full(input, &mut body)?;
    if got < len {
        return Err(FrameError::Truncated {
            got: HEADER_BYTES + got,
            expected: HEADER_BYTES + len,
        });
    }
    if crc32c::crc32c(&body) != crc {
        return Err(FrameError::Checksum);
    }
    Ok(Frame { request_id, body })
}

/// Reads until `buf` is full or the stream ends; returns the bytes read.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// How long a connection's end polls for the other end's next frame before it sleeps in
/// `read`, on a machine with more than one CPU. A sleeping thread's CPU may go idle, and on a
/// virtual machine waking it again is most of a round trip (about 70 us between two CPUs here,
/// against 5 us on one: `lodestore bench net`). The client's reply usually comes within a
/// few microseconds and the next request after the client's work on the previous one.
pub const POLL_BEFORE_SLEEP: Duration = Duration::from_micros(50);

/// Requests a connection's end goes without polling after a poll that found nothing: polling
/// pays only while the other end answers within [`POLL_BEFORE_SLEEP`]. When more threads
/// want the CPUs than there are, the other end is slow to answer and a polling thread would
/// only take a CPU from it.
pub const POLL_BACKOFF: u32 = 16;

/// Whether a connection's end polls for the next frame before it sleeps in `read`.
#[derive(Clone, Copy, Debug)]
pub struct Poller {
    spin: Duration,
    /// Reads left before the next poll.
    skip: u32,
}

impl Poller {
    /// For a connection served or used by this thread: polls if the thread may run on several
    /// CPUs; not if it may run on one only (the other end may share it, and polling would
    /// only hold it off).
    pub fn for_this_thread() -> Poller {
        // SAFETY: a zeroed cpu_set_t is an empty set; sched_getaffinity writes at most its
        // size.
        let several = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0
                && libc::CPU_COUNT(&set) > 1
        };
        Poller {
            spin: if several {
                POLL_BEFORE_SLEEP
            } else {
                Duration::ZERO
            },
            skip: 0,
        }
    }

    /// Waits up to the poll time for `reader` to have bytes to read, without sleeping, unless
    /// it holds some already or a recent poll found nothing. The read that follows finds the
    /// frame, the end of the stream, or waits.
    pub fn before_read(&mut self, reader: &BufReader<impl AsRawFd>) {
        if !reader.buffer().is_empty() || self.spin.is_zero() {
            return;
        }
        if self.skip > 0 {
            self.skip -= 1;
            return;
        }
        let fd = reader.get_ref().as_raw_fd();
        let started = Instant::now();
        loop {
            let mut ready = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one pollfd, no waiting.
            if unsafe { libc::poll(&mut ready, 1, 0) } != 0 {
                return;
            }
            if started.elapsed() >= self.spin {
                self.skip = POLL_BACKOFF;
                return;
            }
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn a_poll_that_finds_nothing_stops_polling_for_a_while() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut writer = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (stream, _) = listener.accept().unwrap();
        let reader = BufReader::new(stream);
        let mut poller = Poller {
            spin: Duration::from_millis(5),
            skip: 0,
        };
        // Nothing comes: the poll runs its time, then the next reads do not poll.
        let started = Instant::now();
        poller.before_read(&reader);
        assert!(started.elapsed() >= Duration::from_millis(5));
        assert_eq!(poller.skip, POLL_BACKOFF);
        for left in (0..POLL_BACKOFF).rev() {
            poller.before_read(&reader);
            assert_eq!(poller.skip, left);
        }
        // Bytes waiting: the poll returns at once and keeps polling on.
        writer.write_all(b"frame").unwrap();
        let started = Instant::now();
        poller.before_read(&reader);
        assert!(started.elapsed() < Duration::from_millis(5));
        assert_eq!(poller.skip, 0);
    }
}
