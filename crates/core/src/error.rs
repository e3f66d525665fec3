//! The one error type of Lodestore. Every variant says what went wrong and where: the file, the
//! page, the object or the argument. Nothing in Lodestore panics on bad input; it returns one of
//! these.

use crate::ids::{Oid, PageId, TypeId};
use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The operating system refused an I/O operation.
    #[error("I/O error on {path}: {operation}: {source}")]
    Io {
        path: PathBuf,
        operation: &'static str,
        #[source]
        source: std::io::Error,
    },

    /// The path does not hold a Lodestore store (missing data file, wrong magic number).
    #[error("{path} is not a Lodestore store: {reason}")]
    NotAStore { path: PathBuf, reason: String },

    /// Another process (or another handle in this one) has the store open.
    #[error("{path} is in use by another process")]
    StoreLocked { path: PathBuf },

    /// A store already exists where one was to be created.
    #[error("{path} already holds a Lodestore store")]
    AlreadyExists { path: PathBuf },

    /// The store was written by a format this build does not read.
    #[error(
        "{path}: {structure} has format version {found}; this build reads version {supported}"
    )]
    UnsupportedFormat {
        path: PathBuf,
        structure: &'static str,
        found: u32,
        supported: u32,
    },

    /// The caller asked for a page size other than the store's.
    #[error("{path}: store has page size {stored} bytes but {requested} bytes was requested")]
    PageSizeMismatch {
        path: PathBuf,
        stored: usize,
        requested: usize,
    },

    /// Both superblock copies are unreadable.
    #[error("{path}: superblock is corrupt: {reason}")]
    CorruptSuperblock { path: PathBuf, reason: String },

    /// A page failed its checksum or its structure checks.
    #[error("{path}: page {page} is corrupt: {reason}")]
    CorruptPage {
        path: PathBuf,
        page: PageId,
        reason: String,
    },

    /// A file of the store (data file, backup image, snapshot file, anchor) is damaged or
    /// has a length no valid one has.
    #[error("{path}: file is corrupt: {reason}")]
    CorruptFile { path: PathBuf, reason: String },

    /// The log is damaged before its end: a record that fails its checks is followed by valid
    /// records, so this is not a torn tail and cannot be repaired by truncation.
    #[error("{path}: log damaged at byte {offset} of the segment: {reason}")]
    CorruptLog {
        path: PathBuf,
        offset: u64,
        reason: String,
    },

    /// An argument is out of range or malformed.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The page number is outside the volume or names a page no client may use.
    #[error("page {page} does not exist or is not a data page")]
    NoSuchPage { page: PageId },

    /// The OID names no live object.
    #[error("object {oid} does not exist")]
    ObjectNotFound { oid: Oid },

    /// The object exists but is of another type (or size) than the one asked for.
    #[error("object {oid} has type {found} and {found_len} bytes; expected type {expected} and {expected_len} bytes")]
    TypeMismatch {
        oid: Oid,
        expected: TypeId,
        expected_len: u64,
        found: TypeId,
        found_len: u64,
    },

    /// A typed view would be misaligned.
    #[error(
        "object {oid}: type needs alignment {align}, which objects do not guarantee (maximum 8)"
    )]
    Misaligned { oid: Oid, align: usize },

    /// A byte range lies outside the object.
    #[error("object {oid}: range {offset}..{end} is outside its {len} bytes")]
    OutOfBounds {
        oid: Oid,
        offset: u64,
        end: u64,
        len: u64,
    },

    /// The object is stored across several pages and has no contiguous in-memory view.
    #[error("object {oid} is a large object ({len} bytes); use read/write by range")]
    LargeObject { oid: Oid, len: u64 },

    /// The object is larger than the store accepts, or cannot grow where it is.
    #[error("object of {len} bytes is too large: {reason}")]
    ObjectTooLarge { len: u64, reason: String },

    /// A named root does not exist.
    #[error("no root named {name:?}")]
    RootNotFound { name: String },

    /// Waiting for the lock would close a cycle of waiting transactions; this one was chosen to
    /// give up. Abort and retry the transaction.
    #[error("deadlock waiting for page {page}; abort and retry the transaction")]
    Deadlock { page: PageId },

    /// The lock was not granted in time. Abort and retry the transaction.
    #[error("timed out after {waited_ms} ms waiting for a lock on page {page}; abort and retry")]
    LockTimeout { page: PageId, waited_ms: u64 },

    /// The transaction is no longer usable (it failed earlier and must be aborted).
    #[error("transaction is no longer active: {reason}")]
    TransactionInactive { reason: String },

    /// An operation this configuration does not provide.
    #[error("unsupported: {0}")]
    Unsupported(String),

    /// The server of a remote store reported an error (its message).
    #[error("server: {0}")]
    Remote(String),

    /// The connection to a remote store's server failed or carried something malformed.
    #[error("connection to {peer}: {reason}")]
    Connection { peer: String, reason: String },

    /// Authentication failed, or the client's token does not allow what it asked.
    #[error("permission denied: {reason}")]
    PermissionDenied { reason: String },

    /// A transaction kept failing with retryable errors (deadlock victim, lock timeout) and
    /// was given up after `attempts` runs; `last` is the last error.
    #[error("gave up after {attempts} attempts: {last}")]
    RetriesExhausted { attempts: u32, last: Box<Error> },

    /// No snapshot answers the request: an unknown id, or a time before the first snapshot.
    #[error("no such snapshot: {reason}")]
    NoSuchSnapshot { reason: String },

    /// A snapshot archive, or a page copy in it, failed its checks.
    #[error("{path}: snapshot copy of page {page} at time {time_us} is corrupt: {reason}")]
    CorruptArchive {
        path: PathBuf,
        page: PageId,
        time_us: u64,
        reason: String,
    },

    /// `oid` is not a collection of the key and value types asked for.
    #[error("object {oid} is not the collection asked for: {reason}")]
    NotACollection { oid: Oid, reason: String },

    /// A node of a collection failed its checks.
    #[error("collection {collection}: node {node} is damaged: {reason}")]
    CorruptCollection {
        collection: Oid,
        node: Oid,
        reason: String,
    },

    /// A multi-level transaction's undo record names an operation the store does not know:
    /// the warm start cannot compensate it, and runs nothing until it can.
    #[error(
        "{log}: the undo record at LSN {lsn} of transaction {txn} names operation {id}, which is \
         not registered with the store (Options::operation)"
    )]
    UnknownOperation {
        log: PathBuf,
        lsn: u64,
        txn: u64,
        id: u32,
    },

    /// A key or value is longer than the collection allows.
    #[error(
        "collection {collection}: {what} of {len} bytes is longer than the limit of {max} bytes"
    )]
    EntryTooLong {
        collection: Oid,
        what: &'static str,
        len: usize,
        max: usize,
    },
}

impl Error {
    /// Wraps an `std::io::Error` with the file and the operation that failed.
    pub fn io(path: impl Into<PathBuf>, operation: &'static str, source: std::io::Error) -> Error {
        Error::Io {
            path: path.into(),
            operation,
            source,
        }
    }

    /// Is retrying the whole transaction a sensible reaction?
    pub fn is_retryable(&self) -> bool {
        matches!(self, Error::Deadlock { .. } | Error::LockTimeout { .. })
    }
}
