//! One connection's byte stream, plain or under TLS, read through a buffer and written a frame
//! at a time. A connection is strictly request and response, so one object serves both ways;
//! TLS keeps one state for both directions and cannot be split into two sockets' halves.

use super::{TlsClient, TlsServer};
use crate::auth::Access;
use crate::frame::{header, HEADER_BYTES, STREAM_BUFFER_BYTES};
use rustls::{ClientConnection, ServerConnection, StreamOwned};
use std::io::{self, BufReader, Read, Write};
use std::os::fd::{AsRawFd, RawFd};

/// A socket, or a TLS session over one.
pub enum Transport<S: Read + Write> {
    Plain(S),
    TlsServer(Box<StreamOwned<ServerConnection, S>>),
    TlsClient(Box<StreamOwned<ClientConnection, S>>),
}

/// Why a TLS handshake failed.
#[derive(Debug)]
pub struct HandshakeFailure {
    /// Worded for the log and for the error the caller returns.
    pub reason: String,
    /// A certificate was refused, by this end or by the peer (not a broken connection).
    pub refused: bool,
}

impl HandshakeFailure {
    pub fn from_io(e: io::Error) -> HandshakeFailure {
        use rustls::AlertDescription as Alert;
        match e
            .get_ref()
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            Some(tls) => HandshakeFailure {
                reason: format!("TLS handshake failed: {tls}"),
                refused: matches!(
                    tls,
                    rustls::Error::InvalidCertificate(_)
                        | rustls::Error::NoCertificatesPresented
                        | rustls::Error::AlertReceived(
                            Alert::BadCertificate
                                | Alert::UnsupportedCertificate
                                | Alert::CertificateRevoked
                                | Alert::CertificateExpired
                                | Alert::CertificateUnknown
                                | Alert::UnknownCA
                                | Alert::AccessDenied
                                | Alert::CertificateRequired
                                // A certificate's signature that does not check.
                                | Alert::DecryptError
                        )
                ),
            },
            None if e.kind() == io::ErrorKind::UnexpectedEof => HandshakeFailure {
                reason: "TLS handshake failed: the peer closed the connection (does it serve TLS?)"
                    .into(),
                refused: false,
            },
            None => HandshakeFailure {
                reason: format!("TLS handshake failed: {e}"),
                refused: false,
            },
        }
    }

    fn setup(e: impl std::fmt::Display) -> HandshakeFailure {
        HandshakeFailure {
            reason: format!("TLS session setup failed: {e}"),
            refused: false,
        }
    }
}

impl<S: Read + Write> Transport<S> {
    /// The server's end of a TLS session on `socket`, once the handshake is done (the socket's
    /// own deadline bounds it), and the access the client's certificate grants.
    pub fn accept(mut socket: S, tls: &TlsServer) -> Result<(Self, Access), HandshakeFailure> {
        let mut session = ServerConnection::new(tls.config()).map_err(HandshakeFailure::setup)?;
        while session.is_handshaking() {
            session
                .complete_io(&mut socket)
                .map_err(HandshakeFailure::from_io)?;
        }
        let access = tls.access_of(session.peer_certificates());
        Ok((
            Transport::TlsServer(Box::new(StreamOwned::new(session, socket))),
            access,
        ))
    }

    /// The client's end of a TLS session with the server at `address` on `socket`, once the
    /// handshake is done and the server's certificate checked.
    pub fn connect(
        mut socket: S,
        tls: &TlsClient,
        name: rustls::pki_types::ServerName<'static>,
    ) -> Result<Self, HandshakeFailure> {
        let mut session =
            ClientConnection::new(tls.config(), name).map_err(HandshakeFailure::setup)?;
        while session.is_handshaking() {
            session
                .complete_io(&mut socket)
                .map_err(HandshakeFailure::from_io)?;
        }
        Ok(Transport::TlsClient(Box::new(StreamOwned::new(
            session, socket,
        ))))
    }

    pub fn socket_mut(&mut self) -> &mut S {
        match self {
            Transport::Plain(socket) => socket,
            Transport::TlsServer(tls) => tls.get_mut(),
            Transport::TlsClient(tls) => tls.get_mut(),
        }
    }

    pub fn is_tls(&self) -> bool {
        !matches!(self, Transport::Plain(_))
    }

    /// Tells the peer the session ends here (TLS), so that it sees a clean end of stream.
    pub fn close(&mut self) {
        let sent = match self {
            Transport::Plain(_) => return,
            Transport::TlsServer(tls) => {
                tls.conn.send_close_notify();
                tls.flush()
            }
            Transport::TlsClient(tls) => {
                tls.conn.send_close_notify();
                tls.flush()
            }
        };
        // The peer may be gone already; there is nothing left to tell it then.
        let _ = sent;
    }
}

impl<S: Read + Write> Read for Transport<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let read = match self {
            Transport::Plain(socket) => return socket.read(buf),
            Transport::TlsServer(tls) => tls.read(buf),
            Transport::TlsClient(tls) => tls.read(buf),
        };
        match read {
            // A peer that closes without saying so ends the stream all the same; a frame cut
            // short by it is still caught by its length.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(0),
            other => other,
        }
    }
}

impl<S: Read + Write> Write for Transport<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Transport::Plain(socket) => socket.write(buf),
            Transport::TlsServer(tls) => tls.write(buf),
            Transport::TlsClient(tls) => tls.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Transport::Plain(socket) => socket.flush(),
            Transport::TlsServer(tls) => tls.flush(),
            Transport::TlsClient(tls) => tls.flush(),
        }
    }
}

impl<S: Read + Write + AsRawFd> AsRawFd for Transport<S> {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Transport::Plain(socket) => socket.as_raw_fd(),
            Transport::TlsServer(tls) => tls.get_ref().as_raw_fd(),
            Transport::TlsClient(tls) => tls.get_ref().as_raw_fd(),
        }
    }
}

/// A connection's end: reads through a buffer, writes a frame at a time.
pub struct Channel<S: Read + Write> {
    pub reader: BufReader<Transport<S>>,
    /// A frame's header and a small body go out together, in one write (one TLS record).
    staged: Vec<u8>,
}

impl<S: Read + Write> Channel<S> {
    pub fn new(transport: Transport<S>) -> Self {
        Channel {
            reader: BufReader::with_capacity(STREAM_BUFFER_BYTES, transport),
            staged: Vec::with_capacity(STREAM_BUFFER_BYTES),
        }
    }

    pub fn transport_mut(&mut self) -> &mut Transport<S> {
        self.reader.get_mut()
    }

    /// Sends one frame and flushes it.
    pub fn send(&mut self, request_id: u64, body: &[u8]) -> io::Result<()> {
        let head = header(request_id, body);
        let out = self.reader.get_mut();
        if HEADER_BYTES + body.len() <= self.staged.capacity() {
            self.staged.clear();
            self.staged.extend_from_slice(&head);
            self.staged.extend_from_slice(body);
            out.write_all(&self.staged)?;
        } else {
            // Too large to be worth a copy: header and body go out apart.
            out.write_all(&head)?;
            out.write_all(body)?;
        }
        out.flush()
    }
}
