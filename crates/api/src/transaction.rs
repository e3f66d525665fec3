//! A transaction: typed and untyped object access, allocation, named roots, commit and abort.

use crate::object::{Oid, Persistent};
use lodestore_client::{ClientSession, ObjectInfo};
use lodestore_core::{Error, Lsn, Oid as RawOid, Result, TypeId};
use std::collections::BTreeMap;

/// The largest alignment objects guarantee (record payloads start 8-aligned).
const OBJECT_ALIGN_MAX: usize = 8;

/// A unit of work. Reads see the transaction's own writes; `abort` (or dropping it) discards
/// them. References returned by `get` and `get_mut` live until the next call on the
/// transaction.
pub struct Transaction<'s> {
    /// `None` only once `commit_deferred` has handed the session to its `PendingCommit`.
    client: Option<&'s mut ClientSession>,
    finished: bool,
    meta_cache: crate::collections::header::MetaCache,
    /// Changes to a collection lock its header exclusive first, so the transaction has the
    /// tree to itself and cannot deadlock in it: set for a rerun after a lock conflict.
    pub(crate) collections_exclusive: bool,
}

impl<'s> Transaction<'s> {
    pub(crate) fn client(&mut self) -> &mut ClientSession {
        self.client
            .as_deref_mut()
            .expect("a live transaction has its session")
    }

    pub(crate) fn new(client: &'s mut ClientSession) -> Transaction<'s> {
        Transaction {
            client: Some(client),
            finished: false,
            meta_cache: Default::default(),
            collections_exclusive: false,
        }
    }

    /// The header of the collection this transaction used last (see `MetaCache`).
    pub(crate) fn meta_cache(&mut self) -> &mut crate::collections::header::MetaCache {
        &mut self.meta_cache
    }

    /// Stores a copy of `value` as a new object.
    pub fn alloc<T: Persistent>(&mut self, value: &T) -> Result<Oid<T>> {
        let raw = self
            .client()
            .alloc_with(TypeId(T::TYPE_ID), bytemuck::bytes_of(value))?;
        Ok(Oid::from_raw(raw))
    }

    /// Writes `value` as the contents of `oid`: an object reserved by
    /// [`Session::reserve`](crate::Session::reserve) (the first fill of an object of a page
    /// brings every object of that page into being, zero-filled, in this transaction), or any
    /// existing object of type `T`.
    pub fn fill<T: Persistent>(&mut self, oid: Oid<T>, value: &T) -> Result<()> {
        self.client().prepare_reserved(oid.raw())?;
        *self.get_mut(oid)? = *value;
        Ok(())
    }

    /// [`Transaction::fill`] for untyped objects: `bytes` must be as long as the object.
    pub fn fill_bytes(&mut self, oid: RawOid, bytes: &[u8]) -> Result<()> {
        self.client().prepare_reserved(oid)?;
        let target = self.client().object_bytes_mut(oid, None)?;
        if target.len() != bytes.len() {
            return Err(Error::OutOfBounds {
                oid,
                offset: 0,
                end: bytes.len() as u64,
                len: target.len() as u64,
            });
        }
        target.copy_from_slice(bytes);
        Ok(())
    }

    /// Stores `bytes` as a new object of `type_id`; any length up to 1 GiB (objects larger
    /// than a page are stored as large objects).
    pub fn alloc_bytes(&mut self, type_id: u32, bytes: &[u8]) -> Result<RawOid> {
        self.client().alloc_with(TypeId(type_id), bytes)
    }

    /// A new zero-filled object of `len` bytes.
    pub fn alloc_zeroed(&mut self, type_id: u32, len: u64) -> Result<RawOid> {
        self.client().alloc(TypeId(type_id), len)
    }

    /// The object `oid`, read in place.
    pub fn get<T: Persistent>(&mut self, oid: Oid<T>) -> Result<&T> {
        check_alignment::<T>(oid.raw())?;
        let bytes = self
            .client()
            .object_bytes(oid.raw(), Some((TypeId(T::TYPE_ID), size_of::<T>())))?;
        bytemuck::try_from_bytes(bytes).map_err(|_| Error::Misaligned {
            oid: oid.raw(),
            align: align_of::<T>(),
        })
    }

    /// The object `oid`, updated in place.
    pub fn get_mut<T: Persistent>(&mut self, oid: Oid<T>) -> Result<&mut T> {
        check_alignment::<T>(oid.raw())?;
        let bytes = self
            .client()
            .object_bytes_mut(oid.raw(), Some((TypeId(T::TYPE_ID), size_of::<T>())))?;
        bytemuck::try_from_bytes_mut(bytes).map_err(|_| Error::Misaligned {
            oid: oid.raw(),
            align: align_of::<T>(),
        })
    }

    /// Several objects at once, read in place: every reference lives as long as the others,
    /// until the next call on the transaction. The objects must all fit the client cache at
    /// once (an error says when they do not).
    ///
    /// ```
    /// # use lodestore::{Oid, Options, Persistent, Store};
    /// # #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
    /// # #[repr(C)]
    /// # struct Account { balance: i64 }
    /// # impl Persistent for Account { const TYPE_ID: u32 = 1; }
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::create(dir.path().join("s"), Options::new())?;
    /// # let mut session = store.session()?;
    /// let mut txn = session.begin()?;
    /// let a = txn.alloc(&Account { balance: 10 })?;
    /// let b = txn.alloc(&Account { balance: 20 })?;
    /// let total = txn.alloc(&Account { balance: 0 })?;
    /// let ([a, b], sum) = txn.get_many_and_mut([a, b], total)?;
    /// sum.balance = a.balance + b.balance;
    /// # txn.commit()?;
    /// # Ok::<(), lodestore::Error>(())
    /// ```
    ///
    /// Rust's borrowing rules keep every reference from outliving the next call: this does not
    /// compile.
    ///
    /// ```compile_fail,E0499
    /// # use lodestore::{Oid, Options, Persistent, Store};
    /// # #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
    /// # #[repr(C)]
    /// # struct Account { balance: i64 }
    /// # impl Persistent for Account { const TYPE_ID: u32 = 1; }
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::create(dir.path().join("s"), Options::new())?;
    /// # let mut session = store.session()?;
    /// let mut txn = session.begin()?;
    /// let a = txn.alloc(&Account { balance: 10 })?;
    /// let b = txn.alloc(&Account { balance: 20 })?;
    /// let [first, second] = txn.get_many([a, b])?;
    /// txn.get_mut(a)?.balance = 0; // the transaction is still borrowed by `first`
    /// let stale = first.balance + second.balance;
    /// # Ok::<(), lodestore::Error>(())
    /// ```
    pub fn get_many<T: Persistent, const N: usize>(
        &mut self,
        oids: [Oid<T>; N],
    ) -> Result<[&T; N]> {
        check_alignment::<T>(oids.first().map_or(RawOid::NULL, |o| o.raw()))?;
        let raw = oids.map(|oid| oid.raw());
        let (bytes, _) =
            self.client()
                .objects_many(raw, Some((TypeId(T::TYPE_ID), size_of::<T>())), None)?;
        typed_many(raw, bytes)
    }

    /// Several objects to read and one more to write, at once, in place: the references live
    /// together until the next call on the transaction (see [`Transaction::get_many`]). The
    /// object written must be none of those read.
    #[allow(clippy::type_complexity)]
    pub fn get_many_and_mut<T: Persistent, U: Persistent, const N: usize>(
        &mut self,
        reads: [Oid<T>; N],
        write: Oid<U>,
    ) -> Result<([&T; N], &mut U)> {
        check_alignment::<T>(reads.first().map_or(RawOid::NULL, |o| o.raw()))?;
        check_alignment::<U>(write.raw())?;
        let raw = reads.map(|oid| oid.raw());
        let (bytes, written) = self.client().objects_many(
            raw,
            Some((TypeId(T::TYPE_ID), size_of::<T>())),
            Some((write.raw(), Some((TypeId(U::TYPE_ID), size_of::<U>())))),
        )?;
        let written = written.expect("a write was asked for");
        let written = bytemuck::try_from_bytes_mut(written).map_err(|_| Error::Misaligned {
            oid: write.raw(),
            align: align_of::<U>(),
        })?;
        Ok((typed_many(raw, bytes)?, written))
    }

    /// Every object of type `T`, in OID order, as an iterator of references to them (their
    /// OIDs). A scan: it reads every page of the store, locking each shared for the rest of
    /// the transaction, so it costs a read of the whole store and holds writers of any page
    /// off until the transaction ends. Collect the OIDs to read the objects in the same
    /// transaction:
    ///
    /// ```
    /// # use lodestore::{Oid, Options, Persistent, Store};
    /// # #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
    /// # #[repr(C)]
    /// # struct Part { weight: u64 }
    /// # impl Persistent for Part { const TYPE_ID: u32 = 3; }
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let store = Store::create(dir.path().join("s"), Options::new())?;
    /// # let mut session = store.session()?;
    /// let mut txn = session.begin()?;
    /// # for weight in 1..=3 { txn.alloc(&Part { weight })?; }
    /// let parts: Vec<Oid<Part>> = txn.objects_of::<Part>().collect::<Result<_, _>>()?;
    /// let mut total = 0;
    /// for part in parts {
    ///     total += txn.get(part)?.weight;
    /// }
    /// # assert_eq!(total, 6);
    /// # Ok::<(), lodestore::Error>(())
    /// ```
    pub fn objects_of<T: Persistent>(&mut self) -> ObjectsOf<'_, 's, T> {
        ObjectsOf {
            txn: self,
            next_page: lodestore_storage::directory::DIRECTORY_PAGE.0,
            found: Vec::new().into_iter(),
            done: false,
            kind: std::marker::PhantomData,
        }
    }

    /// A copy of the object `oid`.
    pub fn read<T: Persistent>(&mut self, oid: Oid<T>) -> Result<T> {
        self.get(oid).copied()
    }

    /// Replaces the object `oid` with `value`.
    pub fn write<T: Persistent>(&mut self, oid: Oid<T>, value: &T) -> Result<()> {
        *self.get_mut(oid)? = *value;
        Ok(())
    }

    /// Type, length and representation of any object.
    pub fn info(&mut self, oid: impl Into<RawOid>) -> Result<ObjectInfo> {
        self.client().object_info(oid.into())
    }

    /// The bytes of a small object, in place.
    pub fn bytes(&mut self, oid: impl Into<RawOid>) -> Result<&[u8]> {
        self.client().object_bytes(oid.into(), None)
    }

    /// The bytes of a small object, for updating in place.
    pub fn bytes_mut(&mut self, oid: impl Into<RawOid>) -> Result<&mut [u8]> {
        self.client().object_bytes_mut(oid.into(), None)
    }

    /// Copies bytes of any object, small or large, starting at `offset`.
    pub fn read_at(&mut self, oid: impl Into<RawOid>, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.client().read_at(oid.into(), offset, buf)
    }

    /// All bytes of any object.
    pub fn read_all(&mut self, oid: impl Into<RawOid>) -> Result<Vec<u8>> {
        let oid = oid.into();
        let len = self.client().object_info(oid)?.len;
        let mut buf = vec![0u8; len as usize];
        self.client().read_at(oid, 0, &mut buf)?;
        Ok(buf)
    }

    /// Overwrites bytes of any object starting at `offset`; the length does not change.
    pub fn write_at(&mut self, oid: impl Into<RawOid>, offset: u64, data: &[u8]) -> Result<()> {
        self.client().write_at(oid.into(), offset, data)
    }

    /// Changes the length of a small object; it must still fit on its page.
    pub fn resize(&mut self, oid: impl Into<RawOid>, len: u64) -> Result<()> {
        self.client().resize(oid.into(), len)
    }

    /// Deletes an object.
    pub fn free(&mut self, oid: impl Into<RawOid>) -> Result<()> {
        self.client().free(oid.into())
    }

    /// The object the root `name` names, if any.
    pub fn root(&mut self, name: &str) -> Result<Option<RawOid>> {
        Ok(self.client().roots()?.get(name).copied())
    }

    /// The root `name` as a typed reference; an error if it is missing.
    pub fn root_typed<T: Persistent>(&mut self, name: &str) -> Result<Oid<T>> {
        self.root(name)?
            .map(Oid::from_raw)
            .ok_or_else(|| Error::RootNotFound {
                name: name.to_string(),
            })
    }

    /// Names `oid` as root `name`, replacing an earlier root of that name.
    pub fn set_root(&mut self, name: &str, oid: impl Into<RawOid>) -> Result<()> {
        self.client().set_root(name, Some(oid.into()))
    }

    /// Removes the root `name`; false if there was none.
    pub fn remove_root(&mut self, name: &str) -> Result<bool> {
        let existed = self.client().roots()?.contains_key(name);
        if existed {
            self.client().set_root(name, None)?;
        }
        Ok(existed)
    }

    /// Every named root.
    pub fn roots(&mut self) -> Result<BTreeMap<String, RawOid>> {
        self.client().roots()
    }

    /// Makes the transaction's changes permanent.
    pub fn commit(mut self) -> Result<Lsn> {
        self.finished = true;
        self.client().commit()
    }

    /// Appends the commit but returns before it is durable, so that the caller can go on
    /// with other work (another session's transaction, computing the next batch) while the log
    /// is flushed. The transaction keeps its locks until [`PendingCommit::wait`], so nobody
    /// sees its changes before they are durable, and it is acknowledged only then: after a
    /// crash before `wait` returns, it is there whole or not at all.
    pub fn commit_deferred(mut self) -> Result<PendingCommit<'s>> {
        self.finished = true;
        let lsn = self.client().commit_deferred()?;
        Ok(PendingCommit {
            client: self
                .client
                .take()
                .expect("a live transaction has its session"),
            lsn,
            waited: false,
        })
    }

    /// Commits a subtransaction of a multi-level transaction and releases its locks before
    /// the commit is durable (strategy S2/PS).
    pub(crate) fn commit_sub_unforced(mut self) -> Result<Lsn> {
        self.finished = true;
        self.client().commit_sub_unforced()
    }

    /// Discards the transaction's changes.
    pub fn abort(mut self) -> Result<()> {
        self.finished = true;
        self.client().abort()
    }
}

impl Drop for Transaction<'_> {
    fn drop(&mut self) {
        if let (false, Some(client)) = (self.finished, self.client.as_deref_mut()) {
            if let Err(e) = client.abort() {
                tracing::warn!(error = %e, "abort of a dropped transaction failed");
            }
        }
    }
}

/// A commit appended by [`Transaction::commit_deferred`], not yet known durable. Dropping it
/// waits (and logs a failure, which `wait` would have returned).
#[must_use = "a deferred commit is acknowledged only by `wait`"]
pub struct PendingCommit<'s> {
    client: &'s mut ClientSession,
    lsn: Lsn,
    waited: bool,
}

impl PendingCommit<'_> {
    /// The commit record's LSN.
    pub fn lsn(&self) -> Lsn {
        self.lsn
    }

    /// Returns once the commit is durable, with its LSN. On an error the commit may or may
    /// not have happened.
    pub fn wait(mut self) -> Result<Lsn> {
        self.waited = true;
        self.client.wait_commit()?;
        Ok(self.lsn)
    }
}

impl Drop for PendingCommit<'_> {
    fn drop(&mut self) {
        if !self.waited {
            if let Err(e) = self.client.wait_commit() {
                tracing::warn!(error = %e, lsn = self.lsn.0, "a deferred commit failed");
            }
        }
    }
}

fn check_alignment<T>(oid: RawOid) -> Result<()> {
    if align_of::<T>() > OBJECT_ALIGN_MAX {
        return Err(Error::Misaligned {
            oid,
            align: align_of::<T>(),
        });
    }
    Ok(())
}

/// Typed views of objects' bytes.
fn typed_many<'a, T: Persistent, const N: usize>(
    oids: [RawOid; N],
    bytes: [&'a [u8]; N],
) -> Result<[&'a T; N]> {
    let mut typed: [Option<&'a T>; N] = [None; N];
    for ((slot, bytes), oid) in typed.iter_mut().zip(bytes).zip(oids) {
        *slot = Some(
            bytemuck::try_from_bytes(bytes).map_err(|_| Error::Misaligned {
                oid,
                align: align_of::<T>(),
            })?,
        );
    }
    Ok(typed.map(|t| t.expect("every one filled above")))
}

/// The objects of one type, page by page (see [`Transaction::objects_of`]).
pub struct ObjectsOf<'t, 's, T> {
    txn: &'t mut Transaction<'s>,
    next_page: u32,
    found: std::vec::IntoIter<RawOid>,
    done: bool,
    kind: std::marker::PhantomData<T>,
}

impl<T: Persistent> Iterator for ObjectsOf<'_, '_, T> {
    type Item = Result<Oid<T>>;

    fn next(&mut self) -> Option<Result<Oid<T>>> {
        loop {
            if let Some(oid) = self.found.next() {
                return Some(Ok(Oid::from_raw(oid)));
            }
            if self.done {
                return None;
            }
            let page = lodestore_core::PageId(self.next_page);
            self.next_page += 1;
            match self.txn.client().objects_on_page(page, TypeId(T::TYPE_ID)) {
                Ok(Some(found)) => self.found = found.into_iter(),
                Ok(None) => self.done = true,
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
    }
}
