//! The client/server boundary. Everything a client asks of a server goes through this trait:
//! pages in (fetch), pages and log records out (ship), locks, space, and the end of a
//! transaction. The page shipping follows QuickStore section 3.1: clients cache whole pages
//! across transactions and validate them by LSN when they lock them again.

pub use crate::batch::{ObjectUpdate, ObjectUpdates, PageUpdate, PageUpdates};
use lodestore_core::{Lsn, Oid, PageId, Result, TxnId, VolumeId};
use lodestore_storage::large::Extent;

/// Lock modes. Not ordered: which mode covers which is the lock manager's table. Pages are
/// locked shared or exclusive; objects also in the semantic modes of multi-level
/// transactions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LockMode {
    Shared = 0,
    Exclusive = 1,
    /// Objects only: increments and decrements of a counter commute, so two transactions may
    /// hold it at once; it conflicts with shared and exclusive (Hasse & Weikum section 2: lock
    /// modes derived from the operations' commutativity).
    Increment = 2,
}

impl LockMode {
    /// Does holding `self` grant `wanted` too? (Exclusive grants every mode.)
    pub fn covers(self, wanted: LockMode) -> bool {
        self == LockMode::Exclusive || self == wanted
    }
}

/// What kind of transaction `begin_transaction` starts. Only read-write transactions are
/// served today; the others are refused with `Error::Unsupported` until the families that
/// need them (snapshots, multi-level transactions) implement them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxnKind {
    ReadWrite,
    /// Reads only, of the store as it was at a snapshot.
    ReadOnlyAsOf {
        snapshot: u64,
    },
    /// A subtransaction of `parent`, whose locks end with it or pass to the parent.
    Sub {
        parent: TxnId,
    },
}

/// What a lock is taken on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockTarget {
    Page(PageId),
    /// One object, by a level-1 transaction (semantic locks of multi-level transactions),
    /// held to its end.
    Object(Oid),
}

/// What the end of a subtransaction logs at level 1 (multi-level transactions; Hasse &
/// Weikum section 2). The server appends it just before the subtransaction's commit record,
/// so the subtransaction's changes are never durable without it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OperationNote<'a> {
    /// What undoes the subtransaction's operation: the inverse's registered id (never 0) and
    /// its encoded arguments.
    Undo { inverse: u32, args: &'a [u8] },
    /// The subtransaction compensated `undone`, an earlier subtransaction of the same
    /// parent.
    Compensates { undone: TxnId },
}

/// A batch of log records a client ships, in one of the shapes a server takes.
#[derive(Clone, Copy, Debug)]
pub enum ShippedRecords<'a> {
    /// Byte-range records of pages: before and after bytes.
    Pages(&'a PageUpdates),
    /// Object update records: after bytes; the server finds the before bytes.
    Objects(&'a ObjectUpdates),
}

impl ShippedRecords<'_> {
    /// A short name for errors and logs.
    pub fn shape(&self) -> &'static str {
        match self {
            ShippedRecords::Pages(_) => "page records",
            ShippedRecords::Objects(_) => "object records",
        }
    }
}

/// A commit whose record is in the log but not yet known durable (see
/// `PageServer::ship_and_commit_deferred`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppendedCommit {
    /// The commit record's LSN.
    pub lsn: Lsn,
    /// Nothing is left to wait for: the transaction wrote nothing, or the server made the
    /// commit durable before answering.
    pub durable: bool,
    /// The log stream that holds the record (0: the server's one log; a method with several
    /// streams puts a transaction's records in one of them).
    pub stream: u16,
}

/// A dirty page on its way to the server.
#[derive(Clone, Copy, Debug)]
pub struct ShippedPage<'a> {
    pub page: PageId,
    pub image: &'a [u8],
    /// The client already shipped log records for every change of this page since it last
    /// shipped it: the server checks that the image matches them and logs nothing more.
    /// Otherwise the server diffs the image against its own copy and logs the difference.
    /// A logged page may come with an empty image (a method that needs only the records):
    /// the records describe it and the server, which applied them to its copy, only answers
    /// the page's LSN.
    pub logged: bool,
}

/// What a client asks of a server.
pub trait PageServer: Send + Sync {
    /// Page size of the volume, in bytes.
    fn page_size(&self) -> usize;

    /// The volume this server owns.
    fn volume_id(&self) -> VolumeId;

    /// The OID of the named-roots directory object.
    fn root_directory(&self) -> Oid;

    /// Starts a transaction of `kind`. A kind the server does not serve is refused with
    /// `Error::Unsupported`.
    fn begin_transaction(&self, kind: TxnKind) -> Result<TxnId>;

    /// Starts a read-write transaction.
    fn begin(&self) -> Result<TxnId> {
        self.begin_transaction(TxnKind::ReadWrite)
    }

    /// Keeps the shared page locks of this caller's transactions from one to the next, for at
    /// most `limit` pages (see [`crate::KeptLocks`]): the handle to pass to
    /// [`Self::begin_keeping`] and, when the caller goes, to [`Self::forget_kept`]. `None`
    /// when the server cannot call locks back (across a network, or where reads are recorded
    /// as they happen).
    fn keep_read_locks(&self, limit: usize) -> Option<std::sync::Arc<crate::KeptLocks>> {
        let _ = limit;
        None
    }

    /// Starts a read-write transaction whose shared page locks are kept in `kept` when it
    /// ends, and which may read the pages kept there without asking for their locks.
    fn begin_keeping(&self, kept: &crate::KeptLocks) -> Result<TxnId> {
        let _ = kept;
        self.begin()
    }

    /// Releases every lock kept in `kept`; it serves no transaction afterwards.
    fn forget_kept(&self, kept: &crate::KeptLocks) {
        let _ = kept;
    }

    /// Locks `target` for `txn` (strict two-phase: held until commit or abort). For a page,
    /// returns the LSN of its committed version, so a client can tell whether its cached copy
    /// is current. A target the server does not serve is refused with `Error::Unsupported`.
    fn lock(&self, txn: TxnId, target: LockTarget, mode: LockMode) -> Result<Lsn>;

    /// Locks objects for `txn`, in order (see `lock`): what a level-1 operation needs before
    /// it runs. Stops at the first refusal; what was granted stays held, as any lock. An
    /// embedded server takes them in one pass over its state, a remote one in a request each.
    fn lock_objects(&self, txn: TxnId, objects: &[(Oid, LockMode)]) -> Result<()> {
        for &(oid, mode) in objects {
            self.lock(txn, LockTarget::Object(oid), mode)?;
        }
        Ok(())
    }

    /// Locks `page` (see `lock`).
    fn lock_page(&self, txn: TxnId, page: PageId, mode: LockMode) -> Result<Lsn> {
        self.lock(txn, LockTarget::Page(page), mode)
    }

    /// Copies the version of `page` that `txn` sees (the committed one, or the one `txn` itself
    /// shipped earlier) into `buf`. The caller holds a lock on the page.
    fn fetch_page(&self, txn: TxnId, page: PageId, buf: &mut [u8]) -> Result<()>;

    /// Locks `page` (see `lock`) and copies the version `txn` sees into `buf` (see
    /// `fetch_page`): a client cache miss in one call. Returns the LSN of the page copied.
    /// Servers override it to do both at once (a remote one in one round trip, an embedded
    /// one in one pass through its state).
    fn lock_and_fetch_page(
        &self,
        txn: TxnId,
        page: PageId,
        mode: LockMode,
        buf: &mut [u8],
    ) -> Result<Lsn> {
        self.lock_page(txn, page, mode)?;
        self.fetch_page(txn, page, buf)?;
        Ok(lodestore_storage::page::lsn(buf))
    }

    /// Finds a slotted page with at least `bytes` free bytes according to the free-space hints,
    /// skipping `skip`, and locks it exclusively for `txn`. Returns the page and the LSN of its
    /// committed version, or `None` when no known page has room. A server may pass over pages
    /// whose room is a small part of a page, not worth reading for a new object.
    fn find_space(
        &self,
        txn: TxnId,
        bytes: usize,
        skip: &[PageId],
    ) -> Result<Option<(PageId, Lsn)>>;

    /// Allocates `count` free pages for `txn`, as few runs of consecutive pages as it can, locked
    /// exclusively. The caller formats them; until `txn` commits they stay free on disk.
    fn allocate_pages(&self, txn: TxnId, count: u32) -> Result<Vec<Extent>>;

    /// Reserves `count` free pages for the caller across its transactions, so it can name
    /// objects on them before it writes them (`Session::reserve`): no allocation gives them
    /// out until the reservation is released. A transaction takes a page with
    /// `take_reserved` before it formats it; once that transaction commits, the page leaves
    /// the reservation. Returns the reservation's id and its pages. Reservations live in
    /// memory only: after a restart every page no committed transaction formatted is free.
    fn reserve_pages(&self, count: u32) -> Result<(u64, Vec<Extent>)>;

    /// Takes `page` of `reservation` into `txn`, locked exclusively and still free, for the
    /// caller to format. If `txn` aborts, the page stays in the reservation.
    fn take_reserved(&self, txn: TxnId, reservation: u64, page: PageId) -> Result<()>;

    /// Ends `reservation`: the pages no committed transaction took are free again.
    fn release_reservation(&self, reservation: u64) -> Result<()>;

    /// Frees pages at commit of `txn` (the caller holds exclusive locks on them).
    fn free_pages(&self, txn: TxnId, pages: &[PageId]) -> Result<()>;

    /// Ships a batch of log records `txn` generated for pages it holds exclusively, always
    /// before the pages they describe. The server logs them and applies them to its copy of
    /// each page. Page records: a record whose before bytes differ from the server's copy is
    /// refused. Object records, in order: the server finds each object on its copy of the
    /// page and takes the before bytes from there.
    fn ship_records(&self, txn: TxnId, records: ShippedRecords<'_>) -> Result<()>;

    /// Ships page records (see `ship_records`).
    fn ship_log_records(&self, txn: TxnId, records: &PageUpdates) -> Result<()> {
        self.ship_records(txn, ShippedRecords::Pages(records))
    }

    /// Ships object update records (see `ship_records`).
    fn ship_object_updates(&self, txn: TxnId, records: &ObjectUpdates) -> Result<()> {
        self.ship_records(txn, ShippedRecords::Objects(records))
    }

    /// Ships dirty pages of `txn` (on eviction from the client cache, and at commit). Returns
    /// the new LSN of each page, which the client stamps on its cached copy.
    fn ship_dirty_pages(&self, txn: TxnId, pages: &[ShippedPage<'_>]) -> Result<Vec<Lsn>>;

    /// Commits `txn`: returns once its commit record is durable, with the record's LSN.
    fn commit(&self, txn: TxnId) -> Result<Lsn>;

    /// Ships the last dirty pages of `txn` and commits it, in one request. Returns the pages'
    /// new LSNs and the commit LSN.
    fn ship_and_commit(&self, txn: TxnId, pages: &[ShippedPage<'_>]) -> Result<(Vec<Lsn>, Lsn)> {
        let lsns = self.ship_dirty_pages(txn, pages)?;
        Ok((lsns, self.commit(txn)?))
    }

    /// Ships the last dirty pages of `txn` and appends its commit record, but returns before
    /// the record is durable: the caller may go on (with other sessions, say) and calls
    /// `wait_durable` before it tells anyone the commit happened. `txn` keeps its locks until
    /// then, so nobody sees its changes before they are durable. A server that cannot defer
    /// commits makes this one durable at once.
    fn ship_and_commit_deferred(
        &self,
        txn: TxnId,
        pages: &[ShippedPage<'_>],
    ) -> Result<(Vec<Lsn>, AppendedCommit)> {
        let (lsns, lsn) = self.ship_and_commit(txn, pages)?;
        Ok((
            lsns,
            AppendedCommit {
                lsn,
                durable: true,
                stream: 0,
            },
        ))
    }

    /// Returns once the commit `ship_and_commit_deferred` appended for `txn` is durable, and
    /// releases the transaction's locks.
    fn wait_durable(&self, txn: TxnId, commit: AppendedCommit) -> Result<()> {
        let _ = txn;
        debug_assert!(
            commit.durable,
            "a server that defers commits must wait for them"
        );
        Ok(())
    }

    /// Aborts `txn`, discarding everything it shipped and releasing its locks. A level-1
    /// transaction whose completed subtransactions are not all compensated is refused (it
    /// stays active): compensations run first, each as a subtransaction noted
    /// `OperationNote::Compensates`.
    fn abort(&self, txn: TxnId) -> Result<()>;

    /// Releases the locks of subtransaction `sub`, whose commit `ship_and_commit_deferred`
    /// appended, without waiting for the commit to be durable: a later forced commit makes it
    /// durable with everything before it in the log (the persistence sphere of strategy S2/PS,
    /// Hasse & Weikum section 2). A server that cannot do that waits.
    fn release_after_append(&self, sub: TxnId, commit: AppendedCommit) -> Result<()> {
        self.wait_durable(sub, commit)
    }

    /// Ships the last dirty pages of subtransaction `sub`, appends its commit and releases its
    /// locks, without waiting for the commit to be durable: `ship_and_commit_deferred`
    /// followed by `release_after_append`, which a server across a network does in one
    /// request.
    fn ship_and_commit_unforced(
        &self,
        sub: TxnId,
        pages: &[ShippedPage<'_>],
    ) -> Result<(Vec<Lsn>, AppendedCommit)> {
        let (lsns, commit) = self.ship_and_commit_deferred(sub, pages)?;
        self.release_after_append(sub, commit)?;
        Ok((lsns, commit))
    }

    /// Notes what subtransaction `sub` logs at level 1 when it commits (see
    /// [`OperationNote`]). A server that runs flat transactions only refuses.
    fn note_operation(&self, sub: TxnId, note: OperationNote<'_>) -> Result<()> {
        let _ = (sub, note);
        Err(lodestore_core::Error::Unsupported(
            "multi-level transactions: this server runs flat transactions".into(),
        ))
    }

    /// Runs `fields`, commuting increments of small objects' `i64` fields, as one
    /// subtransaction of level-1 transaction `parent` at the server, with `undo` as its level-1
    /// note; its commit forced with `force` (strategy S2), else only appended and its locks
    /// released (S2/PS). See [`crate::increments`]; `NotHere` leaves the operation to the
    /// caller.
    fn run_increments(
        &self,
        parent: TxnId,
        fields: &[crate::FieldIncrement],
        undo: OperationNote<'_>,
        force: bool,
    ) -> Result<crate::IncrementsRan> {
        crate::increments::run_in_steps(self, parent, fields, undo, force)
    }

    /// The id of the snapshot a read "as of `time_us`" (microseconds since the Unix epoch)
    /// sees: the newest taken at or before it. An error says when there is none; a server
    /// that keeps no snapshots refuses.
    fn snapshot_at(&self, time_us: u64) -> Result<u64> {
        let _ = time_us;
        Err(lodestore_core::Error::Unsupported(
            "reading as of a time: this server keeps no snapshots".into(),
        ))
    }
}
