//! The messages: one request, one response, in order, per connection. Bodies are encoded with
//! postcard; identifiers travel as plain integers so the wire format does not depend on how
//! the Rust types are declared.

use lodestore_core::{Error, Oid, PageId, TxnId};
use lodestore_server::versions::Snapshot;
use lodestore_server::{
    FieldIncrement, LockMode, LockTarget, OperationNote, SnapshotNews, TxnKind,
};
use lodestore_server::{LockStats, RestartReport, ServerStats};
use lodestore_wal::LogStats;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// The first request of a connection: who the client is, and its nonce for the
    /// handshake (see [`crate::auth`]).
    Hello {
        client: String,
        #[serde(with = "serde_bytes")]
        nonce: Vec<u8>,
    },
    Begin {
        kind: WireTxnKind,
    },
    Lock {
        txn: u64,
        target: WireLockTarget,
        mode: WireLockMode,
    },
    FetchPage {
        txn: u64,
        page: u32,
    },
    FindSpace {
        txn: u64,
        bytes: u64,
        skip: Vec<u32>,
    },
    AllocatePages {
        txn: u64,
        count: u32,
    },
    FreePages {
        txn: u64,
        pages: Vec<u32>,
    },
    ShipRecords {
        txn: u64,
        records: WireRecords,
    },
    ShipDirtyPages {
        txn: u64,
        pages: Vec<WirePage>,
    },
    Commit {
        txn: u64,
    },
    ShipAndCommit {
        txn: u64,
        pages: Vec<WirePage>,
    },
    /// A subtransaction's last pages and its commit, appended but not forced, and its locks
    /// released: a later forced commit makes it durable (strategy S2/PS of multi-level
    /// transactions; `PageServer::ship_and_commit_unforced`).
    ShipAndCommitUnforced {
        txn: u64,
        pages: Vec<WirePage>,
    },
    Abort {
        txn: u64,
    },
    /// The server's counters.
    Stats,
    /// Take a checkpoint now.
    Checkpoint,
    /// The client's answer to a challenge: its proof that it holds a token.
    Prove {
        #[serde(with = "serde_bytes")]
        proof: Vec<u8>,
    },
    /// Take a snapshot of the store.
    TakeSnapshot,
    /// Every snapshot of the store.
    Snapshots,
    /// Delete the snapshots with these ids, and (with `before_us`) every one taken before
    /// that time.
    DeleteSnapshots {
        ids: Vec<u64>,
        before_us: Option<u64>,
    },
    /// The news of snapshots taken after `since_us` (a client filling a gap, Moh 2.3).
    SnapshotNews {
        since_us: u64,
    },
    /// Reserve free pages for this connection's transactions to come.
    ReservePages {
        count: u32,
    },
    /// Take a page of a reservation into a transaction.
    TakeReserved {
        txn: u64,
        reservation: u64,
        page: u32,
    },
    /// End a reservation.
    ReleaseReservation {
        reservation: u64,
    },
    /// What a subtransaction logs at level 1 when it commits (`PageServer::note_operation`).
    NoteOperation {
        txn: u64,
        note: WireOperationNote,
    },
    /// Archive node: keep these page copies; answered once they are durable.
    ArchivePut {
        copies: Vec<WireCopy>,
    },
    /// Archive node: the oldest copy of `page` at or after `time_us`.
    ArchiveGet {
        page: u32,
        time_us: u64,
    },
    /// Archive node: for each (page, time), the oldest copy at or after the time, in one
    /// round trip (a store reading ahead).
    ArchiveGetMany {
        wants: Vec<(u32, u64)>,
    },
    /// Archive node: the newest time held for `page`.
    ArchiveGetTs {
        page: u32,
    },
    /// Archive node: forget these copies (page, time).
    ArchiveRemove {
        copies: Vec<(u32, u64)>,
    },
    /// Archive node: the bytes it holds.
    ArchiveBytes,
    /// Archive node: the newest time of every page it holds a copy of (the store's page map,
    /// so that pages never archived are not asked for one by one).
    ArchiveNewestTimes,
    /// `Lock` of a page and `FetchPage` in one round trip (version 10; last, so the
    /// variants before it keep their numbers): a client cache miss.
    /// Answered with the page.
    LockAndFetch {
        txn: u64,
        page: u32,
        mode: WireLockMode,
    },
    /// Commuting increments run as one subtransaction of `parent` at the server
    /// (`PageServer::run_increments`, version 11): one round trip instead of the four of a
    /// client's steps. Answered with `Increments`.
    RunIncrements {
        parent: u64,
        fields: Vec<WireIncrement>,
        note: WireOperationNote,
        force: bool,
    },
}

/// One increment of `RunIncrements` (`FieldIncrement`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireIncrement {
    pub object: u64,
    pub offset: u32,
    pub delta: i64,
}

impl From<FieldIncrement> for WireIncrement {
    fn from(field: FieldIncrement) -> Self {
        WireIncrement {
            object: field.object.0,
            offset: field.offset,
            delta: field.delta,
        }
    }
}

impl From<WireIncrement> for FieldIncrement {
    fn from(field: WireIncrement) -> Self {
        FieldIncrement {
            object: Oid(field.object),
            offset: field.offset,
            delta: field.delta,
        }
    }
}

/// A page copy on its way to an archive node, or back from one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireCopy {
    pub page: u32,
    pub time_us: u64,
    #[serde(with = "serde_bytes")]
    pub image: Vec<u8>,
}

impl Request {
    /// A short name for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Request::Hello { .. } => "hello",
            Request::Prove { .. } => "prove",
            Request::Begin { .. } => "begin",
            Request::Lock { .. } => "lock",
            Request::NoteOperation { .. } => "note-operation",
            Request::FetchPage { .. } => "fetch-page",
            Request::LockAndFetch { .. } => "lock-and-fetch",
            Request::RunIncrements { .. } => "run-increments",
            Request::FindSpace { .. } => "find-space",
            Request::AllocatePages { .. } => "allocate-pages",
            Request::FreePages { .. } => "free-pages",
            Request::ShipRecords { .. } => "ship-records",
            Request::ShipDirtyPages { .. } => "ship-dirty-pages",
            Request::Commit { .. } => "commit",
            Request::ShipAndCommit { .. } => "ship-and-commit",
            Request::ShipAndCommitUnforced { .. } => "ship-and-commit-unforced",
            Request::Abort { .. } => "abort",
            Request::Stats => "stats",
            Request::Checkpoint => "checkpoint",
            Request::TakeSnapshot => "take-snapshot",
            Request::Snapshots => "snapshots",
            Request::DeleteSnapshots { .. } => "delete-snapshots",
            Request::SnapshotNews { .. } => "snapshot-news",
            Request::ReservePages { .. } => "reserve-pages",
            Request::TakeReserved { .. } => "take-reserved",
            Request::ReleaseReservation { .. } => "release-reservation",
            Request::ArchivePut { .. } => "archive-put",
            Request::ArchiveGet { .. } => "archive-get",
            Request::ArchiveGetMany { .. } => "archive-get-many",
            Request::ArchiveGetTs { .. } => "archive-get-ts",
            Request::ArchiveRemove { .. } => "archive-remove",
            Request::ArchiveBytes => "archive-bytes",
            Request::ArchiveNewestTimes => "archive-newest-times",
        }
    }
}

impl Request {
    /// Would this request change the store (refused to a read-only client)?
    pub fn writes(&self) -> bool {
        match self {
            Request::Lock { mode, .. } | Request::LockAndFetch { mode, .. } => {
                *mode != WireLockMode::Shared
            }
            Request::NoteOperation { .. } | Request::RunIncrements { .. } => true,
            Request::ShipAndCommit { pages, .. } | Request::ShipAndCommitUnforced { pages, .. } => {
                !pages.is_empty()
            }
            Request::FindSpace { .. }
            | Request::AllocatePages { .. }
            | Request::ReservePages { .. }
            | Request::TakeReserved { .. }
            | Request::ReleaseReservation { .. }
            | Request::FreePages { .. }
            | Request::ShipRecords { .. }
            | Request::ShipDirtyPages { .. }
            | Request::Checkpoint
            | Request::TakeSnapshot
            | Request::DeleteSnapshots { .. }
            | Request::ArchivePut { .. }
            | Request::ArchiveRemove { .. } => true,
            Request::Hello { .. }
            | Request::Prove { .. }
            | Request::Begin { .. }
            | Request::FetchPage { .. }
            | Request::Commit { .. }
            | Request::Abort { .. }
            | Request::Stats
            | Request::Snapshots
            | Request::SnapshotNews { .. }
            | Request::ArchiveGet { .. }
            | Request::ArchiveGetMany { .. }
            | Request::ArchiveGetTs { .. }
            | Request::ArchiveBytes
            | Request::ArchiveNewestTimes => false,
        }
    }
}

/// The kind of transaction a `Begin` asks for (`TxnKind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WireTxnKind {
    ReadWrite,
    ReadOnlyAsOf { snapshot: u64 },
    Sub { parent: u64 },
}

impl From<TxnKind> for WireTxnKind {
    fn from(kind: TxnKind) -> Self {
        match kind {
            TxnKind::ReadWrite => WireTxnKind::ReadWrite,
            TxnKind::ReadOnlyAsOf { snapshot } => WireTxnKind::ReadOnlyAsOf { snapshot },
            TxnKind::Sub { parent } => WireTxnKind::Sub { parent: parent.0 },
        }
    }
}

impl From<WireTxnKind> for TxnKind {
    fn from(kind: WireTxnKind) -> Self {
        match kind {
            WireTxnKind::ReadWrite => TxnKind::ReadWrite,
            WireTxnKind::ReadOnlyAsOf { snapshot } => TxnKind::ReadOnlyAsOf { snapshot },
            WireTxnKind::Sub { parent } => TxnKind::Sub {
                parent: TxnId(parent),
            },
        }
    }
}

/// A lock's mode (`LockMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WireLockMode {
    Shared,
    Exclusive,
    Increment,
}

impl From<LockMode> for WireLockMode {
    fn from(mode: LockMode) -> Self {
        match mode {
            LockMode::Shared => WireLockMode::Shared,
            LockMode::Exclusive => WireLockMode::Exclusive,
            LockMode::Increment => WireLockMode::Increment,
        }
    }
}

impl From<WireLockMode> for LockMode {
    fn from(mode: WireLockMode) -> Self {
        match mode {
            WireLockMode::Shared => LockMode::Shared,
            WireLockMode::Exclusive => LockMode::Exclusive,
            WireLockMode::Increment => LockMode::Increment,
        }
    }
}

/// A level-1 note (`OperationNote`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WireOperationNote {
    Undo {
        inverse: u32,
        #[serde(with = "serde_bytes")]
        args: Vec<u8>,
    },
    Compensates {
        undone: u64,
    },
}

impl From<OperationNote<'_>> for WireOperationNote {
    fn from(note: OperationNote<'_>) -> Self {
        match note {
            OperationNote::Undo { inverse, args } => WireOperationNote::Undo {
                inverse,
                args: args.to_vec(),
            },
            OperationNote::Compensates { undone } => {
                WireOperationNote::Compensates { undone: undone.0 }
            }
        }
    }
}

impl WireOperationNote {
    pub fn as_note(&self) -> OperationNote<'_> {
        match self {
            WireOperationNote::Undo { inverse, args } => OperationNote::Undo {
                inverse: *inverse,
                args,
            },
            WireOperationNote::Compensates { undone } => OperationNote::Compensates {
                undone: TxnId(*undone),
            },
        }
    }
}

/// What a `Lock` is on (`LockTarget`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WireLockTarget {
    Page(u32),
    Object(u64),
}

impl From<LockTarget> for WireLockTarget {
    fn from(target: LockTarget) -> Self {
        match target {
            LockTarget::Page(page) => WireLockTarget::Page(page.0),
            LockTarget::Object(oid) => WireLockTarget::Object(oid.0),
        }
    }
}

/// A batch of shipped log records, in one of the shapes of `ShippedRecords`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WireRecords {
    Pages(WireUpdates),
    Objects(WireObjectUpdates),
}

/// Log records shipped together, as `PageUpdates` keeps them: each record's page, offset and
/// length, and the bytes of all of them (each record's before bytes, then its after bytes).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireUpdates {
    pub records: Vec<(u32, u32, u32)>,
    #[serde(with = "serde_bytes")]
    pub bytes: Vec<u8>,
}

/// Object redo records shipped together, as `ObjectUpdates` keeps them: each record's OID,
/// offset in the object and length, and the after bytes of all of them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireObjectUpdates {
    pub records: Vec<(u64, u32, u32)>,
    #[serde(with = "serde_bytes")]
    pub bytes: Vec<u8>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WirePage {
    pub page: u32,
    pub logged: bool,
    #[serde(with = "serde_bytes")]
    pub image: Vec<u8>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Response {
    Welcome {
        page_size: u32,
        volume: u16,
        root_directory: u64,
        recovery_method: String,
        restart: RestartReport,
        /// What this client may do.
        access: crate::auth::Access,
        /// The server's proof that it holds the client's token (none when the server
        /// requires no token).
        server_proof: Option<serde_bytes::ByteBuf>,
    },
    Stats {
        server: ServerStats,
        log: LogStats,
        locks: LockStats,
    },
    /// A transaction began; with news of snapshots when the store keeps them (Thor's
    /// snapshot messages ride on replies).
    Began {
        txn: u64,
        news: Option<WireNews>,
    },
    Lsn(u64),
    Page(#[serde(with = "serde_bytes")] Vec<u8>),
    Space(Option<(u32, u64)>),
    Extents(Vec<(u32, u32)>),
    Reserved {
        reservation: u64,
        extents: Vec<(u32, u32)>,
    },
    Done,
    Lsns(Vec<u64>),
    Committed {
        pages: Vec<u64>,
        commit: u64,
    },
    Failed(WireError),
    /// The server requires a token: its nonce for the client's proof.
    Challenge {
        #[serde(with = "serde_bytes")]
        nonce: Vec<u8>,
    },
    Snapshot(WireSnapshot),
    Snapshots(Vec<WireSnapshot>),
    News(WireNews),
    /// An archive node's copy (`ArchiveGet`), if it holds one.
    Copy(Option<WireCopy>),
    /// An archive node's copies (`ArchiveGetMany`), in the order asked.
    Copies(Vec<Option<WireCopy>>),
    /// An archive node's newest time of a page (`ArchiveGetTs`), if it holds a copy.
    Time(Option<u64>),
    /// Bytes an archive node holds (`ArchiveBytes`).
    Bytes(u64),
    /// Every page an archive node holds a copy of with its newest time
    /// (`ArchiveNewestTimes`); `None` when it cannot list them in one reply.
    NewestTimes(Option<Vec<(u32, u64)>>),
    /// `RunIncrements` committed as subtransaction `sub` with the fields' new values, in
    /// order; `None` when the server left the operation to the client (`NotHere`).
    Increments(Option<(u64, Vec<i64>)>),
}

/// A snapshot (`Snapshot`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireSnapshot {
    pub id: u64,
    pub time_us: u64,
    pub lsn: u64,
}

impl From<Snapshot> for WireSnapshot {
    fn from(s: Snapshot) -> Self {
        WireSnapshot {
            id: s.id,
            time_us: s.time_us,
            lsn: s.lsn.0,
        }
    }
}

impl From<WireSnapshot> for Snapshot {
    fn from(s: WireSnapshot) -> Self {
        Snapshot {
            id: s.id,
            time_us: s.time_us,
            lsn: lodestore_core::Lsn(s.lsn),
        }
    }
}

/// News of snapshots (`SnapshotNews`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireNews {
    pub prev_us: u64,
    pub taken: Vec<(u64, u64)>,
    pub curr_us: u64,
}

impl From<SnapshotNews> for WireNews {
    fn from(n: SnapshotNews) -> Self {
        WireNews {
            prev_us: n.prev_us,
            taken: n.taken,
            curr_us: n.curr_us,
        }
    }
}

impl From<WireNews> for SnapshotNews {
    fn from(n: WireNews) -> Self {
        SnapshotNews {
            prev_us: n.prev_us,
            taken: n.taken,
            curr_us: n.curr_us,
        }
    }
}

/// An error the server returns; the kinds a client acts on keep their fields.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum WireError {
    Deadlock {
        page: u32,
    },
    LockTimeout {
        page: u32,
        waited_ms: u64,
    },
    TransactionInactive {
        reason: String,
    },
    NoSuchPage {
        page: u32,
    },
    InvalidArgument(String),
    Unsupported(String),
    PermissionDenied(String),
    /// Anything else, as the server's message.
    Other(String),
    NoSuchSnapshot(String),
}

impl From<&Error> for WireError {
    fn from(error: &Error) -> WireError {
        match error {
            Error::Deadlock { page } => WireError::Deadlock { page: page.0 },
            Error::LockTimeout { page, waited_ms } => WireError::LockTimeout {
                page: page.0,
                waited_ms: *waited_ms,
            },
            Error::TransactionInactive { reason } => WireError::TransactionInactive {
                reason: reason.clone(),
            },
            Error::NoSuchPage { page } => WireError::NoSuchPage { page: page.0 },
            Error::InvalidArgument(message) => WireError::InvalidArgument(message.clone()),
            Error::Unsupported(message) => WireError::Unsupported(message.clone()),
            Error::PermissionDenied { reason } => WireError::PermissionDenied(reason.clone()),
            Error::NoSuchSnapshot { reason } => WireError::NoSuchSnapshot(reason.clone()),
            other => WireError::Other(other.to_string()),
        }
    }
}

impl From<WireError> for Error {
    fn from(error: WireError) -> Error {
        match error {
            WireError::Deadlock { page } => Error::Deadlock { page: PageId(page) },
            WireError::LockTimeout { page, waited_ms } => Error::LockTimeout {
                page: PageId(page),
                waited_ms,
            },
            WireError::TransactionInactive { reason } => Error::TransactionInactive { reason },
            WireError::NoSuchPage { page } => Error::NoSuchPage { page: PageId(page) },
            WireError::InvalidArgument(message) => Error::InvalidArgument(message),
            WireError::Unsupported(message) => Error::Unsupported(message),
            WireError::PermissionDenied(reason) => Error::PermissionDenied { reason },
            WireError::Other(message) => Error::Remote(message),
            WireError::NoSuchSnapshot(reason) => Error::NoSuchSnapshot { reason },
        }
    }
}

pub fn encode<T: Serialize>(message: &T) -> Vec<u8> {
    postcard::to_stdvec(message).expect("encoding into a vector cannot fail")
}

pub fn decode<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, postcard::Error> {
    postcard::from_bytes(body)
}
