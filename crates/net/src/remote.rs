//! The remote `PageServer`: a client's end of one connection. Each request waits for its
//! response (one in flight per connection; a session owns its connection). Batches of pages or
//! log records larger than a frame are split.

use crate::auth::{self, Access, Credentials, Token};
use crate::frame::{read_frame, FrameError, Poller, MAX_FRAME_BODY};
use crate::message::{
    decode, encode, Request, Response, WireObjectUpdates, WirePage, WireRecords, WireUpdates,
};
use crate::tls::transport::{Channel, HandshakeFailure, Transport};
use lodestore_core::{Error, Lsn, Oid, PageId, Result, TxnId, VolumeId};
use lodestore_server::increments::INCREMENTS_MAX;
use lodestore_server::versions::Snapshot;
use lodestore_server::{
    validate_client_page, Accepted, AppendedCommit, FieldIncrement, IncrementsRan, LockMode,
    LockStats, LockTarget, Lookup, OperationNote, PageServer, RestartReport, ServerStats,
    ShippedPage, ShippedRecords, SnapshotHistory, SnapshotNews, TxnKind,
};
use lodestore_storage::large::Extent;
use lodestore_storage::page;
use lodestore_wal::LogStats;

/// Characters of an unexpected response an error message shows.
const UNEXPECTED_SHOWN_MAX: usize = 200;

/// Most bytes a log record's key, offset and length take in a frame (three varints).
const WIRE_RECORD_FIXED_BYTES: usize = 20;

/// Frames for a batch of log records given as each record's parts (key, offset, length), with
/// `strings` byte strings of that length each: the records and the bytes of each frame, in
/// order, every frame under the limit (a record larger than that alone in its frame).
fn frames_of<K>(parts: &[(K, u32, u32)], strings: usize) -> Vec<(Range<usize>, Range<usize>)> {
    let mut frames = Vec::new();
    let (mut first, mut bytes_start, mut bytes_end, mut size) = (0, 0, 0, 0);
    for (index, &(_, _, len)) in parts.iter().enumerate() {
        let record = len as usize * strings;
        if size + WIRE_RECORD_FIXED_BYTES + record > MAX_FRAME_BODY / 2 && index > first {
            frames.push((first..index, bytes_start..bytes_end));
            (first, bytes_start, size) = (index, bytes_end, 0);
        }
        bytes_end += record;
        size += WIRE_RECORD_FIXED_BYTES + record;
    }
    if first < parts.len() {
        frames.push((first..parts.len(), bytes_start..bytes_end));
    }
    frames
}
use std::net::{TcpStream, ToSocketAddrs};
use std::ops::Range;
use std::sync::Mutex;
use std::time::Duration;

/// Longest a client waits to connect, and then for each reply of the handshake (TLS and
/// Lodestore's own). Requests after it wait as long as the server takes: a lock wait there is
/// bounded by the server.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What the server said when the connection opened.
#[derive(Clone, Debug)]
pub struct Welcome {
    pub page_size: usize,
    pub volume: VolumeId,
    pub root_directory: Oid,
    pub recovery_method: String,
    pub restart: RestartReport,
    /// What the server lets this client do.
    pub access: Access,
    /// Did the server require, and prove it holds, the client's token?
    pub authenticated: bool,
    /// Is the connection encrypted (TLS, the server's certificate checked)?
    pub tls: bool,
}

pub struct RemotePageServer {
    peer: String,
    welcome: Welcome,
    conn: Mutex<Option<Conn>>,
    /// What this client has heard of the server's snapshots (Moh section 2.3).
    history: Mutex<SnapshotHistory>,
}

struct Conn {
    channel: Channel<TcpStream>,
    next_id: u64,
    /// Whether to poll for a reply before sleeping (decided for the connecting thread).
    poller: Poller,
}

impl RemotePageServer {
    /// Sends `request`, whose answer is `page`, and copies the page into `buf` once it has
    /// checked it: a damaged page would reach the client's cache and its page operations.
    fn page_reply(
        &self,
        what: &str,
        request: &Request,
        page: PageId,
        buf: &mut [u8],
    ) -> Result<()> {
        match self.call(request)? {
            Response::Page(image) if image.len() == buf.len() => {
                let number = page::number(&image);
                if number != page {
                    return Err(connection(
                        &self.peer,
                        format!("asked for page {page}, the server sent page {number}"),
                    ));
                }
                validate_client_page(&image).map_err(|reason| {
                    connection(
                        &self.peer,
                        format!("page {page} from the server is damaged: {reason}"),
                    )
                })?;
                buf.copy_from_slice(&image);
                Ok(())
            }
            other => Err(self.unexpected(what, &other)),
        }
    }
    /// Ships `pages` of `txn`, all but the last frame's worth ahead, the rest with the commit
    /// request: forced (`ShipAndCommit`) or, for a subtransaction, left unforced with its locks
    /// released (`ShipAndCommitUnforced`). Returns the pages' LSNs and the commit's.
    fn ship_with_commit(
        &self,
        txn: TxnId,
        pages: &[ShippedPage<'_>],
        unforced: bool,
    ) -> Result<(Vec<Lsn>, Lsn)> {
        let per_frame = self.pages_per_frame();
        let split = pages.len().saturating_sub(per_frame);
        let mut lsns = if split > 0 {
            self.ship_dirty_pages(txn, &pages[..split])?
        } else {
            Vec::new()
        };
        let (request, name) = if unforced {
            let request = Request::ShipAndCommitUnforced {
                txn: txn.0,
                pages: Self::wire_pages(&pages[split..]),
            };
            (request, "ship-and-commit-unforced")
        } else {
            let request = Request::ShipAndCommit {
                txn: txn.0,
                pages: Self::wire_pages(&pages[split..]),
            };
            (request, "ship-and-commit")
        };
        match self.call(&request)? {
            Response::Committed { pages, commit } => {
                lsns.extend(pages.into_iter().map(Lsn));
                Ok((lsns, Lsn(commit)))
            }
            other => Err(self.unexpected(name, &other)),
        }
    }

    /// Ships a batch of log records, given as each record's wire key, offset and length and
    /// the bytes of all of them (`strings` byte strings per record), in as many frames as
    /// the limit asks; `request` makes a frame's request of its records and bytes.
    fn ship_batch<K: Copy>(
        &self,
        what: &'static str,
        parts: &[(K, u32, u32)],
        bytes: &[u8],
        strings: usize,
        request: impl Fn(Vec<(K, u32, u32)>, Vec<u8>) -> Request,
    ) -> Result<()> {
        for (records, range) in frames_of(parts, strings) {
            let request = request(parts[records].to_vec(), bytes[range].to_vec());
            self.expect_done(what, &request)?;
        }
        Ok(())
    }

    /// Connects to the server at `address` and says hello, with no token (a server that
    /// requires one refuses).
    pub fn connect(address: &str, client: &str) -> Result<RemotePageServer> {
        RemotePageServer::connect_with(address, client, None)
    }

    /// Connects to the server at `address` and runs the handshake of `crate::auth`: with a
    /// token, the server must ask for it and prove it holds it too, or the connection is
    /// refused (a server that accepts anyone could be anyone).
    pub fn connect_with(
        address: &str,
        client: &str,
        token: Option<&Token>,
    ) -> Result<RemotePageServer> {
        let credentials = Credentials {
            token: token.cloned(),
            tls: None,
        };
        RemotePageServer::connect_secured(address, client, &credentials)
    }

    /// Connects to the server at `address`, over TLS if `credentials` say so (the server's
    /// certificate checked, the client's presented), and runs the handshake of `crate::auth`
    /// with their token if they hold one.
    pub fn connect_secured(
        address: &str,
        client: &str,
        credentials: &Credentials,
    ) -> Result<RemotePageServer> {
        let token = credentials.token.as_ref();
        let socket = connect_socket(address)?;
        let transport = match &credentials.tls {
            Some(tls) => {
                let name = tls.server_name_for(address)?;
                Transport::connect(socket, tls, name).map_err(|failure| {
                    if failure.refused {
                        Error::PermissionDenied {
                            reason: format!("{address}: {}", failure.reason),
                        }
                    } else {
                        connection(address, failure.reason)
                    }
                })?
            }
            None => Transport::Plain(socket),
        };
        let tls = transport.is_tls();
        let conn = Conn {
            channel: Channel::new(transport),
            next_id: 1,
            poller: Poller::for_this_thread(),
        };
        let mut remote = RemotePageServer {
            history: Mutex::new(SnapshotHistory::new()),
            peer: address.to_string(),
            welcome: Welcome {
                page_size: 0,
                volume: 0,
                root_directory: Oid(0),
                recovery_method: String::new(),
                restart: RestartReport::default(),
                access: Access::ReadWrite,
                authenticated: false,
                tls,
            },
            conn: Mutex::new(Some(conn)),
        };
        let client_nonce = auth::nonce();
        let mut answer = remote.call(&Request::Hello {
            client: client.to_string(),
            nonce: client_nonce.clone(),
        })?;
        let mut server_nonce = None;
        if let Response::Challenge { nonce } = &answer {
            let Some(token) = token else {
                return Err(Error::PermissionDenied {
                    reason: format!("the server at {address} requires a token, and none was given"),
                });
            };
            let proof = token.client_proof(nonce, &client_nonce, client);
            server_nonce = Some(nonce.clone());
            answer = remote.call(&Request::Prove { proof })?;
        }
        match answer {
            Response::Welcome {
                page_size,
                volume,
                root_directory,
                recovery_method,
                restart,
                access,
                server_proof,
            } => {
                let authenticated = crate::handshake::check_welcome(
                    token,
                    &client_nonce,
                    server_nonce.as_deref(),
                    server_proof.as_deref().map(|p| p.as_slice()),
                )
                .map_err(|reason| Error::PermissionDenied {
                    reason: format!("the server at {address} {reason}"),
                })?;
                remote.welcome = Welcome {
                    page_size: page_size as usize,
                    volume,
                    root_directory: Oid(root_directory),
                    recovery_method,
                    restart,
                    access,
                    authenticated,
                    tls,
                };
                remote.after_handshake()?;
                Ok(remote)
            }
            other => Err(remote.unexpected("hello", &other)),
        }
    }

    /// The handshake is done: requests may now wait as long as the server takes.
    fn after_handshake(&self) -> Result<()> {
        self.set_reply_timeout(None)
    }

    /// Bounds how long each later request waits for its reply (`None`: as long as the server
    /// takes). A reply that does not come in time breaks the connection.
    pub fn set_reply_timeout(&self, timeout: Option<Duration>) -> Result<()> {
        let mut guard = self
            .conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(conn) = guard.as_mut() {
            conn.channel
                .transport_mut()
                .socket_mut()
                .set_read_timeout(timeout)
                .map_err(|e| connection(&self.peer, format!("socket setup: {e}")))?;
        }
        Ok(())
    }

    /// Is the connection still in its handshake (the welcome not yet received)?
    fn in_handshake(&self) -> bool {
        self.welcome.page_size == 0
    }

    pub fn welcome(&self) -> &Welcome {
        &self.welcome
    }

    pub fn peer(&self) -> &str {
        &self.peer
    }

    /// The server's counters.
    pub fn stats(&self) -> Result<(ServerStats, LogStats, LockStats)> {
        match self.call(&Request::Stats)? {
            Response::Stats { server, log, locks } => Ok((server, log, locks)),
            other => Err(self.unexpected("stats", &other)),
        }
    }

    pub fn checkpoint(&self) -> Result<()> {
        self.expect_done("checkpoint", &Request::Checkpoint)
    }

    /// Takes a snapshot of the store; returns once it is durable.
    pub fn take_snapshot(&self) -> Result<Snapshot> {
        match self.call(&Request::TakeSnapshot)? {
            Response::Snapshot(snapshot) => Ok(snapshot.into()),
            other => Err(self.unexpected("take-snapshot", &other)),
        }
    }

    /// Every snapshot of the store, oldest first.
    pub fn snapshots(&self) -> Result<Vec<Snapshot>> {
        match self.call(&Request::Snapshots)? {
            Response::Snapshots(list) => Ok(list.into_iter().map(Into::into).collect()),
            other => Err(self.unexpected("snapshots", &other)),
        }
    }

    /// Deletes the snapshots numbered `ids` and, with `before_us`, every one taken before it.
    pub fn delete_snapshots(&self, ids: Vec<u64>, before_us: Option<u64>) -> Result<Vec<Snapshot>> {
        match self.call(&Request::DeleteSnapshots { ids, before_us })? {
            Response::Snapshots(list) => {
                let deleted: Vec<Snapshot> = list.into_iter().map(Into::into).collect();
                let mut history = self.history();
                for snapshot in &deleted {
                    history.forget(snapshot.id);
                }
                Ok(deleted)
            }
            other => Err(self.unexpected("delete-snapshots", &other)),
        }
    }

    fn history(&self) -> std::sync::MutexGuard<'_, SnapshotHistory> {
        self.history
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes in news of snapshots from the server, asking for what is missing when there is a
    /// gap (Moh section 2.3).
    fn hear(&self, news: SnapshotNews) -> Result<()> {
        // A gap is filled by one request; a server that answers with another gap is broken.
        for _ in 0..2 {
            let accepted = self.history().accept(&news);
            match accepted {
                Accepted::Applied | Accepted::Redundant => return Ok(()),
                Accepted::Malformed(reason) => {
                    return Err(connection(
                        &self.peer,
                        format!("impossible snapshot news: {reason}"),
                    ))
                }
                Accepted::Gap { from_us, .. } => {
                    let filler = self.news_since(from_us)?;
                    if let Accepted::Malformed(reason) = self.history().accept(&filler) {
                        return Err(connection(
                            &self.peer,
                            format!("impossible snapshot news: {reason}"),
                        ));
                    }
                }
            }
        }
        Err(connection(
            &self.peer,
            "the server's snapshot news left a gap it would not fill".into(),
        ))
    }

    fn news_since(&self, since_us: u64) -> Result<SnapshotNews> {
        match self.call(&Request::SnapshotNews { since_us })? {
            Response::News(news) => Ok(news.into()),
            other => Err(self.unexpected("snapshot-news", &other)),
        }
    }

    /// Sends `request` and waits for its response; a failed response becomes its error. Any
    /// transport failure breaks the connection for good: later calls fail at once.
    pub(crate) fn call(&self, request: &Request) -> Result<Response> {
        let mut guard = self
            .conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let conn = guard
            .as_mut()
            .ok_or_else(|| connection(&self.peer, "the connection broke earlier".into()))?;
        let id = conn.next_id;
        conn.next_id += 1;
        let body = encode(request);
        if body.len() > MAX_FRAME_BODY {
            return Err(Error::InvalidArgument(format!(
                "{} request of {} bytes exceeds the frame limit",
                request.name(),
                body.len()
            )));
        }
        let exchanged = conn
            .channel
            .send(id, &body)
            .map_err(FrameError::from)
            .and_then(|()| {
                conn.poller.before_read(&conn.channel.reader);
                read_frame(&mut conn.channel.reader)
            });
        let frame = match exchanged {
            Ok(frame) => frame,
            Err(FrameError::Io(e))
                if self.in_handshake()
                    && e.get_ref().is_some_and(|inner| inner.is::<rustls::Error>()) =>
            {
                // TLS 1.3 ends a client's handshake before the server has checked the
                // client's certificate: a refusal arrives with the first reply.
                *guard = None;
                let failure = HandshakeFailure::from_io(e);
                return Err(if failure.refused {
                    Error::PermissionDenied {
                        reason: format!("{}: {}", self.peer, failure.reason),
                    }
                } else {
                    connection(&self.peer, failure.reason)
                });
            }
            Err(e) => {
                *guard = None;
                let hint = match &e {
                    FrameError::BadMagic(magic) if crate::tls::looks_like_tls(magic) => {
                        " (the server speaks TLS: connect with TLS)"
                    }
                    FrameError::Closed | FrameError::Truncated { .. } if self.in_handshake() => {
                        " (did the server refuse this client? its log says why)"
                    }
                    _ => "",
                };
                return Err(connection(
                    &self.peer,
                    format!("{}: {e}{hint}", request.name()),
                ));
            }
        };
        if frame.request_id != id {
            *guard = None;
            return Err(connection(
                &self.peer,
                format!(
                    "response to request {} arrived for request {id}",
                    frame.request_id
                ),
            ));
        }
        match decode::<Response>(&frame.body) {
            Ok(Response::Failed(error)) => Err(error.into()),
            Ok(response) => Ok(response),
            Err(e) => {
                *guard = None;
                Err(connection(
                    &self.peer,
                    format!("malformed response to {}: {e}", request.name()),
                ))
            }
        }
    }

    pub(crate) fn unexpected(&self, what: &str, response: &Response) -> Error {
        // A response may carry a page or more: the message shows its start only.
        let mut shown = format!("{response:?}");
        if let Some((cut, _)) = shown.char_indices().nth(UNEXPECTED_SHOWN_MAX) {
            shown.truncate(cut);
            shown.push_str("...");
        }
        connection(
            &self.peer,
            format!("unexpected response to {what}: {shown}"),
        )
    }

    pub(crate) fn expect_done(&self, what: &str, request: &Request) -> Result<()> {
        match self.call(request)? {
            Response::Done => Ok(()),
            other => Err(self.unexpected(what, &other)),
        }
    }

    /// Pages per request so a frame stays under the limit.
    fn pages_per_frame(&self) -> usize {
        (MAX_FRAME_BODY / (self.welcome.page_size + 32)).max(1) - 1
    }

    fn wire_pages(pages: &[ShippedPage<'_>]) -> Vec<WirePage> {
        pages
            .iter()
            .map(|p| WirePage {
                page: p.page.0,
                logged: p.logged,
                image: p.image.to_vec(),
            })
            .collect()
    }

    fn lsns(&self, response: Response, what: &str) -> Result<Vec<Lsn>> {
        match response {
            Response::Lsns(lsns) => Ok(lsns.into_iter().map(Lsn).collect()),
            other => Err(self.unexpected(what, &other)),
        }
    }
}

/// A connected socket to `address`, set up for the handshake: no Nagle delay, and reads bounded
/// by `CONNECT_TIMEOUT` until `after_handshake`.
fn connect_socket(address: &str) -> Result<TcpStream> {
    let addrs = address
        .to_socket_addrs()
        .map_err(|e| connection(address, format!("resolve: {e}")))?;
    let mut last = None;
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
            Ok(stream) => {
                stream
                    .set_nodelay(true)
                    .and(stream.set_read_timeout(Some(CONNECT_TIMEOUT)))
                    .map_err(|e| connection(address, format!("socket setup: {e}")))?;
                return Ok(stream);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(connection(
        address,
        match last {
            Some(e) => format!("connect: {e}"),
            None => "connect: the address resolves to nothing".into(),
        },
    ))
}

fn connection(peer: &str, reason: String) -> Error {
    Error::Connection {
        peer: peer.to_string(),
        reason,
    }
}

impl Drop for RemotePageServer {
    fn drop(&mut self) {
        // Closing the socket is the goodbye: the server aborts what this connection left open.
        if let Ok(mut guard) = self.conn.lock() {
            if let Some(mut conn) = guard.take() {
                // A server that stopped reading must not hold the client's drop.
                let socket = conn.channel.transport_mut().socket_mut();
                if socket
                    .set_write_timeout(Some(crate::limits::GOODBYE_TIMEOUT))
                    .is_ok()
                {
                    conn.channel.transport_mut().close();
                }
            }
        }
    }
}

impl PageServer for RemotePageServer {
    fn page_size(&self) -> usize {
        self.welcome.page_size
    }

    fn volume_id(&self) -> VolumeId {
        self.welcome.volume
    }

    fn root_directory(&self) -> Oid {
        self.welcome.root_directory
    }

    fn begin_transaction(&self, kind: TxnKind) -> Result<TxnId> {
        match self.call(&Request::Begin { kind: kind.into() }) {
            Ok(Response::Began { txn, news }) => {
                if let Some(news) = news {
                    self.hear(news.into())?;
                }
                Ok(TxnId(txn))
            }
            Ok(other) => Err(self.unexpected("begin", &other)),
            Err(Error::NoSuchSnapshot { reason }) => {
                // Deleted since this client heard of it.
                if let TxnKind::ReadOnlyAsOf { snapshot } = kind {
                    self.history().forget(snapshot);
                }
                Err(Error::NoSuchSnapshot { reason })
            }
            Err(e) => Err(e),
        }
    }

    fn snapshot_at(&self, time_us: u64) -> Result<u64> {
        let mut lookup = self.history().at(time_us);
        if lookup == Lookup::Unknown {
            // Past what this client knows: hear the news up to now, and answer for the
            // present if the time is later still (no snapshot lies between).
            let since = self.history().gmax_us();
            let news = self.news_since(since)?;
            self.hear(news)?;
            let history = self.history();
            lookup = history.at(time_us.min(history.gmax_us()));
        }
        match lookup {
            Lookup::Snapshot(id, _) => Ok(id),
            Lookup::BeforeFirst => Err(Error::NoSuchSnapshot {
                reason: match self.history().first() {
                    Some((id, time)) => format!(
                        "time {time_us} µs is before the first snapshot ({id} at {time} µs)"
                    ),
                    None => format!("time {time_us} µs: the store has no snapshots yet"),
                },
            }),
            Lookup::Unknown => Err(connection(
                &self.peer,
                "the server's snapshot news does not reach the present".into(),
            )),
        }
    }

    fn note_operation(&self, sub: TxnId, note: OperationNote<'_>) -> Result<()> {
        match self.call(&Request::NoteOperation {
            txn: sub.0,
            note: note.into(),
        })? {
            Response::Done => Ok(()),
            other => Err(self.unexpected("note-operation", &other)),
        }
    }

    fn run_increments(
        &self,
        parent: TxnId,
        fields: &[FieldIncrement],
        undo: OperationNote<'_>,
        force: bool,
    ) -> Result<IncrementsRan> {
        if fields.len() > INCREMENTS_MAX {
            return Ok(IncrementsRan::NotHere);
        }
        let request = Request::RunIncrements {
            parent: parent.0,
            fields: fields.iter().map(|&field| field.into()).collect(),
            note: undo.into(),
            force,
        };
        match self.call(&request)? {
            Response::Increments(Some((sub, values))) => Ok(IncrementsRan::Committed {
                sub: TxnId(sub),
                values,
            }),
            Response::Increments(None) => Ok(IncrementsRan::NotHere),
            other => Err(self.unexpected("run-increments", &other)),
        }
    }

    fn lock(&self, txn: TxnId, target: LockTarget, mode: LockMode) -> Result<Lsn> {
        let request = Request::Lock {
            txn: txn.0,
            target: target.into(),
            mode: mode.into(),
        };
        match self.call(&request)? {
            Response::Lsn(lsn) => Ok(Lsn(lsn)),
            other => Err(self.unexpected("lock", &other)),
        }
    }

    fn fetch_page(&self, txn: TxnId, page: PageId, buf: &mut [u8]) -> Result<()> {
        let request = Request::FetchPage {
            txn: txn.0,
            page: page.0,
        };
        self.page_reply("fetch-page", &request, page, buf)
    }

    fn lock_and_fetch_page(
        &self,
        txn: TxnId,
        page: PageId,
        mode: LockMode,
        buf: &mut [u8],
    ) -> Result<Lsn> {
        let request = Request::LockAndFetch {
            txn: txn.0,
            page: page.0,
            mode: mode.into(),
        };
        self.page_reply("lock-and-fetch", &request, page, buf)?;
        Ok(page::lsn(buf))
    }

    fn find_space(
        &self,
        txn: TxnId,
        bytes: usize,
        skip: &[PageId],
    ) -> Result<Option<(PageId, Lsn)>> {
        let request = Request::FindSpace {
            txn: txn.0,
            bytes: bytes as u64,
            skip: skip.iter().map(|p| p.0).collect(),
        };
        match self.call(&request)? {
            Response::Space(found) => Ok(found.map(|(page, lsn)| (PageId(page), Lsn(lsn)))),
            other => Err(self.unexpected("find-space", &other)),
        }
    }

    fn allocate_pages(&self, txn: TxnId, count: u32) -> Result<Vec<Extent>> {
        match self.call(&Request::AllocatePages { txn: txn.0, count })? {
            Response::Extents(extents) => Ok(extents
                .into_iter()
                .map(|(first, count)| Extent {
                    first: PageId(first),
                    count,
                })
                .collect()),
            other => Err(self.unexpected("allocate-pages", &other)),
        }
    }

    fn reserve_pages(&self, count: u32) -> Result<(u64, Vec<Extent>)> {
        match self.call(&Request::ReservePages { count })? {
            Response::Reserved {
                reservation,
                extents,
            } => Ok((
                reservation,
                extents
                    .into_iter()
                    .map(|(first, count)| Extent {
                        first: PageId(first),
                        count,
                    })
                    .collect(),
            )),
            other => Err(self.unexpected("reserve-pages", &other)),
        }
    }

    fn take_reserved(&self, txn: TxnId, reservation: u64, page: PageId) -> Result<()> {
        let request = Request::TakeReserved {
            txn: txn.0,
            reservation,
            page: page.0,
        };
        match self.call(&request)? {
            Response::Done => Ok(()),
            other => Err(self.unexpected("take-reserved", &other)),
        }
    }

    fn release_reservation(&self, reservation: u64) -> Result<()> {
        match self.call(&Request::ReleaseReservation { reservation })? {
            Response::Done => Ok(()),
            other => Err(self.unexpected("release-reservation", &other)),
        }
    }

    fn free_pages(&self, txn: TxnId, pages: &[PageId]) -> Result<()> {
        let request = Request::FreePages {
            txn: txn.0,
            pages: pages.iter().map(|p| p.0).collect(),
        };
        self.expect_done("free-pages", &request)
    }

    fn ship_records(&self, txn: TxnId, records: ShippedRecords<'_>) -> Result<()> {
        match records {
            ShippedRecords::Pages(records) => {
                let parts: Vec<_> = records
                    .parts()
                    .map(|(page, offset, len)| (page.0, offset, len))
                    .collect();
                self.ship_batch(
                    "ship-records",
                    &parts,
                    records.bytes(),
                    2,
                    |records, bytes| Request::ShipRecords {
                        txn: txn.0,
                        records: WireRecords::Pages(WireUpdates { records, bytes }),
                    },
                )
            }
            ShippedRecords::Objects(records) => {
                let parts: Vec<_> = records
                    .parts()
                    .map(|(oid, offset, len)| (oid.0, offset, len))
                    .collect();
                self.ship_batch(
                    "ship-records",
                    &parts,
                    records.bytes(),
                    1,
                    |records, bytes| Request::ShipRecords {
                        txn: txn.0,
                        records: WireRecords::Objects(WireObjectUpdates { records, bytes }),
                    },
                )
            }
        }
    }

    fn ship_dirty_pages(&self, txn: TxnId, pages: &[ShippedPage<'_>]) -> Result<Vec<Lsn>> {
        let mut lsns = Vec::with_capacity(pages.len());
        for chunk in pages.chunks(self.pages_per_frame()) {
            let request = Request::ShipDirtyPages {
                txn: txn.0,
                pages: Self::wire_pages(chunk),
            };
            let response = self.call(&request)?;
            lsns.extend(self.lsns(response, "ship-dirty-pages")?);
        }
        Ok(lsns)
    }

    fn commit(&self, txn: TxnId) -> Result<Lsn> {
        match self.call(&Request::Commit { txn: txn.0 })? {
            Response::Lsn(lsn) => Ok(Lsn(lsn)),
            other => Err(self.unexpected("commit", &other)),
        }
    }

    fn ship_and_commit(&self, txn: TxnId, pages: &[ShippedPage<'_>]) -> Result<(Vec<Lsn>, Lsn)> {
        self.ship_with_commit(txn, pages, false)
    }

    fn ship_and_commit_unforced(
        &self,
        sub: TxnId,
        pages: &[ShippedPage<'_>],
    ) -> Result<(Vec<Lsn>, AppendedCommit)> {
        let (lsns, lsn) = self.ship_with_commit(sub, pages, true)?;
        let commit = AppendedCommit {
            lsn,
            durable: false,
            stream: 0,
        };
        Ok((lsns, commit))
    }

    fn abort(&self, txn: TxnId) -> Result<()> {
        self.expect_done("abort", &Request::Abort { txn: txn.0 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_split_into_frames_under_the_limit_in_order() {
        const MIB: u32 = 1 << 20;
        assert!(frames_of::<u32>(&[], 2).is_empty());
        // Two-string records of 3 MiB take 6 MiB each: two fit under half a frame, not three.
        let parts = [
            (1u32, 0, 3 * MIB),
            (2, 0, 3 * MIB),
            (3, 0, 3 * MIB),
            (4, 0, 10),
        ];
        let six = 6 * MIB as usize;
        assert_eq!(
            frames_of(&parts, 2),
            vec![(0..2, 0..2 * six), (2..4, 2 * six..3 * six + 20)]
        );
        // A record larger than half a frame goes alone.
        let parts = [(1u32, 0, 10), (2, 0, 20 * MIB), (3, 0, 10)];
        let big = 20 * MIB as usize;
        assert_eq!(
            frames_of(&parts, 1),
            vec![
                (0..1, 0..10),
                (1..2, 10..10 + big),
                (2..3, 10 + big..20 + big)
            ]
        );
    }
}
