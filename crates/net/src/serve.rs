//! The page server loop: a thread per connection, each serving one client's requests in order
//! against the store's `Server` (the same `PageServer` the embedded store uses). A connection
//! that breaks the protocol is closed with its reason logged; its open transactions are
//! aborted, which releases their locks. Other connections never notice. Every bound on a
//! client (connections, deadlines, memory) is in [`crate::limits`].

use crate::auth::{self, Access, ServerAuth};
use crate::budget::Budget;
use crate::deadline::DeadlineStream;
use crate::frame::{read_frame_admitted, FrameError, Poller};
use crate::handshake::{ServerHandshake, ServerStep};
use crate::limits::{ServeLimits, CLOSE_WAIT_MAX, GOODBYE_TIMEOUT};
use crate::message::{decode, encode, Request, Response, WireError, WireLockTarget, WireRecords};
use crate::registry::{Activity, Registry};
use crate::tls::transport::{Channel, Transport};
use lodestore_core::{Error, Lsn, Oid, PageId, Result, TxnId};
use lodestore_server::increments::INCREMENTS_MAX;
use lodestore_server::{
    validate_client_page, FieldIncrement, IncrementsRan, LockMode, LockTarget, ObjectUpdates,
    PageServer, PageUpdates, Server, ShippedPage, ShippedRecords,
};
use rustc_hash::FxHashSet;
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Serves `server` on `listener` until `stop` is set (checked between connections and every
/// `STOP_CHECK_INTERVAL` while idle). Then shuts every connection down and waits (at most `CLOSE_WAIT_MAX`)
/// for their threads to end, so that the caller holds the last reference to the server and
/// can close it cleanly. Returns the number of connections still open when it gave up.
pub fn serve(server: Arc<Server>, listener: TcpListener, stop: Arc<AtomicBool>) -> Result<usize> {
    serve_with(
        server,
        listener,
        stop,
        ServeLimits::default(),
        ServerAuth::none(),
    )
}

/// `serve` with limits of the caller's choosing, and no authentication.
pub fn serve_with_limits(
    server: Arc<Server>,
    listener: TcpListener,
    stop: Arc<AtomicBool>,
    limits: ServeLimits,
) -> Result<usize> {
    serve_with(server, listener, stop, limits, ServerAuth::none())
}

/// `serve` with limits and the tokens clients must prove they hold (`ServerAuth::none()`:
/// anyone who can connect is served).
pub fn serve_with(
    server: Arc<Server>,
    listener: TcpListener,
    stop: Arc<AtomicBool>,
    limits: ServeLimits,
    auth: ServerAuth,
) -> Result<usize> {
    serve_service(listener, stop, limits, auth, move || StoreService {
        server: server.clone(),
        txns: FxHashSet::default(),
        reservations: FxHashSet::default(),
        news_sent_us: 0,
    })
}

/// What one connection serves: its requests after the handshake, the welcome that ends the
/// handshake, and what it leaves behind when it closes. The loop around it (deadlines, TLS,
/// tokens, read-only access, memory budget, connection limits) is the same for every service.
pub(crate) trait Service: Send + 'static {
    /// Answers one request.
    fn handle(&mut self, request: Request) -> Result<Response>;

    /// The answer that ends a handshake.
    fn welcome(&self, access: Access, server_proof: Option<Vec<u8>>) -> Response;

    /// Does the connection hold state (an open transaction) that the shorter
    /// silent-transaction timeout guards?
    fn holds_state(&self) -> bool;

    /// The connection ended: let go of what it held.
    fn close(&mut self, peer: &str);
}

/// Accepts connections on `listener` until `stop` is set, each served by a thread of its own
/// with a service `make` builds; see [`serve`].
pub(crate) fn serve_service<S: Service>(
    listener: TcpListener,
    stop: Arc<AtomicBool>,
    limits: ServeLimits,
    auth: ServerAuth,
    make: impl Fn() -> S,
) -> Result<usize> {
    let auth = Arc::new(auth);
    limits.validate().map_err(Error::InvalidArgument)?;
    let local = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into());
    listener
        .set_nonblocking(true)
        .map_err(|e| Error::io(&local, "listen", e))?;
    let live = Arc::new(AtomicUsize::new(0));
    let registry = Arc::new(Registry::default());
    let mut next_id = 0u64;
    let budget = Budget::new(limits.buffered_bytes_max);
    tracing::info!(address = %local, "serving");
    while !stop.load(Ordering::Relaxed) {
        match listener.accept() {
            Ok((stream, peer)) => {
                let id = next_id;
                next_id += 1;
                let handle = match stream.try_clone() {
                    Ok(handle) => handle,
                    Err(e) => {
                        tracing::warn!(%peer, error = %e, "refused a connection: socket setup failed");
                        continue;
                    }
                };
                let activity = match registry.admit(id, handle, peer.ip(), &limits) {
                    Ok(activity) => activity,
                    Err(reason) => {
                        tracing::warn!(%peer, %reason, "refused a connection");
                        continue;
                    }
                };
                live.fetch_add(1, Ordering::AcqRel);
                let connection = Connection {
                    service: make(),
                    peer: peer.to_string(),
                    budget: budget.clone(),
                    limits,
                    activity,
                    auth: auth.clone(),
                    access: Access::ReadWrite,
                    certificate_access: Access::ReadWrite,
                };
                let (live, registry) = (live.clone(), registry.clone());
                std::thread::Builder::new()
                    .name(format!("lodestore-conn-{peer}"))
                    .spawn(move || {
                        let reason = connection.run(stream);
                        tracing::info!(%peer, %reason, "connection closed");
                        registry.remove(id);
                        live.fetch_sub(1, Ordering::AcqRel);
                    })
                    .map_err(|e| Error::io(&local, "spawn connection thread", e))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                wait_for_connection(&listener, STOP_CHECK_INTERVAL);
            }
            Err(e) => tracing::warn!(error = %e, "accept failed"),
        }
    }
    registry.shut_down_all();
    let deadline = Instant::now() + CLOSE_WAIT_MAX;
    while live.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let left = live.load(Ordering::Acquire);
    if left > 0 {
        tracing::warn!(connections = left, "connections still open after shutdown");
    }
    Ok(left)
}

/// How often an idle accept loop checks whether it was told to stop.
const STOP_CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// Sleeps until `listener` has a connection to accept or `most` has passed: a new client is
/// accepted at once, not at the next check for the stop flag.
fn wait_for_connection(listener: &TcpListener, most: Duration) {
    use std::os::fd::AsRawFd;
    let mut ready = libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd that lives across the call. An error or a signal only ends the wait
    // early; the caller tries to accept and waits again.
    unsafe {
        libc::poll(&mut ready, 1, most.as_millis() as libc::c_int);
    }
}

/// One client's connection to the store's page server: the transactions it began.
struct StoreService {
    server: Arc<Server>,
    txns: FxHashSet<u64>,
    /// The page reservations it made (released when it ends).
    reservations: FxHashSet<u64>,
    /// The current time of the last snapshot news sent to this client.
    news_sent_us: u64,
}

/// One client's connection.
struct Connection<S> {
    service: S,
    peer: String,
    /// Memory for request bodies, shared with every other connection.
    budget: Budget,
    limits: ServeLimits,
    /// What the registry knows of this connection (for closing the idlest at a limit).
    activity: Arc<Activity>,
    /// The tokens the server accepts.
    auth: Arc<ServerAuth>,
    /// What the client may do (set by the handshake).
    access: Access,
    /// What the client's TLS certificate lets it do (read-write where none is required).
    certificate_access: Access,
}

impl<S: Service> Connection<S> {
    /// Serves until the connection ends; returns why it ended.
    fn run(mut self, stream: TcpStream) -> String {
        let reason = self.exchange(stream);
        self.service.close(&self.peer);
        reason
    }

    fn exchange(&mut self, stream: TcpStream) -> String {
        let setup = stream
            .set_nodelay(true)
            .and(stream.set_nonblocking(false))
            .and(stream.set_write_timeout(Some(self.limits.write_timeout)));
        if let Err(e) = setup {
            return format!("socket setup failed: {e}");
        }
        let accepted = Instant::now();
        let mut socket = DeadlineStream::new(stream);
        // The TLS handshake is part of the handshake, under the same deadline.
        socket.set_deadline(accepted + self.limits.handshake_timeout);
        let transport = match self.auth.tls() {
            Some(tls) => match Transport::accept(socket, tls) {
                Ok((transport, access)) => {
                    self.certificate_access = access;
                    transport
                }
                Err(failure) => {
                    tracing::warn!(peer = %self.peer, reason = %failure.reason, "refused a connection");
                    return failure.reason;
                }
            },
            None => Transport::Plain(socket),
        };
        let mut channel = Channel::new(transport);
        let reason = self.serve_frames(&mut channel, accepted);
        let socket = channel.transport_mut().socket_mut();
        if socket.set_write_timeout(GOODBYE_TIMEOUT).is_ok() {
            channel.transport_mut().close();
        }
        reason
    }

    /// Answers the frames of one connection, handshake first, until it ends; returns why.
    fn serve_frames(&mut self, channel: &mut Channel<DeadlineStream>, accepted: Instant) -> String {
        let mut handshake = ServerHandshake::default();
        // Polling for the next request keeps this thread's CPU awake for it (see
        // `POLL_BEFORE_SLEEP`).
        let mut poller = Poller::for_this_thread();
        loop {
            // Each frame has a deadline: the handshake's, from the moment of accepting; then
            // the idle timeout, or the shorter one while a transaction is open.
            let greeted = handshake.is_done();
            let (deadline, waiting_for) = if !greeted {
                (accepted + self.limits.handshake_timeout, "the handshake")
            } else if !self.service.holds_state() {
                (
                    Instant::now() + self.limits.idle_timeout,
                    "a request (idle)",
                )
            } else {
                (
                    Instant::now() + self.limits.silent_transaction_timeout,
                    "a request with a transaction open",
                )
            };
            channel.transport_mut().socket_mut().set_deadline(deadline);
            poller.before_read(&channel.reader);
            // The body's bytes count against the server's budget until the request is done.
            let mut held = None;
            let frame = match read_frame_admitted(&mut channel.reader, |len| {
                held = Some(
                    self.budget
                        .take(len, self.limits.admit_wait)
                        .ok_or(FrameError::OverBudget(len))?,
                );
                Ok(())
            }) {
                Ok(frame) => frame,
                Err(FrameError::Closed) => return "client closed the connection".into(),
                Err(FrameError::Io(e)) if e.kind() == std::io::ErrorKind::TimedOut => {
                    return format!("timed out waiting for {waiting_for}");
                }
                Err(FrameError::BadMagic(magic)) if crate::tls::looks_like_tls(&magic) => {
                    return "a TLS client at a server that does not serve TLS".into()
                }
                Err(e) => return format!("malformed frame: {e}"),
            };
            self.activity.heard();
            let request: Request = match decode(&frame.body) {
                Ok(request) => request,
                Err(e) => return format!("malformed request body: {e}"),
            };
            let (response, close) = if !greeted {
                self.handshake_step(&mut handshake, request)
            } else {
                let name = request.name();
                match self.handle(request) {
                    Ok(response) => (response, None),
                    Err(error) => {
                        // A page that does not exist means the client is confused about the
                        // store: answer, then close rather than serve it further.
                        let close = matches!(error, Error::NoSuchPage { .. }).then(|| {
                            format!("{name} asked for a page that does not exist: {error}")
                        });
                        (Response::Failed(WireError::from(&error)), close)
                    }
                }
            };
            if handshake.is_done() {
                self.activity.set_greeted();
            }
            self.activity.set_in_transaction(self.service.holds_state());
            if let Err(e) = channel.send(frame.request_id, &encode(&response)) {
                return format!(
                    "could not answer (a client that stops reading is closed after {:?}): {e}",
                    self.limits.write_timeout
                );
            }
            if let Some(reason) = close {
                return reason;
            }
        }
    }

    /// One request of the handshake (see `crate::handshake`): the answer, and the reason to
    /// close the connection if it must close.
    fn handshake_step(
        &mut self,
        state: &mut ServerHandshake,
        request: Request,
    ) -> (Response, Option<String>) {
        match state.step(request, &self.auth, self.certificate_access, auth::nonce) {
            ServerStep::Challenge { nonce } => (Response::Challenge { nonce }, None),
            ServerStep::Welcome {
                client,
                access,
                server_proof,
                by_token,
            } => {
                if by_token {
                    tracing::info!(peer = %self.peer, %client, ?access, "client authenticated");
                } else if self.auth.authenticates_clients() {
                    tracing::info!(peer = %self.peer, %client, ?access, "client authenticated by its certificate");
                } else {
                    tracing::info!(peer = %self.peer, %client, "client connected (no authentication)");
                }
                self.access = access;
                (self.service.welcome(access, server_proof), None)
            }
            ServerStep::Refuse(reason) => {
                tracing::warn!(peer = %self.peer, %reason, "refused in the handshake");
                (
                    Response::Failed(WireError::PermissionDenied(reason.clone())),
                    Some(reason),
                )
            }
        }
    }

    /// Answers one request after the handshake: refused if the client may only read and the
    /// request would change anything.
    fn handle(&mut self, request: Request) -> Result<Response> {
        if self.access == Access::ReadOnly && request.writes() {
            return Err(Error::PermissionDenied {
                reason: format!(
                    "{} would change the store, and this client's token may only read",
                    request.name()
                ),
            });
        }
        if let Request::Hello { .. } | Request::Prove { .. } = request {
            return Err(Error::InvalidArgument(format!(
                "{} after the handshake",
                request.name()
            )));
        }
        self.service.handle(request)
    }
}

impl StoreService {
    /// `txn` must be one this connection began and has not finished.
    fn own(&self, txn: u64) -> Result<TxnId> {
        if self.txns.contains(&txn) {
            Ok(TxnId(txn))
        } else {
            Err(Error::TransactionInactive {
                reason: format!("transaction {txn} is not an open transaction of this connection"),
            })
        }
    }

    /// `reservation` must be one this connection made and has not released.
    fn own_reservation(&self, reservation: u64) -> Result<()> {
        if self.reservations.contains(&reservation) {
            return Ok(());
        }
        Err(Error::InvalidArgument(format!(
            "reservation {reservation} is not a reservation of this connection"
        )))
    }

    fn page(&self, page: u32) -> Result<PageId> {
        let page_count = self.server.volume().page_count();
        if page >= page_count {
            return Err(Error::NoSuchPage { page: PageId(page) });
        }
        Ok(PageId(page))
    }

    fn shipped<'a>(&self, pages: &'a [crate::message::WirePage]) -> Result<Vec<ShippedPage<'a>>> {
        let size = self.server.page_size();
        pages
            .iter()
            .map(|p| {
                if p.image.len() != size && !(p.logged && p.image.is_empty()) {
                    return Err(Error::InvalidArgument(format!(
                        "page {} shipped with {} bytes; pages have {size}",
                        p.page,
                        p.image.len()
                    )));
                }
                // The trust boundary: the server takes a shipped page's structure as sound.
                if !p.image.is_empty() {
                    validate_client_page(&p.image).map_err(|reason| {
                        Error::InvalidArgument(format!(
                            "page {} shipped malformed: {reason}",
                            p.page
                        ))
                    })?;
                }
                Ok(ShippedPage {
                    page: self.page(p.page)?,
                    image: &p.image,
                    logged: p.logged,
                })
            })
            .collect()
    }

    fn serve_request(&mut self, request: Request) -> Result<Response> {
        let server = self.server.clone();
        Ok(match request {
            Request::Hello { .. } | Request::Prove { .. } => {
                // The connection answers these (after the handshake, with an error).
                return Err(Error::InvalidArgument(format!(
                    "{} after the handshake",
                    request.name()
                )));
            }
            Request::ArchivePut { .. }
            | Request::ArchiveGet { .. }
            | Request::ArchiveGetMany { .. }
            | Request::ArchiveGetTs { .. }
            | Request::ArchiveRemove { .. }
            | Request::ArchiveBytes
            | Request::ArchiveNewestTimes => {
                return Err(Error::Unsupported(format!(
                    "{}: this server serves a store, not a snapshot archive",
                    request.name()
                )));
            }
            Request::Begin { kind } => {
                let txn = server.begin_transaction(kind.into())?;
                self.txns.insert(txn.0);
                // What this client has not heard about snapshots rides on the reply.
                let news = if server.keeps_versions() {
                    let news = bounded(server.snapshot_news(self.news_sent_us)?);
                    self.news_sent_us = news.curr_us;
                    Some(news.into())
                } else {
                    None
                };
                Response::Began { txn: txn.0, news }
            }
            Request::Lock { txn, target, mode } => {
                let mode = LockMode::from(mode);
                let target = match target {
                    WireLockTarget::Page(page) => LockTarget::Page(self.page(page)?),
                    WireLockTarget::Object(oid) => LockTarget::Object(Oid(oid)),
                };
                Response::Lsn(server.lock(self.own(txn)?, target, mode)?.0)
            }
            Request::NoteOperation { txn, note } => {
                server.note_operation(self.own(txn)?, note.as_note())?;
                Response::Done
            }
            Request::FetchPage { txn, page } => {
                let mut buf = vec![0u8; server.page_size()];
                server.fetch_page(self.own(txn)?, self.page(page)?, &mut buf)?;
                Response::Page(buf)
            }
            Request::LockAndFetch { txn, page, mode } => {
                let mut buf = vec![0u8; server.page_size()];
                let (txn, page) = (self.own(txn)?, self.page(page)?);
                server.lock_and_fetch_page(txn, page, LockMode::from(mode), &mut buf)?;
                Response::Page(buf)
            }
            Request::RunIncrements {
                parent,
                fields,
                note,
                force,
            } => {
                // More than the server runs in one go is the client's to run (its cache is
                // made for many pages); checked before anything is built from the request.
                if fields.len() > INCREMENTS_MAX {
                    Response::Increments(None)
                } else {
                    let fields: Vec<FieldIncrement> = fields.into_iter().map(Into::into).collect();
                    let parent = self.own(parent)?;
                    match server.run_increments(parent, &fields, note.as_note(), force)? {
                        IncrementsRan::Committed { sub, values } => {
                            Response::Increments(Some((sub.0, values)))
                        }
                        IncrementsRan::NotHere => Response::Increments(None),
                    }
                }
            }
            Request::FindSpace { txn, bytes, skip } => {
                let skip: Vec<PageId> = skip.into_iter().map(PageId).collect();
                let found = server.find_space(self.own(txn)?, bytes as usize, &skip)?;
                Response::Space(found.map(|(page, lsn)| (page.0, lsn.0)))
            }
            Request::AllocatePages { txn, count } => {
                let extents = server.allocate_pages(self.own(txn)?, count)?;
                Response::Extents(extents.iter().map(|e| (e.first.0, e.count)).collect())
            }
            Request::ReservePages { count } => {
                let (reservation, extents) = server.reserve_pages(count)?;
                self.reservations.insert(reservation);
                Response::Reserved {
                    reservation,
                    extents: extents.iter().map(|e| (e.first.0, e.count)).collect(),
                }
            }
            Request::TakeReserved {
                txn,
                reservation,
                page,
            } => {
                self.own_reservation(reservation)?;
                server.take_reserved(self.own(txn)?, reservation, self.page(page)?)?;
                Response::Done
            }
            Request::ReleaseReservation { reservation } => {
                self.own_reservation(reservation)?;
                server.release_reservation(reservation)?;
                self.reservations.remove(&reservation);
                Response::Done
            }
            Request::FreePages { txn, pages } => {
                let pages = pages
                    .into_iter()
                    .map(|p| self.page(p))
                    .collect::<Result<Vec<_>>>()?;
                server.free_pages(self.own(txn)?, &pages)?;
                Response::Done
            }
            Request::ShipRecords { txn, records } => {
                let txn = self.own(txn)?;
                match records {
                    WireRecords::Pages(records) => {
                        let parts = records
                            .records
                            .into_iter()
                            .map(|(page, offset, len)| Ok((self.page(page)?, offset, len)))
                            .collect::<Result<Vec<_>>>()?;
                        let records =
                            PageUpdates::from_parts(parts, records.bytes).map_err(|reason| {
                                Error::InvalidArgument(format!("malformed log records: {reason}"))
                            })?;
                        server.ship_records(txn, ShippedRecords::Pages(&records))?;
                    }
                    WireRecords::Objects(records) => {
                        let parts = records
                            .records
                            .into_iter()
                            .map(|(oid, offset, len)| (Oid(oid), offset, len));
                        let records =
                            ObjectUpdates::from_parts(parts, records.bytes).map_err(|reason| {
                                Error::InvalidArgument(format!(
                                    "malformed object redo records: {reason}"
                                ))
                            })?;
                        server.ship_records(txn, ShippedRecords::Objects(&records))?;
                    }
                }
                Response::Done
            }
            Request::ShipDirtyPages { txn, pages } => {
                let txn = self.own(txn)?;
                let shipped = self.shipped(&pages)?;
                Response::Lsns(
                    server
                        .ship_dirty_pages(txn, &shipped)?
                        .iter()
                        .map(|l| l.0)
                        .collect(),
                )
            }
            Request::Commit { txn } => {
                // A failed commit stays open here until the client aborts it (or leaves).
                let lsn = server.commit(self.own(txn)?)?;
                self.txns.remove(&txn);
                Response::Lsn(lsn.0)
            }
            Request::ShipAndCommit { txn, pages } => {
                let id = self.own(txn)?;
                let shipped = self.shipped(&pages)?;
                let (lsns, commit) = server.ship_and_commit(id, &shipped)?;
                self.txns.remove(&txn);
                Response::Committed {
                    pages: lsns.iter().map(|l: &Lsn| l.0).collect(),
                    commit: commit.0,
                }
            }
            Request::ShipAndCommitUnforced { txn, pages } => {
                let id = self.own(txn)?;
                let shipped = self.shipped(&pages)?;
                let (lsns, commit) = server.ship_and_commit_unforced(id, &shipped)?;
                self.txns.remove(&txn);
                Response::Committed {
                    pages: lsns.iter().map(|l: &Lsn| l.0).collect(),
                    commit: commit.lsn.0,
                }
            }
            Request::Abort { txn } => {
                let result = server.abort(self.own(txn)?);
                self.txns.remove(&txn);
                result?;
                Response::Done
            }
            Request::Stats => Response::Stats {
                server: server.stats(),
                log: server.log_stats(),
                locks: server.lock_stats(),
            },
            Request::Checkpoint => {
                server.checkpoint()?;
                Response::Done
            }
            Request::TakeSnapshot => Response::Snapshot(server.take_snapshot()?.into()),
            Request::Snapshots => Response::Snapshots(
                server
                    .list_snapshots()
                    .into_iter()
                    .map(Into::into)
                    .collect(),
            ),
            Request::DeleteSnapshots { ids, before_us } => {
                if ids.len() > crate::limits::SNAPSHOT_IDS_MAX {
                    return Err(Error::InvalidArgument(format!(
                        "{} snapshot ids in one request; at most {}",
                        ids.len(),
                        crate::limits::SNAPSHOT_IDS_MAX
                    )));
                }
                let which = |s: &lodestore_server::versions::Snapshot| {
                    ids.contains(&s.id) || before_us.is_some_and(|before| s.time_us < before)
                };
                Response::Snapshots(
                    server
                        .delete_snapshots(&which)?
                        .into_iter()
                        .map(Into::into)
                        .collect(),
                )
            }
            Request::SnapshotNews { since_us } => {
                Response::News(bounded(server.snapshot_news(since_us)?).into())
            }
        })
    }
}

impl Service for StoreService {
    fn handle(&mut self, request: Request) -> Result<Response> {
        self.serve_request(request)
    }

    fn welcome(&self, access: Access, server_proof: Option<Vec<u8>>) -> Response {
        Response::Welcome {
            page_size: self.server.page_size() as u32,
            volume: self.server.volume_id(),
            root_directory: self.server.root_directory().0,
            recovery_method: self.server.recovery_method().to_string(),
            restart: self.server.restart_report().clone(),
            access,
            server_proof: server_proof.map(serde_bytes::ByteBuf::from),
        }
    }

    fn holds_state(&self) -> bool {
        !self.txns.is_empty()
    }

    fn close(&mut self, peer: &str) {
        // Subtransactions and flat transactions first: a level-1 transaction cannot end while
        // a subtransaction of it runs, and then its completed ones are compensated.
        let mut txns: Vec<u64> = self.txns.drain().collect();
        txns.sort_unstable_by_key(|&txn| self.server.is_level_one(TxnId(txn)));
        for txn in txns {
            if let Err(e) = self.server.abandon(TxnId(txn)) {
                tracing::warn!(peer, txn, error = %e, "abort after disconnect failed");
            } else {
                tracing::info!(
                    peer,
                    txn,
                    "rolled back the transaction of a closed connection"
                );
            }
        }
        for reservation in self.reservations.drain() {
            if let Err(e) = self.server.release_reservation(reservation) {
                tracing::warn!(peer, reservation, error = %e, "release after disconnect failed");
            }
        }
    }
}

/// At most `NEWS_SNAPSHOTS_MAX` snapshots of `news`, its current time cut back to the last one
/// kept: still the whole truth of a shorter interval.
fn bounded(mut news: lodestore_server::SnapshotNews) -> lodestore_server::SnapshotNews {
    if news.taken.len() > crate::limits::NEWS_SNAPSHOTS_MAX {
        news.taken.truncate(crate::limits::NEWS_SNAPSHOTS_MAX);
        news.curr_us = news.taken.last().map_or(news.prev_us, |&(_, time)| time);
    }
    news
}
