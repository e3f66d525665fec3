//! Locks for strict two-phase locking, with waiting and deadlock detection, on any resource
//! (a page, an object, and room for more), in modes that are data: a [`ModeTable`] gives which
//! modes are compatible and which mode covers which, so further modes (the semantic locks of
//! multi-level transactions, intention modes) are rows and columns, not code. A lock's owner is
//! a transaction at a level (0: the transaction itself; above: its nested subtransactions), so
//! that a subtransaction's locks can be released at its end or passed to its parent.
//!
//! Locks of one transaction never conflict with each other, whatever their levels; a lock
//! covers a request of its own level and of the levels nested below it, not of its parent
//! (a subtransaction's locks may be released at its end). A request that
//! conflicts waits. Waiters are served in order of arrival: a new request on a resource waits
//! behind an earlier waiter whose mode conflicts with its own, even where the holders alone
//! would let it in, so that a stream of shared requests cannot starve an exclusive one (a
//! conversion, by a transaction that holds the resource already, waits for holders only: it
//! goes ahead of the queue). Before each wait the waits-for graph (holders and earlier
//! waiters) is searched from the requester; if the requester would close a cycle it is chosen
//! as the victim and gets `Error::Deadlock` at once. A wait longer than the timeout ends with
//! `Error::LockTimeout`. Both are retryable: the caller aborts and runs the transaction again.

use crate::interface::LockMode;
use lodestore_core::{Error, Oid, PageId, Result, TxnId};
use lodestore_protocol::KeptLocks;
// Fx hashing: every lock request does several lookups; keys are transaction ids the server
// assigns and pages checked to exist, so a client cannot pick keys without bound.
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use smallvec::SmallVec;
use std::collections::hash_map::Entry;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// What a lock is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Resource {
    Page(PageId),
    Object(Oid),
}

impl Resource {
    /// The page errors name: the page itself, or the one holding the object.
    fn page(self) -> PageId {
        match self {
            Resource::Page(page) => page,
            Resource::Object(oid) => oid.page(),
        }
    }
}

/// Who holds a lock: a transaction at a level of nesting (0: the transaction).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner {
    pub txn: TxnId,
    pub level: u8,
}

impl Owner {
    pub fn top(txn: TxnId) -> Owner {
        Owner { txn, level: 0 }
    }

    /// The owner of the shared page locks a session keeps between its transactions.
    pub fn keeper(keeper: TxnId) -> Owner {
        Owner {
            txn: keeper,
            level: KEPT_LEVEL,
        }
    }

    fn is_keeper(self) -> bool {
        self.level == KEPT_LEVEL
    }
}

/// The level of a kept lock's owner: no transaction nests this deep.
const KEPT_LEVEL: u8 = u8::MAX;

/// A lock mode: an index into a [`ModeTable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ModeId(pub u8);

/// The lock modes of a lock manager, as data. `compatible[held][requested]`: may `requested`
/// be granted to one transaction while another holds `held`? `covers[held][requested]`: does
/// holding `held` already grant `requested`? A transaction that holds one mode and asks for
/// another it does not cover gets the least mode covering both.
#[derive(Clone, Debug)]
pub struct ModeTable {
    pub names: Vec<&'static str>,
    pub compatible: Vec<Vec<bool>>,
    pub covers: Vec<Vec<bool>>,
}

impl ModeTable {
    /// Shared and exclusive: the page modes.
    pub fn shared_exclusive() -> ModeTable {
        ModeTable {
            names: vec!["shared", "exclusive"],
            // requested:   S      X
            compatible: vec![
                vec![true, false],  // held S
                vec![false, false], // held X
            ],
            covers: vec![
                vec![true, false], // S covers S
                vec![true, true],  // X covers S and X
            ],
        }
    }

    /// Shared, exclusive and increment (the semantic mode of commuting counter updates):
    /// the server's table, pages taking the first two only.
    pub fn semantic() -> ModeTable {
        ModeTable {
            names: vec!["shared", "exclusive", "increment"],
            // requested:     S      X      I
            compatible: vec![
                vec![true, false, false],  // held S
                vec![false, false, false], // held X
                vec![false, false, true],  // held I
            ],
            covers: vec![
                vec![true, false, false], // S
                vec![true, true, true],   // X covers everything
                vec![false, false, true], // I
            ],
        }
    }

    /// Checks the table is square, every mode covers itself, covering is transitive, and a
    /// stronger mode conflicts with whatever the weaker one does; and that any two modes have
    /// a least mode covering both.
    pub fn validate(&self) -> std::result::Result<(), String> {
        let n = self.names.len();
        if n == 0 || n > u8::MAX as usize {
            return Err(format!("{n} lock modes: from 1 to 255"));
        }
        let square = |m: &Vec<Vec<bool>>| m.len() == n && m.iter().all(|row| row.len() == n);
        if !square(&self.compatible) || !square(&self.covers) {
            return Err(format!("the mode tables must be {n} by {n}"));
        }
        for a in 0..n {
            if !self.covers[a][a] {
                return Err(format!("{} does not cover itself", self.names[a]));
            }
            for b in 0..n {
                if self.compatible[a][b] != self.compatible[b][a] {
                    return Err(format!(
                        "compatibility of {} and {} is not symmetric",
                        self.names[a], self.names[b]
                    ));
                }
                for c in 0..n {
                    if self.covers[a][b] && self.covers[b][c] && !self.covers[a][c] {
                        return Err(format!(
                            "{} covers {} which covers {}, but not {}",
                            self.names[a], self.names[b], self.names[c], self.names[c]
                        ));
                    }
                    // Holding more may not let in what holding less keeps out.
                    if self.covers[a][b] && self.compatible[a][c] && !self.compatible[b][c] {
                        return Err(format!(
                            "{} covers {} but admits {}, which {} keeps out",
                            self.names[a], self.names[b], self.names[c], self.names[b]
                        ));
                    }
                }
                self.try_join(ModeId(a as u8), ModeId(b as u8))
                    .ok_or_else(|| {
                        format!(
                            "no mode covers both {} and {}",
                            self.names[a], self.names[b]
                        )
                    })?;
            }
        }
        Ok(())
    }

    fn len(&self) -> usize {
        self.names.len()
    }

    pub fn compatible(&self, held: ModeId, requested: ModeId) -> bool {
        self.compatible[held.0 as usize][requested.0 as usize]
    }

    pub fn covers(&self, held: ModeId, requested: ModeId) -> bool {
        self.covers[held.0 as usize][requested.0 as usize]
    }

    /// The least mode covering `a` and `b` (covered by every other mode that covers both).
    fn try_join(&self, a: ModeId, b: ModeId) -> Option<ModeId> {
        let upper: Vec<ModeId> = (0..self.len() as u8)
            .map(ModeId)
            .filter(|&m| self.covers(m, a) && self.covers(m, b))
            .collect();
        upper
            .iter()
            .copied()
            .find(|&m| upper.iter().all(|&other| self.covers(other, m)))
    }

    fn join(&self, a: ModeId, b: ModeId) -> ModeId {
        self.try_join(a, b)
            .expect("validated tables have a least upper mode for any two")
    }

    pub fn name(&self, mode: ModeId) -> &'static str {
        self.names[mode.0 as usize]
    }
}

/// The page lock modes as modes of [`ModeTable::shared_exclusive`].
/// The mode id of `mode` in [`ModeTable::semantic`] (and, for shared and exclusive, in
/// [`ModeTable::shared_exclusive`]).
pub fn mode_id(mode: LockMode) -> ModeId {
    match mode {
        LockMode::Shared => ModeId(0),
        LockMode::Exclusive => ModeId(1),
        LockMode::Increment => ModeId(2),
    }
}

fn page_mode(mode: LockMode) -> ModeId {
    debug_assert!(
        mode != LockMode::Increment,
        "pages are locked shared or exclusive"
    );
    mode_id(mode)
}

/// Who holds one resource, in which mode. Most resources have one or two holders: kept
/// inline, so granting a lock on a resource nobody holds allocates nothing.
type Holders = SmallVec<[(Owner, ModeId); 2]>;

type Keepers = HashMap<TxnId, Arc<KeptLocks>>;

struct Table {
    holders: HashMap<Resource, Holders>,
    held: HashMap<TxnId, Vec<Resource>>,
    waiting: HashMap<TxnId, Waiter>,
    /// Sessions that keep their shared page locks between transactions, by owner id.
    keepers: Keepers,
    /// Transactions whose shared page locks pass to a keeper at their end.
    keeper_of: HashMap<TxnId, TxnId>,
    /// Transactions attached to a keeper whose commit was appended, with the pages the server
    /// itself changed at the commit (pages it freed; none noted when there are none): should
    /// the commit become durable, their
    /// session's copies of the other pages they wrote are the committed ones, and those pages'
    /// locks are kept too ([`LockManager::release_committed`]).
    committing: HashMap<TxnId, HashSet<PageId>>,
    /// Arrival order of waiters: the next waiter's ticket.
    next_ticket: u64,
    /// Transactions whose locks last only a subtransaction (released at its end, not held to
    /// a durable commit): a request blocked only by them spins before it sleeps.
    brief: HashSet<TxnId>,
    /// Times a request went to sleep (after spinning, if it spun).
    sleeps: u64,
    stats: LockStats,
}

/// A transaction waiting for a lock, and when it first waited for it.
#[derive(Clone, Debug)]
struct Waiter {
    resource: Resource,
    mode: ModeId,
    ticket: u64,
    /// Signalled when the request may be granted now: each waiter has its own, so that a
    /// release wakes only the waiters it lets in, not every thread that waits for any lock.
    wake: Arc<WaitSignal>,
}

/// How a release tells one waiter that its request may be granted now.
#[derive(Debug, Default)]
struct WaitSignal {
    /// Set (under the table's lock) when a change lets the request in; read without the lock
    /// by a waiter still spinning.
    ready: AtomicBool,
    /// For a waiter asleep.
    woken: Condvar,
    /// Set and cleared under the table's lock around the waiter's sleep: a release wakes
    /// only a waiter asleep, as a notification costs a system call even when nobody sleeps
    /// (a spinning waiter sees `ready`; one about to sleep checks its request first, under
    /// the same lock).
    asleep: AtomicBool,
}

/// How long a request blocked only by subtransactions spins (yielding its CPU) before it
/// sleeps, over all its waits. A subtransaction holds its page locks for the microseconds of
/// one operation; a waiter put to sleep costs the releaser a wake-up, and on a virtual machine
/// an idle CPU takes tens of microseconds to come back, which turns a hot page into a convoy
/// (measured in docs/BENCHMARKS.md, "Spinning before sleeping").
const LOCK_SPIN: Duration = Duration::from_micros(200);

/// The ticket of a request that has not waited yet: behind every waiter.
const NOT_WAITING: u64 = u64::MAX;

pub struct LockManager {
    modes: ModeTable,
    table: Mutex<Table>,
    timeout: Duration,
    /// [`LOCK_SPIN`], but for tests.
    spin: Duration,
}

/// Counters of the lock manager.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LockStats {
    /// Times a request waited, spinning or asleep (one request may wait more than once).
    pub waits: u64,
    pub deadlocks: u64,
    pub timeouts: u64,
    /// Requests made, and those of them that had to wait at all (their ratio is the conflict
    /// rate Hasse & Weikum report).
    #[serde(default)]
    pub requests: u64,
    #[serde(default)]
    pub requests_blocked: u64,
    /// Time requests spent waiting, granted or not, in microseconds.
    #[serde(default)]
    pub wait_micros: u64,
    /// Kept shared locks called back for a writer.
    #[serde(default)]
    pub callbacks: u64,
}

impl LockStats {
    /// A request that waited since `started` has stopped waiting.
    fn note_wait(&mut self, started: Instant) {
        self.wait_micros += started.elapsed().as_micros() as u64;
    }
}

/// Who `txn` must wait for to get `mode` on `resource`, whose holders are `holders`, having
/// first waited with `ticket`: other transactions holding a conflicting mode and, unless `txn`
/// converts a lock it holds, earlier waiters for a conflicting mode.
#[inline]
/// Kept locks are looked at through `keepers`: one in conflict is called back when the
/// request is granted, unless the keeper's running transaction relies on it (then that
/// transaction is the one to wait for, or `txn` itself, which then holds the resource already).
/// Without `keepers` the caller has settled the kept locks itself, and says in `holds_already`
/// whether `txn` relies on one.
#[allow(clippy::too_many_arguments)]
fn blockers(
    modes: &ModeTable,
    holders: &[(Owner, ModeId)],
    waiting: &HashMap<TxnId, Waiter>,
    keepers: Option<&Keepers>,
    holds_already: bool,
    txn: TxnId,
    resource: Resource,
    mode: ModeId,
    ticket: u64,
) -> Vec<TxnId> {
    let mut blockers = Vec::new();
    let mut converts = holds_already;
    for &(owner, held) in holders {
        if owner.is_keeper() {
            let Some(keepers) = keepers else {
                continue;
            };
            if !modes.compatible(held, mode) {
                match kept_user(keepers, owner.txn, resource) {
                    Some(user) if user == txn => converts = true,
                    Some(user) if !blockers.contains(&user) => blockers.push(user),
                    _ => {}
                }
            }
        } else if owner.txn == txn {
            converts = true;
        } else if !modes.compatible(held, mode) && !blockers.contains(&owner.txn) {
            blockers.push(owner.txn);
        }
    }
    // Most requests meet an empty queue: skip walking it.
    if !converts && !waiting.is_empty() {
        blockers.extend(
            waiting
                .iter()
                .filter(|(t, w)| {
                    **t != txn
                        && w.resource == resource
                        && w.ticket < ticket
                        && !modes.compatible(w.mode, mode)
                })
                .map(|(t, _)| *t),
        );
    }
    blockers
}

/// The transaction of `keeper` relying on its kept lock on `resource`, if one does.
fn kept_user(keepers: &Keepers, keeper: TxnId, resource: Resource) -> Option<TxnId> {
    let Resource::Page(page) = resource else {
        return None;
    };
    let state = keepers.get(&keeper)?.lock();
    state.active.filter(|_| state.in_use.contains(&page))
}

/// What settling the kept locks on a resource for a request found.
#[derive(Default)]
struct Settled {
    /// Kept locks called back.
    called: u64,
    /// Transactions relying on a kept lock in conflict, to wait for (the requester among them
    /// when it relies on one itself).
    users: SmallVec<[TxnId; 2]>,
}

/// Calls back the kept locks on `resource` in conflict with `mode` that no running transaction
/// relies on, and names those that rely on the others. Each keeper is looked at once, under
/// its own lock, so a session cannot start relying on a lock between the look and the call
/// back; and it cannot stop relying on one while the table is locked (only the end of its
/// transaction, under the table's lock, clears that).
fn settle_kept(
    modes: &ModeTable,
    keepers: &Keepers,
    holders: &mut Holders,
    resource: Resource,
    mode: ModeId,
) -> Settled {
    let mut settled = Settled::default();
    holders.retain(|&mut (owner, held)| {
        if !owner.is_keeper() || modes.compatible(held, mode) {
            return true;
        }
        if let (Some(kept), Resource::Page(page)) = (keepers.get(&owner.txn), resource) {
            let mut state = kept.lock();
            if state.in_use.contains(&page) {
                if let Some(user) = state.active {
                    settled.users.push(user);
                    return true;
                }
            }
            state.pages.remove(&page);
        }
        settled.called += 1;
        false
    });
    settled
}

/// The mode `owner`, or an ancestor of it (its transaction at a lower level), holds among
/// `holders` that covers `mode`. A subtransaction's lock covers neither its parent nor a
/// sibling that follows it: it may be released at the subtransaction's end.
#[inline]
fn covering(
    modes: &ModeTable,
    holders: &[(Owner, ModeId)],
    owner: Owner,
    mode: ModeId,
) -> Option<ModeId> {
    holders
        .iter()
        .find(|(o, m)| o.txn == owner.txn && o.level <= owner.level && modes.covers(*m, mode))
        .map(|&(_, m)| m)
}

impl Table {
    /// Who `txn` must wait for to get `mode` on `resource`, having first waited with
    /// `ticket` (see [`blockers`]).
    fn conflicts(
        &self,
        modes: &ModeTable,
        txn: TxnId,
        resource: Resource,
        mode: ModeId,
        ticket: u64,
    ) -> Vec<TxnId> {
        let holders = self
            .holders
            .get(&resource)
            .map_or(&[][..], |h| h.as_slice());
        blockers(
            modes,
            holders,
            &self.waiting,
            Some(&self.keepers),
            false,
            txn,
            resource,
            mode,
            ticket,
        )
    }

    /// `txn`'s ticket if it waits already.
    fn ticket(&self, txn: TxnId) -> u64 {
        self.waiting.get(&txn).map_or(NOT_WAITING, |w| w.ticket)
    }

    /// Grants `mode` on `resource` to `owner` unless others conflict, with one lookup of the
    /// resource (the path of nearly every request): the mode `owner` holds afterwards, or who
    /// it must wait for (see [`blockers`]). A lock held already by `owner` or an
    /// ancestor in a mode covering `mode` is granted as it is.
    fn try_grant(
        &mut self,
        modes: &ModeTable,
        owner: Owner,
        resource: Resource,
        mode: ModeId,
        ticket: u64,
    ) -> std::result::Result<ModeId, Vec<TxnId>> {
        let Table {
            holders,
            held,
            waiting,
            keepers,
            stats,
            ..
        } = self;
        let entry = holders.entry(resource).or_default();
        if let Some(covering) = covering(modes, entry, owner, mode) {
            return Ok(covering);
        }
        // Kept locks first: called back, or the transactions relying on them waited for.
        let mut relied_on = false;
        let mut kept_users = SmallVec::<[TxnId; 2]>::new();
        if entry
            .iter()
            .any(|&(o, m)| o.is_keeper() && !modes.compatible(m, mode))
        {
            let settled = settle_kept(modes, keepers, entry, resource, mode);
            stats.callbacks += settled.called;
            for user in settled.users {
                if user == owner.txn {
                    relied_on = true;
                } else if !kept_users.contains(&user) {
                    kept_users.push(user);
                }
            }
        }
        let mut blockers = blockers(
            modes, entry, waiting, None, relied_on, owner.txn, resource, mode, ticket,
        );
        for user in kept_users {
            if !blockers.contains(&user) {
                blockers.push(user);
            }
        }
        // No holder of the owner's transaction: its first lock on the resource, at any level.
        let first_of_txn = !entry.iter().any(|(o, _)| o.txn == owner.txn);
        if !blockers.is_empty() {
            if entry.is_empty() {
                holders.remove(&resource);
            }
            return Err(blockers);
        }
        let granted = match entry.iter_mut().find(|(o, _)| *o == owner) {
            Some(own) => {
                own.1 = modes.join(own.1, mode);
                own.1
            }
            None => {
                entry.push((owner, mode));
                mode
            }
        };
        if first_of_txn {
            held.entry(owner.txn).or_default().push(resource);
        }
        Ok(granted)
    }

    /// Does `owner`, or an ancestor of it, hold a mode covering `mode` on `resource`?
    fn holds(&self, modes: &ModeTable, owner: Owner, resource: Resource, mode: ModeId) -> bool {
        self.holders
            .get(&resource)
            .is_some_and(|h| covering(modes, h, owner, mode).is_some())
    }

    /// Would `txn` waiting for `blockers` close a cycle? Depth-first over waits-for edges.
    fn closes_cycle(&self, modes: &ModeTable, txn: TxnId, blockers: &[TxnId]) -> bool {
        let mut stack: Vec<TxnId> = blockers.to_vec();
        let mut seen: HashSet<TxnId> = HashSet::default();
        while let Some(t) = stack.pop() {
            if t == txn {
                return true;
            }
            if !seen.insert(t) {
                continue;
            }
            if let Some(w) = self.waiting.get(&t) {
                stack.extend(self.conflicts(modes, t, w.resource, w.mode, w.ticket));
            }
        }
        false
    }

    /// Removes the locks of `txn` whose owner `remove` selects, and forgets resources it no
    /// longer holds at any level. Returns the resources it held.
    fn drop_locks(&mut self, txn: TxnId, mut remove: impl FnMut(Owner) -> bool) -> Vec<Resource> {
        let Some(resources) = self.held.remove(&txn) else {
            return Vec::new();
        };
        let mut still = Vec::new();
        for &resource in &resources {
            // One lookup per resource, the entry removed through it when left empty.
            if let Entry::Occupied(mut holders) = self.holders.entry(resource) {
                holders
                    .get_mut()
                    .retain(|(o, _)| o.txn != txn || !remove(*o));
                if holders.get().iter().any(|(o, _)| o.txn == txn) {
                    still.push(resource);
                }
                if holders.get().is_empty() {
                    holders.remove();
                }
            }
        }
        if !still.is_empty() {
            self.held.insert(txn, still);
        }
        resources
    }

    /// Removes `keeper`'s kept lock on `resource`, and the resource when nobody holds it.
    fn drop_kept(&mut self, keeper: TxnId, resource: Resource) {
        if let Entry::Occupied(mut holders) = self.holders.entry(resource) {
            holders
                .get_mut()
                .retain(|(o, _)| *o != Owner::keeper(keeper));
            if holders.get().is_empty() {
                holders.remove();
            }
        }
    }

    /// The end of `txn`, attached to `keeper`: its shared page locks pass to the keeper (the
    /// session's copy of each page, validated in `txn`, stays current while it is kept); so do
    /// its exclusive page locks when `written` says its commit is durable, except on the pages
    /// `written` names (the server changed them at the commit, and the session's copies are
    /// not what was committed). Its other locks are released, and a page it held exclusive and
    /// does not keep is kept no longer. Returns the resources whose waiters may go now.
    fn keep_shared(
        &mut self,
        txn: TxnId,
        keeper: TxnId,
        written: Option<&HashSet<PageId>>,
    ) -> Vec<Resource> {
        let Some(kept) = self.keepers.get(&keeper).cloned() else {
            return self.drop_locks(txn, |_| true);
        };
        let shared = mode_id(LockMode::Shared);
        let exclusive = mode_id(LockMode::Exclusive);
        let kept_owner = Owner::keeper(keeper);
        let mut state = kept.lock();
        let mut released = Vec::new();
        if state.active == Some(txn) {
            state.active = None;
            // The session's copies of the kept pages it read were validated in `txn` last.
            let used: Vec<PageId> = state.in_use.drain().collect();
            for page in used {
                if let Some(validated_in) = state.pages.get_mut(&page) {
                    *validated_in = txn;
                }
                released.push(Resource::Page(page));
            }
        }
        let resources = self.held.remove(&txn).unwrap_or_default();
        if state.pages.len() + resources.len() > kept.limit() {
            // Over the limit: start again from this transaction's pages rather than track
            // which kept page was used least recently.
            for page in std::mem::take(&mut state.pages).into_keys() {
                self.drop_kept(keeper, Resource::Page(page));
                released.push(Resource::Page(page));
            }
        }
        for resource in resources {
            released.push(resource);
            let Entry::Occupied(mut holders) = self.holders.entry(resource) else {
                continue;
            };
            // A page written by a durable commit is kept as a page read is: the session's copy
            // is what was committed, validated in `txn`.
            let written_here = match (resource, written) {
                (Resource::Page(page), Some(changed)) => !changed.contains(&page),
                _ => false,
            };
            let mut keepable = true;
            holders.get_mut().retain(|&mut (o, m)| {
                if o.txn != txn {
                    return true;
                }
                keepable &= o.level == 0 && (m == shared || (m == exclusive && written_here));
                false
            });
            if let Resource::Page(page) = resource {
                let already = holders.get().iter().any(|(o, _)| *o == kept_owner);
                if keepable && state.pages.len() < kept.limit() {
                    if !already {
                        holders.get_mut().push((kept_owner, shared));
                    }
                    state.pages.insert(page, txn);
                } else if already {
                    holders.get_mut().retain(|(o, _)| *o != kept_owner);
                    state.pages.remove(&page);
                }
            }
            if holders.get().is_empty() {
                holders.remove();
            }
        }
        released
    }

    /// The waiters on `resources` whose requests could be granted now (nobody holds or
    /// waits ahead for a conflicting mode), to be woken once the table is unlocked.
    fn grantable(&self, modes: &ModeTable, resources: &[Resource]) -> Vec<Arc<WaitSignal>> {
        if self.waiting.is_empty() {
            return Vec::new();
        }
        self.waiting
            .iter()
            .filter(|(txn, w)| {
                resources.contains(&w.resource) && {
                    let holders = self.holders.get(&w.resource).map_or(&[][..], |h| &h[..]);
                    blockers(
                        modes,
                        holders,
                        &self.waiting,
                        Some(&self.keepers),
                        false,
                        **txn,
                        w.resource,
                        w.mode,
                        w.ticket,
                    )
                    .is_empty()
                }
            })
            .filter_map(|(_, w)| {
                w.wake.ready.store(true, Ordering::Release);
                w.wake
                    .asleep
                    .load(Ordering::Relaxed)
                    .then(|| w.wake.clone())
            })
            .collect()
    }
}

/// Wakes the sleeping waiters `Table::grantable` found (after the table is unlocked).
fn wake(waiters: Vec<Arc<WaitSignal>>) {
    for waiter in waiters {
        waiter.woken.notify_one();
    }
}

impl LockManager {
    /// A lock manager of page locks (shared and exclusive) and object locks (those and
    /// increment), [`ModeTable::semantic`].
    pub fn new(timeout: Duration) -> LockManager {
        LockManager::with_modes(ModeTable::semantic(), timeout)
            .expect("the semantic table is valid")
    }

    /// A lock manager with modes of the caller's choosing.
    pub fn with_modes(modes: ModeTable, timeout: Duration) -> Result<LockManager> {
        modes
            .validate()
            .map_err(|reason| Error::InvalidArgument(format!("lock modes: {reason}")))?;
        Ok(LockManager {
            modes,
            table: Mutex::new(Table {
                holders: HashMap::default(),
                held: HashMap::default(),
                waiting: HashMap::default(),
                keepers: HashMap::default(),
                keeper_of: HashMap::default(),
                committing: HashMap::default(),
                next_ticket: 0,
                brief: HashSet::default(),
                sleeps: 0,
                stats: LockStats::default(),
            }),
            timeout,
            spin: LOCK_SPIN,
        })
    }

    pub fn modes(&self) -> &ModeTable {
        &self.modes
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Grants `mode` on `page` to `txn`, waiting while others hold conflicting locks or wait
    /// for them ahead of it; the mode `txn` holds on it afterwards (exclusive if it held that
    /// already).
    pub fn acquire(&self, txn: TxnId, page: PageId, mode: LockMode) -> Result<LockMode> {
        let held = self.lock_resource(Owner::top(txn), Resource::Page(page), page_mode(mode))?;
        Ok(if self.modes.covers(held, page_mode(LockMode::Exclusive)) {
            LockMode::Exclusive
        } else {
            LockMode::Shared
        })
    }

    /// Grants `mode` on `resource` to `owner`, waiting while other transactions hold
    /// conflicting locks or wait for them ahead of it; the mode that covers the request
    /// afterwards (`mode` joined with what `owner` held, or an ancestor's covering mode).
    pub fn lock_resource(&self, owner: Owner, resource: Resource, mode: ModeId) -> Result<ModeId> {
        assert!(
            (mode.0 as usize) < self.modes.len(),
            "lock mode {} of {}",
            mode.0,
            self.modes.len()
        );
        let txn = owner.txn;
        // Read the clock only once the request has to wait: most are granted at once.
        let mut started: Option<Instant> = None;
        // Spinning left to this request, spent across its waits.
        let mut spin_left = self.spin;
        let mut table = self.lock();
        table.stats.requests += 1;
        loop {
            let ticket = table.ticket(txn);
            let blockers = match table.try_grant(&self.modes, owner, resource, mode, ticket) {
                Ok(granted) => {
                    let was_waiting = table.waiting.remove(&txn).is_some();
                    if let Some(started) = started {
                        table.stats.note_wait(started);
                    }
                    // Requests behind this one that it held up may go now (the compatible
                    // ones).
                    let next = if was_waiting {
                        table.grantable(&self.modes, &[resource])
                    } else {
                        Vec::new()
                    };
                    drop(table);
                    wake(next);
                    return Ok(granted);
                }
                Err(blockers) => blockers,
            };
            if table.closes_cycle(&self.modes, txn, &blockers) {
                table.stats.deadlocks += 1;
                if let Some(started) = started {
                    table.stats.note_wait(started);
                }
                self.stop_waiting(table, txn);
                return Err(Error::Deadlock {
                    page: resource.page(),
                });
            }
            let waited = started.get_or_insert_with(Instant::now).elapsed();
            if waited >= self.timeout {
                table.stats.timeouts += 1;
                table.stats.note_wait(started.unwrap_or_else(Instant::now));
                self.stop_waiting(table, txn);
                return Err(Error::LockTimeout {
                    page: resource.page(),
                    waited_ms: waited.as_millis() as u64,
                });
            }
            if ticket == NOT_WAITING {
                table.stats.requests_blocked += 1;
                let ticket = table.next_ticket;
                table.next_ticket += 1;
                table.waiting.insert(
                    txn,
                    Waiter {
                        resource,
                        mode,
                        ticket,
                        wake: Arc::default(),
                    },
                );
            }
            table.stats.waits += 1;
            let signal = table.waiting[&txn].wake.clone();
            // Only a release after this point (it takes the table's lock) sets it again.
            signal.ready.store(false, Ordering::Relaxed);
            if !spin_left.is_zero() && blockers.iter().all(|b| table.brief.contains(b)) {
                drop(table);
                let spin = spin_left.min(self.timeout - waited);
                let start = Instant::now();
                while !signal.ready.load(Ordering::Acquire) && start.elapsed() < spin {
                    std::thread::yield_now();
                }
                spin_left = spin_left.saturating_sub(start.elapsed());
                table = self.lock();
                continue;
            }
            table.sleeps += 1;
            signal.asleep.store(true, Ordering::Relaxed);
            table = signal
                .woken
                .wait_timeout(table, self.timeout - waited)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            signal.asleep.store(false, Ordering::Relaxed);
        }
    }

    /// `txn` leaves the queue without its lock: those behind it may go.
    fn stop_waiting(&self, mut table: MutexGuard<'_, Table>, txn: TxnId) {
        let next = match table.waiting.remove(&txn) {
            Some(left) => table.grantable(&self.modes, &[left.resource]),
            None => Vec::new(),
        };
        drop(table);
        wake(next);
    }

    /// Grants `mode` on `page` if nobody conflicts (holders or earlier waiters); never waits.
    pub fn try_acquire(&self, txn: TxnId, page: PageId, mode: LockMode) -> bool {
        let (resource, mode) = (Resource::Page(page), page_mode(mode));
        self.lock()
            .try_grant(&self.modes, Owner::top(txn), resource, mode, NOT_WAITING)
            .is_ok()
    }

    /// The strongest mode `txn` holds on `page` (at its top level), if any.
    pub fn held_mode(&self, txn: TxnId, page: PageId) -> Option<LockMode> {
        let exclusive = page_mode(LockMode::Exclusive);
        let table = self.lock();
        let holders = table.holders.get(&Resource::Page(page))?;
        let mut held = None;
        for &(_, mode) in holders.iter().filter(|(o, _)| *o == Owner::top(txn)) {
            if self.modes.covers(mode, exclusive) {
                return Some(LockMode::Exclusive);
            }
            if self.modes.covers(mode, page_mode(LockMode::Shared)) {
                held = Some(LockMode::Shared);
            }
        }
        held
    }

    pub fn holds(&self, txn: TxnId, page: PageId, mode: LockMode) -> bool {
        self.holds_resource(Owner::top(txn), Resource::Page(page), page_mode(mode))
    }

    /// Does `owner`, or its transaction at a lower level, hold a mode covering `mode` on
    /// `resource`?
    pub fn holds_resource(&self, owner: Owner, resource: Resource, mode: ModeId) -> bool {
        self.lock().holds(&self.modes, owner, resource, mode)
    }

    /// Is `page` locked by anyone but `txn`?
    pub fn locked_by_other(&self, txn: TxnId, page: PageId) -> bool {
        self.lock()
            .holders
            .get(&Resource::Page(page))
            .is_some_and(|h| h.iter().any(|(o, _)| o.txn != txn && !o.is_keeper()))
    }

    /// Releases every lock of `txn`, at every level, and wakes the waiters. A transaction
    /// attached to a keeper leaves its shared page locks to it instead.
    pub fn release_all(&self, txn: TxnId) {
        self.release(txn, false);
    }

    /// [`release_all`](Self::release_all) at the durable commit of `txn`: a transaction
    /// attached to a keeper leaves it the locks of the pages it wrote as well, but those the
    /// server changed at the commit ([`note_commit`](Self::note_commit)).
    pub fn release_committed(&self, txn: TxnId) {
        self.release(txn, true);
    }

    /// Notes, as `txn`'s commit is appended, the pages the server itself changed at it (pages
    /// it freed), which a keeper may not keep for the session (see
    /// [`release_committed`](Self::release_committed)). Nothing for a transaction attached to
    /// no keeper, nor when there are none: most commits change no page of their own, and
    /// take the table's lock once fewer.
    pub fn note_commit(&self, txn: TxnId, changed_by_server: &[PageId]) {
        if changed_by_server.is_empty() {
            return;
        }
        let mut table = self.lock();
        if table.keeper_of.contains_key(&txn) {
            let changed = changed_by_server.iter().copied().collect();
            table.committing.insert(txn, changed);
        }
    }

    fn release(&self, txn: TxnId, committed: bool) {
        let mut table = self.lock();
        table.brief.remove(&txn);
        let left = table.waiting.remove(&txn);
        let noted = table.committing.remove(&txn);
        let none_changed = HashSet::default();
        let written = committed.then(|| noted.as_ref().unwrap_or(&none_changed));
        let mut released = match table.keeper_of.remove(&txn) {
            Some(keeper) => table.keep_shared(txn, keeper, written),
            None => table.drop_locks(txn, |_| true),
        };
        released.extend(left.map(|w| w.resource));
        let next = table.grantable(&self.modes, &released);
        drop(table);
        wake(next);
    }

    /// Notes that `txn` is a subtransaction: it holds its locks for the few microseconds of one
    /// operation, so a request it blocks spins briefly (yielding its CPU) before sleeping.
    /// Forgotten at its [`release_all`](Self::release_all).
    pub fn holds_briefly(&self, txn: TxnId) {
        self.lock().brief.insert(txn);
    }

    /// Releases the locks `txn` holds at `level` (a subtransaction's, at its end).
    pub fn release_level(&self, txn: TxnId, level: u8) {
        let mut table = self.lock();
        let released = table.drop_locks(txn, |owner| owner.level == level);
        let next = table.grantable(&self.modes, &released);
        drop(table);
        wake(next);
    }

    /// Passes the locks `txn` holds at `level` (> 0) to its parent level, each joined with
    /// what the parent holds on the same resource.
    pub fn pass_to_parent(&self, txn: TxnId, level: u8) {
        assert!(level > 0, "level 0 is the transaction: it has no parent");
        let mut table = self.lock();
        let resources = table.held.get(&txn).cloned().unwrap_or_default();
        let parent = Owner {
            txn,
            level: level - 1,
        };
        for resource in resources {
            let Some(holders) = table.holders.get_mut(&resource) else {
                continue;
            };
            let Some(at) = holders
                .iter()
                .position(|(o, _)| o.txn == txn && o.level == level)
            else {
                continue;
            };
            let (_, mode) = holders.remove(at);
            match holders.iter_mut().find(|(o, _)| *o == parent) {
                Some(entry) => entry.1 = self.modes.join(entry.1, mode),
                None => holders.push((parent, mode)),
            }
        }
    }

    /// Files the locks `kept` will keep; they are called back when a writer needs their pages.
    pub fn register_keeper(&self, kept: Arc<KeptLocks>) {
        let mut table = self.lock();
        assert!(
            !table.keepers.contains_key(&kept.id()),
            "keeper {} registered twice",
            kept.id()
        );
        table.keepers.insert(kept.id(), kept);
    }

    /// At its end, `txn` leaves its shared page locks to `keeper` (if it is registered).
    pub fn attach_to_keeper(&self, txn: TxnId, keeper: TxnId) {
        let mut table = self.lock();
        if table.keepers.contains_key(&keeper) {
            table.keeper_of.insert(txn, keeper);
        }
    }

    /// Releases every lock `keeper` keeps and forgets it.
    pub fn forget_keeper(&self, keeper: TxnId) {
        let mut table = self.lock();
        let Some(kept) = table.keepers.remove(&keeper) else {
            return;
        };
        table.keeper_of.retain(|_, k| *k != keeper);
        let Table {
            keeper_of,
            committing,
            ..
        } = &mut *table;
        committing.retain(|txn, _| keeper_of.contains_key(txn));
        let pages = {
            let mut state = kept.lock();
            state.active = None;
            state.in_use.clear();
            std::mem::take(&mut state.pages)
        };
        let released: Vec<Resource> = pages.into_keys().map(Resource::Page).collect();
        for &resource in &released {
            table.drop_kept(keeper, resource);
        }
        let next = table.grantable(&self.modes, &released);
        drop(table);
        wake(next);
    }

    /// What `owner` holds, by resource (for tests and diagnostics).
    pub fn held_by(&self, owner: Owner) -> Vec<(Resource, ModeId)> {
        let table = self.lock();
        let mut held: Vec<(Resource, ModeId)> = table
            .holders
            .iter()
            .flat_map(|(r, h)| h.iter().filter(|(o, _)| *o == owner).map(|(_, m)| (*r, *m)))
            .collect();
        held.sort();
        held
    }

    pub fn locked_pages(&self) -> usize {
        self.lock().holders.len()
    }

    pub fn stats(&self) -> LockStats {
        self.lock().stats
    }

    /// Transactions waiting for a lock right now.
    pub fn waiting(&self) -> usize {
        self.lock().waiting.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn manager() -> LockManager {
        LockManager::new(Duration::from_secs(5))
    }

    fn sleeps(locks: &LockManager) -> u64 {
        locks.lock().sleeps
    }

    /// Behind a subtransaction a request spins (here for as long as it takes) and is granted
    /// at the release without sleeping; behind a transaction holding to its commit it sleeps
    /// at once. Either way the release lets it in, and the subtransaction is forgotten.
    #[test]
    fn a_request_spins_behind_a_subtransaction_and_sleeps_behind_a_transaction() {
        let mut locks = manager();
        locks.spin = Duration::from_secs(5);
        let locks = Arc::new(locks);
        let (sub, flat, waiter) = (TxnId(1), TxnId(2), TxnId(3));
        let p = PageId(4);
        for (holder, brief) in [(sub, true), (flat, false)] {
            if brief {
                locks.holds_briefly(holder);
            }
            locks.acquire(holder, p, LockMode::Exclusive).unwrap();
            let before = sleeps(&locks);
            let blocked = {
                let locks = locks.clone();
                std::thread::spawn(move || locks.acquire(waiter, p, LockMode::Exclusive))
            };
            until_waiting(&locks, 1);
            if !brief {
                let deadline = Instant::now() + Duration::from_secs(5);
                while sleeps(&locks) == before {
                    assert!(Instant::now() < deadline, "the request did not sleep");
                    std::thread::yield_now();
                }
            }
            std::thread::sleep(Duration::from_millis(2));
            locks.release_all(holder);
            assert_eq!(blocked.join().unwrap().unwrap(), LockMode::Exclusive);
            let slept = sleeps(&locks) - before;
            assert_eq!(slept == 0, brief, "slept {slept} times; brief: {brief}");
            locks.release_all(waiter);
        }
        assert!(locks.lock().brief.is_empty());
        assert_eq!(locks.locked_pages(), 0);
    }

    /// Returns once `count` transactions wait for a lock (at most 5 s), so tests order
    /// threads by what they do, not by sleeping.
    pub(super) fn until_waiting(locks: &LockManager, count: usize) {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while locks.waiting() < count {
            assert!(
                std::time::Instant::now() < deadline,
                "nobody started waiting"
            );
            std::thread::yield_now();
        }
    }

    #[test]
    fn a_grant_reports_the_mode_held_and_a_refusal_leaves_no_trace() {
        let locks = manager();
        let (a, b) = (TxnId(1), TxnId(2));
        let (p, q) = (PageId(5), PageId(6));
        assert_eq!(locks.held_mode(a, p), None);
        assert_eq!(
            locks.acquire(a, p, LockMode::Shared).unwrap(),
            LockMode::Shared
        );
        assert_eq!(locks.held_mode(a, p), Some(LockMode::Shared));
        assert_eq!(
            locks.acquire(a, p, LockMode::Exclusive).unwrap(),
            LockMode::Exclusive
        );
        // A shared request under an exclusive lock keeps the exclusive one.
        assert_eq!(
            locks.acquire(a, p, LockMode::Shared).unwrap(),
            LockMode::Exclusive
        );
        assert_eq!(locks.held_mode(a, p), Some(LockMode::Exclusive));
        assert_eq!(locks.held_mode(b, p), None);
        assert!(!locks.try_acquire(b, p, LockMode::Shared));
        assert!(locks.try_acquire(b, q, LockMode::Shared));
        assert_eq!(locks.locked_pages(), 2);
        locks.release_all(a);
        assert_eq!(locks.locked_pages(), 1);
        locks.release_all(b);
        assert_eq!(locks.locked_pages(), 0);
    }

    #[test]
    fn shared_compatible_exclusive_waits_for_release() {
        let locks = Arc::new(manager());
        let (a, b) = (TxnId(1), TxnId(2));
        let p = PageId(5);
        locks.acquire(a, p, LockMode::Shared).unwrap();
        locks.acquire(b, p, LockMode::Shared).unwrap();
        assert!(!locks.try_acquire(b, p, LockMode::Exclusive));
        let waiter = {
            let locks = locks.clone();
            std::thread::spawn(move || {
                locks.acquire(b, p, LockMode::Exclusive).unwrap();
                locks.stats().waits
            })
        };
        until_waiting(&locks, 1);
        assert!(!locks.holds(b, p, LockMode::Exclusive));
        std::thread::sleep(Duration::from_millis(5));
        locks.release_all(a);
        assert!(waiter.join().unwrap() >= 1);
        assert!(locks.holds(b, p, LockMode::Exclusive));
        // Three requests, one of which waited, for at least the time `a` held on.
        let stats = locks.stats();
        assert_eq!((stats.requests, stats.requests_blocked), (3, 1));
        assert!(stats.wait_micros >= 5_000, "{stats:?}");
        locks.release_all(b);
        assert_eq!(locks.locked_pages(), 0);
    }

    /// Between transactions and between subtransactions (whose waiters spin first: spinning
    /// must not hide the cycle).
    #[test]
    fn deadlock_picks_the_requester_that_closes_the_cycle() {
        for brief in [false, true] {
            deadlock_picks_the_requester_that_closes_the_cycle_with(brief);
        }
    }

    fn deadlock_picks_the_requester_that_closes_the_cycle_with(brief: bool) {
        let locks = Arc::new(manager());
        let (a, b) = (TxnId(1), TxnId(2));
        let (p, q) = (PageId(1), PageId(2));
        if brief {
            locks.holds_briefly(a);
            locks.holds_briefly(b);
        }
        locks.acquire(a, p, LockMode::Exclusive).unwrap();
        locks.acquire(b, q, LockMode::Exclusive).unwrap();
        let first = {
            let locks = locks.clone();
            std::thread::spawn(move || locks.acquire(a, q, LockMode::Exclusive))
        };
        until_waiting(&locks, 1);
        let second = locks.acquire(b, p, LockMode::Exclusive);
        assert!(matches!(second, Err(Error::Deadlock { page }) if page == p));
        assert_eq!(locks.stats().deadlocks, 1);
        locks.release_all(b);
        first.join().unwrap().unwrap();
        // The victim was refused without waiting; the first request waited.
        let stats = locks.stats();
        assert_eq!((stats.requests, stats.requests_blocked), (4, 1));
        locks.release_all(a);
        assert_eq!(locks.locked_pages(), 0);
    }

    /// A conversion waiting for readers to leave is not starved by readers that keep coming:
    /// a new shared request waits behind it (and, closing a cycle there, is the victim).
    #[test]
    fn new_readers_queue_behind_a_waiting_conversion() {
        let locks = Arc::new(manager());
        let (a, b, c) = (TxnId(1), TxnId(2), TxnId(3));
        let p = PageId(9);
        locks.acquire(a, p, LockMode::Shared).unwrap();
        locks.acquire(b, p, LockMode::Shared).unwrap();
        let converting = {
            let locks = locks.clone();
            std::thread::spawn(move || locks.acquire(a, p, LockMode::Exclusive))
        };
        until_waiting(&locks, 1);
        // The holders alone would admit c; the queue does not.
        assert!(!locks.try_acquire(c, p, LockMode::Shared));
        let reader = {
            let locks = locks.clone();
            std::thread::spawn(move || locks.acquire(c, p, LockMode::Shared))
        };
        until_waiting(&locks, 2);
        assert!(!locks.holds(c, p, LockMode::Shared));
        locks.release_all(b);
        converting.join().unwrap().unwrap();
        assert!(locks.holds(a, p, LockMode::Exclusive));
        locks.release_all(a);
        reader.join().unwrap().unwrap();
        assert!(locks.holds(c, p, LockMode::Shared));
    }

    /// Two holders of a shared lock that both convert: the second closes the cycle and is the
    /// victim; the first then gets its exclusive lock.
    #[test]
    fn two_conversions_on_one_page_make_one_victim() {
        let locks = Arc::new(manager());
        let (a, b) = (TxnId(1), TxnId(2));
        let p = PageId(3);
        locks.acquire(a, p, LockMode::Shared).unwrap();
        locks.acquire(b, p, LockMode::Shared).unwrap();
        let first = {
            let locks = locks.clone();
            std::thread::spawn(move || locks.acquire(a, p, LockMode::Exclusive))
        };
        until_waiting(&locks, 1);
        assert!(matches!(
            locks.acquire(b, p, LockMode::Exclusive),
            Err(Error::Deadlock { .. })
        ));
        locks.release_all(b);
        first.join().unwrap().unwrap();
        assert_eq!(locks.waiting(), 0);
    }

    /// Shared, exclusive, and an escrow-style increment mode: increments commute, so two
    /// transactions may hold one at once, but a reader or a writer must wait for them. Added by
    /// data alone.
    fn with_increment() -> ModeTable {
        ModeTable::semantic()
    }

    const S: ModeId = ModeId(0);
    const X: ModeId = ModeId(1);
    const I: ModeId = ModeId(2);

    #[test]
    fn a_mode_added_by_data_grants_waits_and_detects_deadlocks() {
        let locks =
            Arc::new(LockManager::with_modes(with_increment(), Duration::from_secs(5)).unwrap());
        let (a, b, c) = (
            Owner::top(TxnId(1)),
            Owner::top(TxnId(2)),
            Owner::top(TxnId(3)),
        );
        let (o1, o2) = (
            Resource::Object(lodestore_core::Oid::new(0, PageId(4), 1)),
            Resource::Object(lodestore_core::Oid::new(0, PageId(4), 2)),
        );
        // Increments commute: both granted at once.
        locks.lock_resource(a, o1, I).unwrap();
        locks.lock_resource(b, o1, I).unwrap();
        // A reader waits for both.
        let reader = {
            let locks = locks.clone();
            std::thread::spawn(move || locks.lock_resource(c, o1, S))
        };
        until_waiting(&locks, 1);
        assert!(!locks.holds_resource(c, o1, S));
        locks.release_all(a.txn);
        assert!(!locks.holds_resource(c, o1, S));
        locks.release_all(b.txn);
        reader.join().unwrap().unwrap();
        locks.release_all(c.txn);

        // Holding an increment and asking to read gets the least mode covering both: X.
        locks.lock_resource(a, o1, I).unwrap();
        locks.lock_resource(a, o1, S).unwrap();
        assert_eq!(locks.held_by(a), vec![(o1, X)]);
        locks.release_all(a.txn);

        // A cycle through the new mode: a holds I on o1, b holds I on o2; a waits to read o2,
        // and b asking to read o1 closes the cycle and is the victim.
        locks.lock_resource(a, o1, I).unwrap();
        locks.lock_resource(b, o2, I).unwrap();
        let first = {
            let locks = locks.clone();
            std::thread::spawn(move || locks.lock_resource(a, o2, S))
        };
        until_waiting(&locks, 1);
        assert!(matches!(
            locks.lock_resource(b, o1, S),
            Err(Error::Deadlock { page }) if page == PageId(4)
        ));
        locks.release_all(b.txn);
        first.join().unwrap().unwrap();
        assert_eq!(locks.stats().deadlocks, 1);
    }

    #[test]
    fn tables_that_break_the_rules_are_refused() {
        let mut asymmetric = with_increment();
        asymmetric.compatible[0][2] = true;
        assert!(asymmetric.validate().unwrap_err().contains("symmetric"));
        let mut no_join = with_increment();
        no_join.covers[1][2] = false; // nothing covers both S and I any more
        assert!(no_join.validate().unwrap_err().contains("covers both"));
        // X covers S, yet would admit increments that S keeps out.
        let mut stronger_admits = with_increment();
        stronger_admits.compatible[1][2] = true;
        stronger_admits.compatible[2][1] = true;
        assert!(stronger_admits
            .validate()
            .unwrap_err()
            .contains("keeps out"));
        assert!(LockManager::with_modes(no_join, Duration::from_secs(1)).is_err());
    }

    /// A subtransaction's locks are its own: released at its end they let others in; passed
    /// to the parent they stay until the transaction ends.
    #[test]
    fn subtransaction_locks_are_released_or_passed_to_the_parent() {
        let locks = manager();
        let top = Owner::top(TxnId(1));
        let sub = Owner {
            txn: TxnId(1),
            level: 1,
        };
        let other = TxnId(2);
        let (p, q) = (Resource::Page(PageId(7)), Resource::Page(PageId(8)));
        locks.lock_resource(sub, p, X).unwrap();
        // The transaction's other levels are not in conflict with it.
        locks.lock_resource(top, p, S).unwrap();
        assert!(!locks.try_acquire(other, PageId(7), LockMode::Shared));
        locks.release_level(TxnId(1), 1);
        assert_eq!(locks.held_by(sub), vec![]);
        assert_eq!(locks.held_by(top), vec![(p, S)]);
        assert!(locks.try_acquire(other, PageId(7), LockMode::Shared));
        locks.release_all(other);

        locks.lock_resource(sub, q, X).unwrap();
        locks.pass_to_parent(TxnId(1), 1);
        assert_eq!(locks.held_by(sub), vec![]);
        assert_eq!(locks.held_by(top), vec![(p, S), (q, X)]);
        assert!(!locks.try_acquire(other, PageId(8), LockMode::Shared));
        locks.release_all(TxnId(1));
        assert!(locks.try_acquire(other, PageId(8), LockMode::Shared));
        assert_eq!(locks.locked_pages(), 1);
    }

    #[test]
    fn waiting_times_out() {
        let locks = LockManager::new(Duration::from_millis(30));
        locks
            .acquire(TxnId(1), PageId(1), LockMode::Exclusive)
            .unwrap();
        let result = locks.acquire(TxnId(2), PageId(1), LockMode::Shared);
        assert!(matches!(result, Err(Error::LockTimeout { .. })));
        assert!(result.unwrap_err().is_retryable());
    }
}

/// Shared locks a session keeps between its transactions, and how writers call them back.
#[cfg(test)]
mod kept_tests {
    use super::tests::until_waiting;
    use super::*;

    const KEEPER: TxnId = TxnId(1000);
    const P: PageId = PageId(7);
    const Q: PageId = PageId(8);

    fn with_keeper(limit: usize) -> (Arc<LockManager>, Arc<KeptLocks>) {
        let locks = Arc::new(LockManager::new(Duration::from_secs(5)));
        let kept = Arc::new(KeptLocks::new(KEEPER, limit));
        locks.register_keeper(kept.clone());
        (locks, kept)
    }

    /// `txn` of the keeping session reads `pages` under its own shared locks and ends.
    fn read_and_end(locks: &LockManager, kept: &KeptLocks, txn: TxnId, pages: &[PageId]) {
        attached_holding(locks, kept, txn, pages, &[]);
        locks.release_all(txn);
    }

    /// `txn` of the keeping session, holding `read` shared and `written` exclusive.
    fn attached_holding(
        locks: &LockManager,
        kept: &KeptLocks,
        txn: TxnId,
        read: &[PageId],
        written: &[PageId],
    ) {
        locks.attach_to_keeper(txn, KEEPER);
        kept.begin(txn);
        for &page in read {
            locks.acquire(txn, page, LockMode::Shared).unwrap();
        }
        for &page in written {
            locks.acquire(txn, page, LockMode::Exclusive).unwrap();
        }
    }

    fn kept_pages(kept: &KeptLocks) -> Vec<(PageId, TxnId)> {
        let mut pages: Vec<_> = kept.lock().pages.iter().map(|(p, t)| (*p, *t)).collect();
        pages.sort();
        pages
    }

    #[test]
    fn a_transaction_leaves_its_shared_locks_to_the_keeper_and_a_writer_calls_them_back() {
        let (locks, kept) = with_keeper(16);
        read_and_end(&locks, &kept, TxnId(1), &[P, Q]);
        assert_eq!(kept_pages(&kept), vec![(P, TxnId(1)), (Q, TxnId(1))]);
        let shared = mode_id(LockMode::Shared);
        let kept_held = vec![(Resource::Page(P), shared), (Resource::Page(Q), shared)];
        assert_eq!(locks.held_by(Owner::keeper(KEEPER)), kept_held);
        assert_eq!(locks.held_by(Owner::top(TxnId(1))), vec![]);
        // Kept locks do not keep others from reading, nor count as another's lock.
        assert!(!locks.locked_by_other(TxnId(2), P));
        locks.acquire(TxnId(2), P, LockMode::Shared).unwrap();
        locks.release_all(TxnId(2));
        // A writer, while the session is not using the page, gets it at once.
        assert_eq!(
            locks.acquire(TxnId(3), P, LockMode::Exclusive).unwrap(),
            LockMode::Exclusive
        );
        assert_eq!(kept_pages(&kept), vec![(Q, TxnId(1))]);
        assert_eq!(locks.stats().callbacks, 1);
        assert_eq!(locks.stats().waits, 0);
        // So does a writer that never waits.
        assert!(locks.try_acquire(TxnId(3), Q, LockMode::Exclusive));
        assert!(kept.is_empty());
        locks.release_all(TxnId(3));
        assert_eq!(locks.locked_pages(), 0);
    }

    #[test]
    fn a_durable_commit_leaves_the_pages_it_wrote_to_the_keeper_but_those_the_server_changed() {
        const FREED: PageId = PageId(9);
        let (locks, kept) = with_keeper(16);
        let writer = TxnId(1);
        attached_holding(&locks, &kept, writer, &[P], &[Q, FREED]);
        locks.note_commit(writer, &[FREED]);
        locks.release_committed(writer);
        assert_eq!(kept_pages(&kept), vec![(P, writer), (Q, writer)]);
        let shared = mode_id(LockMode::Shared);
        let kept_held = vec![(Resource::Page(P), shared), (Resource::Page(Q), shared)];
        assert_eq!(locks.held_by(Owner::keeper(KEEPER)), kept_held);
        assert_eq!(locks.locked_pages(), 2, "the freed page is nobody's");
        // Written and kept, the page is called back like a page read.
        assert!(locks.try_acquire(TxnId(2), Q, LockMode::Exclusive));
        assert_eq!(kept_pages(&kept), vec![(P, writer)]);
        assert_eq!(locks.stats().callbacks, 1);
        locks.release_all(TxnId(2));
    }

    #[test]
    fn a_transaction_that_does_not_commit_leaves_no_page_it_wrote_to_the_keeper() {
        let (locks, kept) = with_keeper(16);
        let writer = TxnId(1);
        attached_holding(&locks, &kept, writer, &[P], &[Q]);
        // Its commit appended, then rolled back (the commit never became durable).
        locks.note_commit(writer, &[]);
        locks.release_all(writer);
        assert_eq!(kept_pages(&kept), vec![(P, writer)]);
        assert_eq!(locks.locked_pages(), 1, "the page it wrote is nobody's");
    }

    #[test]
    fn a_writer_waits_for_the_end_of_the_transaction_using_a_kept_lock() {
        let (locks, kept) = with_keeper(16);
        read_and_end(&locks, &kept, TxnId(1), &[P]);
        let reader = TxnId(2);
        attached_holding(&locks, &kept, reader, &[], &[]);
        assert!(kept.use_page(reader, P, Some(TxnId(1))));
        assert!(!locks.try_acquire(TxnId(3), P, LockMode::Exclusive));
        let writer = {
            let locks = locks.clone();
            std::thread::spawn(move || locks.acquire(TxnId(3), P, LockMode::Exclusive))
        };
        until_waiting(&locks, 1);
        assert_eq!(kept_pages(&kept), vec![(P, TxnId(1))]);
        locks.release_all(reader);
        assert_eq!(writer.join().unwrap().unwrap(), LockMode::Exclusive);
        assert!(kept.is_empty());
        assert!(kept.lock().in_use.is_empty());
        assert_eq!(kept.lock().active, None);
        locks.release_all(TxnId(3));
    }

    #[test]
    fn a_kept_page_read_again_is_kept_for_the_copy_validated_last() {
        let (locks, kept) = with_keeper(16);
        read_and_end(&locks, &kept, TxnId(1), &[P]);
        attached_holding(&locks, &kept, TxnId(2), &[], &[]);
        assert!(kept.use_page(TxnId(2), P, Some(TxnId(1))));
        locks.release_all(TxnId(2));
        assert_eq!(kept_pages(&kept), vec![(P, TxnId(2))]);
    }

    #[test]
    fn a_deadlock_through_a_kept_lock_is_found() {
        let (locks, kept) = with_keeper(16);
        read_and_end(&locks, &kept, TxnId(1), &[P]);
        let (reader, writer) = (TxnId(2), TxnId(3));
        attached_holding(&locks, &kept, reader, &[], &[]);
        assert!(kept.use_page(reader, P, Some(TxnId(1))));
        locks.acquire(writer, Q, LockMode::Exclusive).unwrap();
        let blocked_reader = {
            let locks = locks.clone();
            std::thread::spawn(move || locks.acquire(reader, Q, LockMode::Shared))
        };
        until_waiting(&locks, 1);
        // The writer waiting for the reader's kept page closes the cycle.
        let result = locks.acquire(writer, P, LockMode::Exclusive);
        assert!(matches!(result, Err(Error::Deadlock { page }) if page == P));
        locks.release_all(writer);
        assert_eq!(blocked_reader.join().unwrap().unwrap(), LockMode::Shared);
        locks.release_all(reader);
        assert_eq!(kept_pages(&kept), vec![(P, reader), (Q, reader)]);
    }

    #[test]
    fn a_page_the_keeping_transaction_writes_is_kept_no_longer() {
        let (locks, kept) = with_keeper(16);
        read_and_end(&locks, &kept, TxnId(1), &[P, Q]);
        let txn = TxnId(2);
        attached_holding(&locks, &kept, txn, &[], &[]);
        // Writing a kept page it is using: its own lock does not stand in the way.
        assert!(kept.use_page(txn, P, Some(TxnId(1))));
        assert_eq!(
            locks.acquire(txn, P, LockMode::Exclusive).unwrap(),
            LockMode::Exclusive
        );
        // Writing one it is not using calls the kept lock back.
        assert!(locks.try_acquire(txn, Q, LockMode::Exclusive));
        assert!(!kept.lock().pages.contains_key(&Q));
        locks.release_all(txn);
        assert!(kept.is_empty());
        assert_eq!(locks.locked_pages(), 0);
    }

    #[test]
    fn kept_locks_stay_within_the_limit_and_go_with_the_keeper() {
        let (locks, kept) = with_keeper(2);
        read_and_end(&locks, &kept, TxnId(1), &[P]);
        read_and_end(&locks, &kept, TxnId(2), &[PageId(1), PageId(2), PageId(3)]);
        assert!(kept.len() <= 2, "{:?}", kept_pages(&kept));
        assert_eq!(locks.locked_pages(), kept.len());
        // A transaction still attached when the keeper goes releases its locks at its end.
        attached_holding(&locks, &kept, TxnId(3), &[], &[]);
        locks.acquire(TxnId(3), Q, LockMode::Shared).unwrap();
        locks.forget_keeper(KEEPER);
        assert!(kept.is_empty());
        assert_eq!(locks.locked_pages(), 1);
        locks.release_all(TxnId(3));
        assert_eq!(locks.locked_pages(), 0);
        // Nothing is kept for a keeper not registered.
        read_and_end(&locks, &kept, TxnId(4), &[P]);
        assert_eq!(locks.locked_pages(), 0);
    }
}
