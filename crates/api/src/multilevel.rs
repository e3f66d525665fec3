//! Multi-level transactions (Hasse & Weikum, VLDB 1991, section 2): a transaction of
//! high-level operations, each run as a subtransaction whose page locks end with it, while
//! the transaction holds semantic locks on the objects the operations name until it ends.
//! Operations whose locks are compatible (two increments of one counter) run at once in
//! different transactions; aborting one runs the inverses of its completed operations
//! (compensation), newest first, never a restore of pages that others may have changed
//! since.
//!
//! ```
//! use lodestore::multilevel::Add;
//! use lodestore::{Options, Persistent, Store};
//!
//! #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
//! #[repr(C)]
//! struct Account {
//!     balance: i64,
//! }
//! impl Persistent for Account {
//!     const TYPE_ID: u32 = 1;
//! }
//!
//! # let dir = tempfile::tempdir().unwrap();
//! let store = Store::create(dir.path().join("bank"), Options::new())?;
//! let mut session = store.session()?;
//! let (a, b) = session.transact(|txn| {
//!     Ok((txn.alloc(&Account { balance: 100 })?, txn.alloc(&Account { balance: 0 })?))
//! })?;
//! // A transfer: two increments, each its own subtransaction.
//! let mut txn = session.begin_multi_level()?;
//! txn.apply(&Add::field(a.raw(), 0, -30))?;
//! txn.apply(&Add::field(b.raw(), 0, 30))?;
//! txn.commit()?;
//! let mut check = session.begin()?;
//! assert_eq!((check.get(a)?.balance, check.get(b)?.balance), (70, 30));
//! # Ok::<(), lodestore::Error>(())
//! ```
//!
//! Compensations also run after a crash, with no application present (the warm start, when
//! the store opens): an operation whose inverse the store cannot find refuses to run, and an
//! application's own operations are registered with [`crate::Options::operation`] before the
//! store opens.

use crate::transaction::Transaction;
use lodestore_client::ClientSession;
use lodestore_core::{Error, Lsn, Oid as RawOid, Result, TxnId};
use lodestore_protocol::{IncrementsRan, LockMode, OperationNote, PageServer};
use lodestore_server::Server;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// Operation ids below this are Lodestore's own; an application's start here.
pub const APPLICATION_OPERATION_ID_MIN: u32 = 1000;

/// How often a compensation is tried again when it loses a lock conflict at the page level:
/// often, since a transaction whose compensation gives up keeps its semantic locks until the
/// next warm start (with the pauses below, about 2 s of trying).
const COMPENSATION_ATTEMPTS_MAX: u32 = 1000;
/// How often an operation's subtransaction is tried again when it loses a lock conflict at
/// the page level, before the error reaches the application.
const SUBTRANSACTION_ATTEMPTS_MAX: u32 = 8;

/// A pause before trying a subtransaction again, growing with the attempts and spread at
/// random so that the transactions a deadlock involved do not meet again at once.
fn retry_pause(attempt: u32) -> std::time::Duration {
    use std::hash::{BuildHasher, Hasher};
    let most = 200 * u64::from(attempt.min(10));
    // Each `RandomState` is seeded afresh: a random number without a generator to keep.
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    std::time::Duration::from_micros(most / 2 + random % (most / 2 + 1))
}

/// The semantic lock modes of an operation on an object (the level-1 compatibility matrix):
/// reads share, increments share with increments, anything else excludes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SemanticMode {
    Read,
    Write,
    Increment,
}

impl From<SemanticMode> for LockMode {
    fn from(mode: SemanticMode) -> LockMode {
        match mode {
            SemanticMode::Read => LockMode::Shared,
            SemanticMode::Write => LockMode::Exclusive,
            SemanticMode::Increment => LockMode::Increment,
        }
    }
}

/// A lock an operation takes at level 1, held to the end of its transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SemanticLock {
    pub object: RawOid,
    pub mode: SemanticMode,
}

/// What undoes an operation: another registered operation and its encoded arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inverse {
    pub id: u32,
    pub args: Vec<u8>,
}

impl Inverse {
    /// `op` as an inverse: its id and arguments.
    pub fn of<O: Operation>(op: &O) -> Result<Inverse> {
        let args = postcard::to_allocvec(op).map_err(|e| {
            Error::InvalidArgument(format!("encoding operation {} ({}): {e}", O::ID, O::NAME))
        })?;
        Ok(Inverse { id: O::ID, args })
    }
}

/// A high-level operation: the semantic locks it needs, and what it does inside its
/// subtransaction, returning its result and what undoes it (`None`: nothing to undo).
/// Arguments travel encoded (postcard), into the log for the warm start.
pub trait Operation: Serialize + DeserializeOwned {
    /// A number that never changes once a store has logged it (never 0; Lodestore's own are
    /// below [`APPLICATION_OPERATION_ID_MIN`]).
    const ID: u32;
    /// A short name for errors.
    const NAME: &'static str;
    type Output;

    fn locks(&self) -> Vec<SemanticLock>;

    fn run(&self, txn: &mut Transaction<'_>) -> Result<(Self::Output, Option<Inverse>)>;

    /// The operation as commuting increments that the page server runs by itself (strategies
    /// S2 and S2/PS), its subtransaction never entering the client cache, so a hot page's lock
    /// is held for less time; `None` (the default) runs it in the client with [`Self::run`].
    /// Both ways must do the same.
    fn increments(&self) -> Result<Option<Increments<Self::Output>>> {
        Ok(None)
    }
}

/// An operation as commuting increments (see [`Operation::increments`]): the fields, what
/// undoes them, and how the fields' new values make the operation's output.
pub struct Increments<T> {
    pub fields: Vec<FieldIncrement>,
    pub inverse: Inverse,
    pub output: fn(Vec<i64>) -> T,
}

type RunEncoded = fn(&[u8], &mut Transaction<'_>) -> Result<()>;
type LocksEncoded = fn(&[u8]) -> Result<Vec<SemanticLock>>;

#[derive(Clone, Copy)]
struct Registered {
    name: &'static str,
    run: RunEncoded,
    locks: LocksEncoded,
}

/// The operations a store can run from their encoded form: as compensations, at abort and in
/// the warm start. Lodestore's own ([`Add`], [`AddFields`], [`WriteBytes`], [`Change`]) are
/// always there.
#[derive(Clone)]
pub struct Operations {
    by_id: BTreeMap<u32, Registered>,
}

impl Default for Operations {
    fn default() -> Self {
        let mut ops = Operations {
            by_id: BTreeMap::new(),
        };
        ops.insert::<Add>();
        ops.insert::<WriteBytes>();
        ops.insert::<AddFields>();
        ops.insert::<Change>();
        ops
    }
}

impl std::fmt::Debug for Operations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(self.by_id.iter().map(|(id, r)| (id, r.name)))
            .finish()
    }
}

fn decode<O: Operation>(args: &[u8]) -> Result<O> {
    postcard::from_bytes(args).map_err(|e| {
        Error::InvalidArgument(format!(
            "arguments of operation {} ({}) do not decode: {e}",
            O::ID,
            O::NAME
        ))
    })
}

fn run_encoded<O: Operation>(args: &[u8], txn: &mut Transaction<'_>) -> Result<()> {
    decode::<O>(args)?.run(txn).map(|_| ())
}

fn locks_encoded<O: Operation>(args: &[u8]) -> Result<Vec<SemanticLock>> {
    Ok(decode::<O>(args)?.locks())
}

impl Operations {
    /// Registers `O`, an application's operation (id at least
    /// [`APPLICATION_OPERATION_ID_MIN`], not taken).
    pub fn register<O: Operation>(&mut self) -> Result<()> {
        if O::ID < APPLICATION_OPERATION_ID_MIN {
            return Err(Error::InvalidArgument(format!(
                "operation {} has id {}: ids below {APPLICATION_OPERATION_ID_MIN} are Lodestore's",
                O::NAME,
                O::ID
            )));
        }
        if let Some(taken) = self.by_id.get(&O::ID) {
            return Err(Error::InvalidArgument(format!(
                "operation {} has id {}, which {} has already",
                O::NAME,
                O::ID,
                taken.name
            )));
        }
        self.insert::<O>();
        Ok(())
    }

    fn insert<O: Operation>(&mut self) {
        assert!(O::ID != 0, "operation id 0 is never used");
        self.by_id.insert(
            O::ID,
            Registered {
                name: O::NAME,
                run: run_encoded::<O>,
                locks: locks_encoded::<O>,
            },
        );
    }

    pub fn contains(&self, id: u32) -> bool {
        self.by_id.contains_key(&id)
    }

    fn get(&self, id: u32) -> Result<Registered> {
        self.by_id.get(&id).copied().ok_or_else(|| {
            Error::InvalidArgument(format!("operation {id} is not registered with the store"))
        })
    }
}

/// Adds `delta` to the little-endian `i64` at byte `offset` of `object`. Increments commute,
/// so concurrent transactions may add to one object at once; the inverse adds `-delta`.
/// Returns the new value (which shows the other transactions' increments too).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Add {
    pub object: RawOid,
    pub offset: u32,
    pub delta: i64,
}

impl Add {
    /// Adds `delta` to the `i64` field at `offset` of `object`.
    pub fn field(object: RawOid, offset: u32, delta: i64) -> Add {
        Add {
            object,
            offset,
            delta,
        }
    }
}

impl Operation for Add {
    const ID: u32 = 1;
    const NAME: &'static str = "add";
    type Output = i64;

    fn locks(&self) -> Vec<SemanticLock> {
        vec![SemanticLock {
            object: self.object,
            mode: SemanticMode::Increment,
        }]
    }

    fn run(&self, txn: &mut Transaction<'_>) -> Result<(i64, Option<Inverse>)> {
        let undo = negated(self.delta)?;
        // The object is taken for writing at once: a read first would take the page shared,
        // and two increments of one page would then deadlock on their upgrades.
        let bytes = txn.bytes_mut(self.object)?;
        let at = self.offset as usize;
        let len = bytes.len();
        let field = bytes.get_mut(at..at + 8).ok_or(Error::OutOfBounds {
            oid: self.object,
            offset: u64::from(self.offset),
            end: u64::from(self.offset) + 8,
            len: len as u64,
        })?;
        let now = i64::from_le_bytes(field[..].try_into().expect("8 bytes"))
            .checked_add(self.delta)
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "adding {} to the field at byte {} of object {} overflows",
                    self.delta, self.offset, self.object
                ))
            })?;
        field.copy_from_slice(&now.to_le_bytes());
        let inverse = Inverse::of(&Add {
            delta: undo,
            ..*self
        })?;
        Ok((now, Some(inverse)))
    }

    fn increments(&self) -> Result<Option<Increments<i64>>> {
        Ok(Some(Increments {
            fields: vec![FieldIncrement {
                object: self.object,
                offset: self.offset,
                delta: self.delta,
            }],
            inverse: Inverse::of(&Add {
                delta: negated(self.delta)?,
                ..*self
            })?,
            output: |values| values[0],
        }))
    }
}

/// `-delta`, or an error saying the addition cannot be undone.
fn negated(delta: i64) -> Result<i64> {
    delta
        .checked_neg()
        .ok_or_else(|| Error::InvalidArgument(format!("adding {delta} cannot be undone")))
}

/// Adds to several little-endian `i64` fields, of one object or several, in one
/// subtransaction: `(object, offset, delta)` triples. Commutes like [`Add`], under an
/// increment lock on each object; returns the new values in order. A transfer between two
/// accounts is one of these.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddFields {
    pub fields: Vec<(RawOid, u32, i64)>,
}

impl Operation for AddFields {
    const ID: u32 = 3;
    const NAME: &'static str = "add fields";
    type Output = Vec<i64>;

    fn locks(&self) -> Vec<SemanticLock> {
        let mut objects: Vec<RawOid> = self.fields.iter().map(|f| f.0).collect();
        objects.sort_unstable();
        objects.dedup();
        objects
            .into_iter()
            .map(|object| SemanticLock {
                object,
                mode: SemanticMode::Increment,
            })
            .collect()
    }

    fn run(&self, txn: &mut Transaction<'_>) -> Result<(Vec<i64>, Option<Inverse>)> {
        let mut now = Vec::with_capacity(self.fields.len());
        let mut undo = Vec::with_capacity(self.fields.len());
        for &(object, offset, delta) in &self.fields {
            let (value, _) = Add::field(object, offset, delta).run(txn)?;
            now.push(value);
            undo.push((object, offset, -delta));
        }
        let inverse = Inverse::of(&AddFields { fields: undo })?;
        Ok((now, Some(inverse)))
    }

    fn increments(&self) -> Result<Option<Increments<Vec<i64>>>> {
        let mut fields = Vec::with_capacity(self.fields.len());
        let mut undo = Vec::with_capacity(self.fields.len());
        for &(object, offset, delta) in &self.fields {
            fields.push(FieldIncrement {
                object,
                offset,
                delta,
            });
            undo.push((object, offset, negated(delta)?));
        }
        Ok(Some(Increments {
            fields,
            inverse: Inverse::of(&AddFields { fields: undo })?,
            output: |values| values,
        }))
    }
}

/// Writes `bytes` at byte `offset` of `object` (exclusive lock on it); the inverse writes
/// back what was there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteBytes {
    pub object: RawOid,
    pub offset: u32,
    pub bytes: Vec<u8>,
}

impl Operation for WriteBytes {
    const ID: u32 = 2;
    const NAME: &'static str = "write bytes";
    type Output = ();

    fn locks(&self) -> Vec<SemanticLock> {
        vec![SemanticLock {
            object: self.object,
            mode: SemanticMode::Write,
        }]
    }

    fn run(&self, txn: &mut Transaction<'_>) -> Result<((), Option<Inverse>)> {
        let old = overwrite(txn, self.object, self.offset, &self.bytes)?;
        let inverse = Inverse::of(&WriteBytes {
            object: self.object,
            offset: self.offset,
            bytes: old,
        })?;
        Ok(((), Some(inverse)))
    }
}

/// Writes `bytes` at byte `offset` of `object`; what was there.
fn overwrite(
    txn: &mut Transaction<'_>,
    object: RawOid,
    offset: u32,
    bytes: &[u8],
) -> Result<Vec<u8>> {
    let at = offset as usize;
    match txn.bytes_mut(object) {
        // A small object: its page taken exclusive at once (see `Add`).
        Ok(now) => {
            let len = now.len();
            let range = now
                .get_mut(at..at + bytes.len())
                .ok_or(Error::OutOfBounds {
                    oid: object,
                    offset: at as u64,
                    end: (at + bytes.len()) as u64,
                    len: len as u64,
                })?;
            let old = range.to_vec();
            range.copy_from_slice(bytes);
            Ok(old)
        }
        Err(Error::LargeObject { .. }) => {
            let mut old = vec![0u8; bytes.len()];
            txn.read_at(object, at as u64, &mut old)?;
            txn.write_at(object, at as u64, bytes)?;
            Ok(old)
        }
        Err(e) => Err(e),
    }
}

/// One step of a [`Change`]: read a subobject, or overwrite bytes of one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChangeStep {
    Read(RawOid),
    Write {
        object: RawOid,
        offset: u32,
        bytes: Vec<u8>,
    },
}

/// Hasse & Weikum's operation on a complex object (section 3.1): visits subobjects in order,
/// reading some and overwriting bytes of others, under a shared lock on each subobject read
/// and an exclusive one on each written. Returns a checksum (FNV-1a) of the bytes read; the
/// inverse writes back what the writes replaced, newest first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub steps: Vec<ChangeStep>,
}

impl Operation for Change {
    const ID: u32 = 4;
    const NAME: &'static str = "change";
    type Output = u64;

    fn locks(&self) -> Vec<SemanticLock> {
        let mut modes: BTreeMap<RawOid, SemanticMode> = BTreeMap::new();
        for step in &self.steps {
            match step {
                ChangeStep::Read(object) => {
                    modes.entry(*object).or_insert(SemanticMode::Read);
                }
                ChangeStep::Write { object, .. } => {
                    modes.insert(*object, SemanticMode::Write);
                }
            }
        }
        modes
            .into_iter()
            .map(|(object, mode)| SemanticLock { object, mode })
            .collect()
    }

    fn run(&self, txn: &mut Transaction<'_>) -> Result<(u64, Option<Inverse>)> {
        const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
        const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;
        let mut sum = FNV_OFFSET;
        let mut undo = Vec::new();
        for step in &self.steps {
            match step {
                ChangeStep::Read(object) => {
                    for &b in txn.bytes(*object)? {
                        sum = (sum ^ u64::from(b)).wrapping_mul(FNV_PRIME);
                    }
                }
                ChangeStep::Write {
                    object,
                    offset,
                    bytes,
                } => {
                    let old = overwrite(txn, *object, *offset, bytes)?;
                    undo.push(ChangeStep::Write {
                        object: *object,
                        offset: *offset,
                        bytes: old,
                    });
                }
            }
        }
        if undo.is_empty() {
            return Ok((sum, None));
        }
        undo.reverse();
        Ok((sum, Some(Inverse::of(&Change { steps: undo })?)))
    }
}

pub use lodestore_multilevel::strategy::Strategy;
pub use lodestore_protocol::FieldIncrement;

/// A transaction of high-level operations (see the module's comment). Dropping it without
/// `commit` aborts it, compensating what it did.
pub struct MultiLevelTransaction<'s> {
    inner: Inner<'s>,
    operations: Arc<Operations>,
    finished: bool,
}

enum Inner<'s> {
    /// Strategy S1: one flat transaction (`None` once it ended).
    Flat(Option<Transaction<'s>>),
    Levels {
        client: &'s mut ClientSession,
        parent: TxnId,
        /// Completed subtransactions and their inverses, oldest first.
        done: Vec<(TxnId, Inverse)>,
        force_at_eos: bool,
    },
}

impl<'s> MultiLevelTransaction<'s> {
    pub(crate) fn begin(
        client: &'s mut ClientSession,
        operations: Arc<Operations>,
        strategy: Strategy,
    ) -> Result<MultiLevelTransaction<'s>> {
        if client.is_active() {
            return Err(Error::InvalidArgument(
                "a transaction is already active in this session".into(),
            ));
        }
        client.wait_commit()?;
        let inner = match strategy {
            Strategy::S1 => {
                client.begin()?;
                Inner::Flat(Some(Transaction::new(client)))
            }
            Strategy::S2 | Strategy::S2Ps => {
                let parent = client.server().begin()?;
                Inner::Levels {
                    client,
                    parent,
                    done: Vec::new(),
                    force_at_eos: strategy == Strategy::S2,
                }
            }
        };
        Ok(MultiLevelTransaction {
            inner,
            operations,
            finished: false,
        })
    }

    /// Runs `op`. With two levels: takes its semantic locks, then runs it as a subtransaction,
    /// which commits before this returns (its page locks end there); an error leaves nothing
    /// of `op` behind and the transaction usable (a retryable one usually wants an abort and
    /// a rerun). With S1: runs it in the transaction; an error aborts the transaction.
    pub fn apply<O: Operation>(&mut self, op: &O) -> Result<O::Output> {
        if self.finished {
            return Err(Error::TransactionInactive {
                reason: "the multi-level transaction has ended".into(),
            });
        }
        let (client, parent, done, force_at_eos) = match &mut self.inner {
            Inner::Flat(txn) => {
                let live = txn.as_mut().ok_or_else(|| Error::TransactionInactive {
                    reason: "an operation failed and aborted the transaction".into(),
                })?;
                return match op.run(live) {
                    Ok((output, _)) => Ok(output),
                    Err(e) => {
                        if let Some(txn) = txn.take() {
                            let _ = txn.abort();
                        }
                        Err(e)
                    }
                };
            }
            Inner::Levels {
                client,
                parent,
                done,
                force_at_eos,
            } => (client, *parent, done, *force_at_eos),
        };
        let server = client.server();
        lock_all(server.as_ref(), parent, &op.locks())?;
        if let Some(increments) = op.increments()? {
            if let Some(output) = run_at_server(
                server.as_ref(),
                &self.operations,
                parent,
                increments,
                force_at_eos,
                done,
            )? {
                return Ok(output);
            }
        }
        // A deadlock or lock timeout among subtransactions' page locks costs only the
        // subtransaction: it left nothing behind, and the semantic locks stay held.
        let mut attempt = 0;
        let (sub, txn, output, inverse) = loop {
            attempt += 1;
            let sub = client.begin_sub(parent)?;
            let mut txn = Transaction::new(client);
            match op.run(&mut txn) {
                Ok((output, inverse)) => break (sub, txn, output, inverse),
                Err(e) => {
                    let _ = txn.abort();
                    if !e.is_retryable() || attempt >= SUBTRANSACTION_ATTEMPTS_MAX {
                        return Err(e);
                    }
                    tracing::debug!(attempt, error = %e, "subtransaction retried");
                    std::thread::sleep(retry_pause(attempt));
                }
            }
        };
        if let Some(inverse) = &inverse {
            let noted = if self.operations.contains(inverse.id) {
                server.note_operation(
                    sub,
                    OperationNote::Undo {
                        inverse: inverse.id,
                        args: &inverse.args,
                    },
                )
            } else {
                Err(Error::InvalidArgument(format!(
                    "operation {} ({}) is undone by operation {}, which is not registered \
                     with the store (Options::operation)",
                    O::ID,
                    O::NAME,
                    inverse.id
                )))
            };
            if let Err(e) = noted {
                let _ = txn.abort();
                return Err(e);
            }
        }
        if force_at_eos {
            txn.commit()?;
        } else {
            txn.commit_sub_unforced()?;
        }
        if let Some(inverse) = inverse {
            done.push((sub, inverse));
        }
        Ok(output)
    }

    /// Commits: the transaction's end is durable when this returns, and its locks are
    /// released.
    pub fn commit(mut self) -> Result<Lsn> {
        self.finished = true;
        match &mut self.inner {
            Inner::Flat(txn) => match txn.take() {
                Some(txn) => txn.commit(),
                None => Err(Error::TransactionInactive {
                    reason: "an operation failed and aborted the transaction".into(),
                }),
            },
            Inner::Levels { client, parent, .. } => client.server().commit(*parent),
        }
    }

    /// Aborts: with two levels, runs the inverse of every completed operation, newest first,
    /// each as a compensating subtransaction, then ends the transaction; with S1, discards
    /// its changes.
    pub fn abort(mut self) -> Result<()> {
        self.finished = true;
        self.end_by_abort()
    }

    fn end_by_abort(&mut self) -> Result<()> {
        match &mut self.inner {
            Inner::Flat(txn) => txn.take().map_or(Ok(()), Transaction::abort),
            Inner::Levels {
                client,
                parent,
                done,
                force_at_eos,
            } => {
                let server = client.server();
                while let Some((undone, inverse)) = done.pop() {
                    let force = *force_at_eos;
                    compensate(client, &self.operations, *parent, undone, &inverse, force)
                        .inspect_err(|_| done.push((undone, inverse.clone())))?;
                }
                server.abort(*parent)
            }
        }
    }
}

impl Drop for MultiLevelTransaction<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.finished = true;
            if let Err(e) = self.end_by_abort() {
                tracing::warn!(
                    error = %e,
                    "a dropped multi-level transaction could not be compensated; the next warm start will"
                );
            }
        }
    }
}

/// Runs `increments` as a subtransaction of `parent` at the server (see
/// [`Operation::increments`]), trying again after a lost page-lock conflict; records it in
/// `done` once committed. `None`: the server left it to the client.
fn run_at_server<T>(
    server: &dyn PageServer,
    operations: &Operations,
    parent: TxnId,
    increments: Increments<T>,
    force: bool,
    done: &mut Vec<(TxnId, Inverse)>,
) -> Result<Option<T>> {
    let Increments {
        fields,
        inverse,
        output,
    } = increments;
    if !operations.contains(inverse.id) {
        return Err(Error::InvalidArgument(format!(
            "increments are undone by operation {}, which is not registered with the store \
             (Options::operation)",
            inverse.id
        )));
    }
    let note = OperationNote::Undo {
        inverse: inverse.id,
        args: &inverse.args,
    };
    let mut attempt = 0;
    loop {
        attempt += 1;
        match server.run_increments(parent, &fields, note, force) {
            Ok(IncrementsRan::Committed { sub, values }) => {
                done.push((sub, inverse));
                // The output is made of one value per field: a server answering otherwise
                // is refused, after the fact, rather than trusted.
                if values.len() != fields.len() {
                    return Err(Error::InvalidArgument(format!(
                        "the server answered {} values for {} increments",
                        values.len(),
                        fields.len()
                    )));
                }
                return Ok(Some(output(values)));
            }
            Ok(IncrementsRan::NotHere) => return Ok(None),
            Err(e) if e.is_retryable() && attempt < SUBTRANSACTION_ATTEMPTS_MAX => {
                tracing::debug!(attempt, error = %e, "subtransaction at the server retried");
                std::thread::sleep(retry_pause(attempt));
            }
            Err(e) => return Err(e),
        }
    }
}

fn lock_all(server: &dyn PageServer, txn: TxnId, locks: &[SemanticLock]) -> Result<()> {
    let objects: Vec<(RawOid, LockMode)> =
        locks.iter().map(|l| (l.object, l.mode.into())).collect();
    server.lock_objects(txn, &objects)
}

/// Runs `inverse` as a subtransaction of `parent` that compensates `undone`; a lost page-lock
/// conflict is tried again (a compensation must not fail for good while its locks are held).
/// Its commit is forced with `force`, else only appended (S2/PS): a compensation a crash
/// loses leaves its undo record uncompensated, and the warm start runs it again.
pub(crate) fn compensate(
    client: &mut ClientSession,
    operations: &Operations,
    parent: TxnId,
    undone: TxnId,
    inverse: &Inverse,
    force: bool,
) -> Result<()> {
    let registered = operations.get(inverse.id)?;
    let server = client.server();
    lock_all(server.as_ref(), parent, &(registered.locks)(&inverse.args)?)?;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let outcome = (|| {
            let sub = client.begin_sub(parent)?;
            let mut txn = Transaction::new(&mut *client);
            let ran = (registered.run)(&inverse.args, &mut txn)
                .and_then(|()| server.note_operation(sub, OperationNote::Compensates { undone }));
            match ran {
                Ok(()) if force => txn.commit().map(|_| ()),
                Ok(()) => txn.commit_sub_unforced().map(|_| ()),
                Err(e) => {
                    let _ = txn.abort();
                    Err(e)
                }
            }
        })();
        match outcome {
            Err(e) if e.is_retryable() && attempt < COMPENSATION_ATTEMPTS_MAX => {
                tracing::debug!(attempt, error = %e, "compensation retried");
                std::thread::sleep(retry_pause(attempt));
            }
            other => return other,
        }
    }
}

/// Compensates level-1 transaction `txn`, whose network client left (`pending`: its
/// compensations, newest first), and aborts it.
pub(crate) fn compensate_abandoned(
    server: &Server,
    operations: &Operations,
    client: &mut ClientSession,
    txn: TxnId,
    pending: &[lodestore_server::Compensation],
) -> Result<()> {
    if let Some(c) = pending.iter().find(|c| !operations.contains(c.inverse.0)) {
        return Err(Error::UnknownOperation {
            log: server.log_dir(),
            lsn: c.undo_lsn.0,
            txn: txn.0,
            id: c.inverse.0,
        });
    }
    for c in pending {
        let inverse = Inverse {
            id: c.inverse.0,
            args: c.args.clone(),
        };
        compensate(client, operations, txn, c.sub, &inverse, true)?;
    }
    server.abort(txn)?;
    tracing::info!(
        txn = txn.0,
        compensations = pending.len(),
        "compensated the transaction of a client that left"
    );
    Ok(())
}

/// Runs the compensations the store's restart left (an embedded store, as it opens): every
/// inverse must be registered before any runs, so an unknown one leaves the log as it was.
pub(crate) fn warm_start(
    server: &Server,
    operations: &Operations,
    client: &mut ClientSession,
) -> Result<()> {
    let losers = server.warm_start();
    for loser in &losers {
        if let Some(c) = loser
            .compensations
            .iter()
            .find(|c| !operations.contains(c.inverse.0))
        {
            return Err(Error::UnknownOperation {
                log: server.log_dir(),
                lsn: c.undo_lsn.0,
                txn: loser.txn.0,
                id: c.inverse.0,
            });
        }
    }
    for loser in losers {
        for c in &loser.compensations {
            let inverse = Inverse {
                id: c.inverse.0,
                args: c.args.clone(),
            };
            compensate(client, operations, loser.txn, c.sub, &inverse, true)?;
        }
        server.abort(loser.txn)?;
        tracing::info!(
            txn = loser.txn.0,
            compensations = loser.compensations.len(),
            "warm start compensated a transaction"
        );
    }
    Ok(())
}
