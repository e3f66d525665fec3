//! A socket read against a deadline: every read first checks it and, when the socket's timeout
//! would let the read run past it, sets the timeout to what is left. A peer that trickles one
//! byte at a time therefore cannot stretch a frame, or a handshake, beyond its deadline, and
//! in steady state (the same timeout frame after frame) no system call is added.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

/// How far past the deadline the socket's timeout may reach before it is set again.
const SLACK: Duration = Duration::from_millis(50);

pub struct DeadlineStream {
    stream: TcpStream,
    deadline: Option<Instant>,
    /// The socket's read timeout as last set, and when.
    timeout: Option<(Duration, Instant)>,
}

impl DeadlineStream {
    pub fn new(stream: TcpStream) -> DeadlineStream {
        DeadlineStream {
            stream,
            deadline: None,
            timeout: None,
        }
    }

    /// Bounds every write from now on (the socket's own write timeout).
    pub fn set_write_timeout(&self, timeout: Duration) -> io::Result<()> {
        self.stream.set_write_timeout(Some(timeout))
    }

    /// Reads from now on fail with `TimedOut` once `deadline` has passed.
    pub fn set_deadline(&mut self, deadline: Instant) {
        self.deadline = Some(deadline);
    }

    /// Sets the socket's timeout to `left` if the one set could let a read run past the
    /// deadline by more than the slack.
    fn bound(&mut self, now: Instant, left: Duration) -> io::Result<()> {
        let reaches = self.timeout.map(|(timeout, set)| set + timeout);
        if reaches.is_none_or(|end| end > now + left + SLACK) {
            self.stream.set_read_timeout(Some(left))?;
            self.timeout = Some((left, now));
        }
        Ok(())
    }
}

impl Read for DeadlineStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(deadline) = self.deadline else {
            return self.stream.read(buf);
        };
        loop {
            let now = Instant::now();
            let left = deadline.saturating_duration_since(now);
            if left.is_zero() {
                return Err(io::ErrorKind::TimedOut.into());
            }
            self.bound(now, left)?;
            match self.stream.read(buf) {
                // The socket's timeout was shorter than the deadline: read on until it.
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    self.timeout = None;
                }
                other => return other,
            }
        }
    }
}

/// Writes go straight to the socket; its write timeout bounds them.
impl Write for DeadlineStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.stream.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.stream.flush()
    }
}

impl AsRawFd for DeadlineStream {
    fn as_raw_fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn a_trickling_peer_cannot_stretch_a_read_past_its_deadline() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut writer = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (stream, _) = listener.accept().unwrap();
        let trickle = std::thread::spawn(move || {
            for _ in 0..20 {
                if writer.write_all(b"x").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(30));
            }
        });
        let mut reader = DeadlineStream::new(stream);
        let started = Instant::now();
        reader.set_deadline(started + Duration::from_millis(200));
        let mut buf = [0u8; 64];
        let error = reader.read_exact(&mut buf).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(200) && took < Duration::from_millis(400),
            "{took:?}"
        );
        trickle.join().unwrap();
    }

    #[test]
    fn a_longer_deadline_after_a_shorter_one_is_waited_out() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut writer = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (stream, _) = listener.accept().unwrap();
        let mut reader = DeadlineStream::new(stream);
        reader.set_deadline(Instant::now() + Duration::from_millis(100));
        writer.write_all(b"x").unwrap();
        let mut byte = [0u8; 1];
        assert_eq!(reader.read(&mut byte).unwrap(), 1);
        // The socket keeps the short timeout; a longer deadline must not fail at it.
        reader.set_deadline(Instant::now() + Duration::from_secs(5));
        let late = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            writer.write_all(b"y").unwrap();
        });
        assert_eq!(reader.read(&mut byte).unwrap(), 1);
        assert_eq!(&byte, b"y");
        late.join().unwrap();
    }
}
