//! The workload of one crash point with several sessions at once. Each session runs on a
//! thread of its own, but only one runs at a time: a session gives the turn back after every
//! step (begin, one operation, the commit's append, the wait for its durability) and the
//! seeded scheduler picks who goes next, so a seed replays the same interleaving and the same
//! I/O. Commits are deferred: a session appends its commit and gives up the turn, so others run
//! and append theirs before anyone waits, and a crash cuts several commits at once.
//!
//! Locks are not waited for (a waiting session would hold the only turn): a conflict is a
//! retryable error, and the transaction is aborted.

use crate::collection::{self, Map};
use crate::oracle::{apply, delta_between, IN_FLIGHT_MAX};
use crate::workload::{Reserved, Stop, OBJECTS_MAX, OPERATIONS_MAX, TRANSACTIONS_MAX, TYPE_ID};
use crate::{CampaignReport, Delta, Model, Subject};
use lodestore::{Error, RawOid, Store, Transaction};
use lodestore_storage::SimFileSystem;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::{Condvar, Mutex, MutexGuard};

/// Sessions a campaign may run at once.
pub const SESSIONS_MAX: usize = 8;
const _: () = assert!(SESSIONS_MAX <= IN_FLIGHT_MAX);

/// A session closes and another opens in its place before one transaction in this many.
const REOPEN_ONE_IN: u32 = 4;

/// What the sessions share: the model and the commits in flight.
struct Shared {
    /// Acknowledged commits, applied in the order they were acknowledged.
    committed: Model,
    /// Commits appended but not acknowledged, by the order they were appended.
    in_flight: Vec<(u64, Delta)>,
    next_ticket: u64,
    acknowledged: u64,
    aborts: u64,
    collection_steps: u64,
    objects_reserved: u64,
    reserved_fills: u64,
    violation: Option<String>,
}

/// Whose turn it is.
struct Turns {
    state: Mutex<TurnState>,
    changed: Condvar,
}

struct TurnState {
    running: Option<usize>,
    finished: Vec<bool>,
}

impl Turns {
    fn lock(&self) -> MutexGuard<'_, TurnState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The scheduler: lets session `i` take one step and waits until it gives the turn back.
    fn run(&self, i: usize) {
        let mut state = self.lock();
        debug_assert!(state.running.is_none() && !state.finished[i]);
        state.running = Some(i);
        self.changed.notify_all();
        while state.running.is_some() {
            state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// A session: waits for its turn.
    fn wait_for(&self, i: usize) {
        let mut state = self.lock();
        while state.running != Some(i) {
            state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// A session: ends its step, and with `finished` its last one.
    fn hand_back(&self, i: usize, finished: bool) {
        let mut state = self.lock();
        debug_assert_eq!(state.running, Some(i));
        state.finished[i] |= finished;
        state.running = None;
        self.changed.notify_all();
    }

    fn unfinished(&self) -> Vec<usize> {
        let state = self.lock();
        (0..state.finished.len())
            .filter(|&i| !state.finished[i])
            .collect()
    }
}

/// Hands the turn back for good when a session ends, even by a panic, so that the scheduler
/// is never left waiting.
struct LastTurn<'a> {
    turns: &'a Turns,
    session: usize,
}

impl Drop for LastTurn<'_> {
    fn drop(&mut self) {
        self.turns.hand_back(self.session, true);
    }
}

/// What a session thread works with.
struct Context<'a> {
    store: &'a Store,
    fs: &'a SimFileSystem,
    shared: &'a Mutex<Shared>,
    turns: &'a Turns,
    session: usize,
    /// The collection the sessions change, with collections on.
    map: Option<Map>,
    /// Print every step (`LODESTORE_TORTURE_TRACE_STEPS=N`: from crash point N on).
    trace: bool,
}

impl Context<'_> {
    fn trace(&self, what: std::fmt::Arguments<'_>) {
        if self.trace {
            let crashed = if self.fs.has_crashed() {
                " (crashed)"
            } else {
                ""
            };
            eprintln!("  session {}: {what}{crashed}", self.session);
        }
    }

    fn shared(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Ends this step: another session may run before the next one.
    fn step(&self) {
        self.turns.hand_back(self.session, false);
        self.turns.wait_for(self.session);
    }

    fn classify(&self, error: Error) -> Result<Stop, String> {
        if self.fs.has_crashed() {
            Ok(Stop::Crashed)
        } else if error.is_retryable() {
            Ok(Stop::Retry)
        } else {
            Err(format!(
                "session {}: operation failed without a crash: {error}",
                self.session
            ))
        }
    }
}

/// Runs `sessions` sessions, interleaved from `rng`, until the crash or their end.
pub fn run(
    store: &Store,
    subject: &mut Subject,
    rng: &mut StdRng,
    report: &mut CampaignReport,
    sessions: usize,
) -> Result<(), String> {
    assert!(
        (1..=SESSIONS_MAX).contains(&sessions),
        "{sessions} sessions"
    );
    let shared = Mutex::new(Shared {
        committed: std::mem::take(&mut subject.committed),
        in_flight: Vec::new(),
        next_ticket: 0,
        acknowledged: 0,
        aborts: 0,
        collection_steps: 0,
        objects_reserved: 0,
        reserved_fills: 0,
        violation: None,
    });
    let turns = Turns {
        state: Mutex::new(TurnState {
            running: None,
            finished: vec![false; sessions],
        }),
        changed: Condvar::new(),
    };
    let seeds: Vec<u64> = (0..sessions).map(|_| rng.random()).collect();
    let trace = std::env::var("LODESTORE_TORTURE_TRACE_STEPS")
        .ok()
        .and_then(|from| from.parse::<u64>().ok())
        .is_some_and(|from| report.crashes >= from);
    if trace {
        eprintln!("crash point {}: {sessions} sessions", report.crashes);
    }
    let fs: &SimFileSystem = subject.fs.as_ref();
    std::thread::scope(|scope| {
        for (session, seed) in seeds.into_iter().enumerate() {
            let context = Context {
                store,
                fs,
                shared: &shared,
                turns: &turns,
                session,
                map: subject.map,
                trace,
            };
            scope.spawn(move || {
                context.turns.wait_for(session);
                let _last = LastTurn {
                    turns: context.turns,
                    session,
                };
                let mut rng = StdRng::seed_from_u64(seed);
                if let Err(message) = session_program(&context, &mut rng) {
                    context.shared().violation.get_or_insert(message);
                }
            });
        }
        loop {
            let unfinished = turns.unfinished();
            if unfinished.is_empty() {
                break;
            }
            turns.run(unfinished[rng.random_range(0..unfinished.len())]);
        }
    });
    let shared = shared.into_inner().unwrap_or_else(|e| e.into_inner());
    subject.committed = shared.committed;
    subject.in_flight = shared.in_flight.into_iter().map(|(_, d)| d).collect();
    report.commits_acknowledged += shared.acknowledged;
    report.aborts += shared.aborts;
    report.collection_steps += shared.collection_steps;
    report.objects_reserved += shared.objects_reserved;
    report.reserved_fills += shared.reserved_fills;
    match shared.violation {
        Some(message) => Err(message),
        None => Ok(()),
    }
}

/// One session's transactions. Returns early, without error, when the machine dies.
fn session_program(context: &Context<'_>, rng: &mut StdRng) -> Result<(), String> {
    let mut session = match context.store.session() {
        Ok(session) => session,
        Err(e) => return context.classify(e).map(|_| ()),
    };
    let mut reserved = match crate::workload::reserve(&mut session, rng) {
        Ok(reserved) => reserved,
        Err(e) => return context.classify(e).map(|_| ()),
    };
    if let Some(reserved) = &reserved {
        context.trace(format_args!("reserved {} objects", reserved.count()));
        context.shared().objects_reserved += reserved.count() as u64;
    }
    for _ in 0..rng.random_range(1..=TRANSACTIONS_MAX) {
        // Now and then the session closes and another opens in its place, taking a closed
        // session's cache with its pages (stale ones among them, which it must validate).
        if reserved.is_none() && rng.random_range(0..REOPEN_ONE_IN) == 0 {
            drop(session);
            context.trace(format_args!("session closed and opened again"));
            session = match context.store.session() {
                Ok(session) => session,
                Err(e) => return context.classify(e).map(|_| ()),
            };
        }
        context.step();
        if let Some(reserved) = &mut reserved {
            reserved.begin();
        }
        let mut txn = match session.begin() {
            Ok(txn) => {
                context.trace(format_args!("begin"));
                txn
            }
            Err(e) => match context.classify(e)? {
                Stop::Crashed => return Ok(()),
                Stop::Retry => continue,
            },
        };
        let mut delta = Delta::new();
        let mut stopped = None;
        for _ in 0..rng.random_range(1..=OPERATIONS_MAX) {
            context.step();
            if let Err(e) = operation(context, &mut txn, &mut delta, reserved.as_mut(), rng) {
                context.trace(format_args!("stopped: {e}"));
                stopped = Some(context.classify(e)?);
                break;
            }
        }
        match stopped {
            Some(Stop::Crashed) => return Ok(()),
            Some(Stop::Retry) => {
                let _ = txn.abort();
                context.shared().aborts += 1;
                continue;
            }
            None => {}
        }
        context.step();
        if rng.random_range(0..5) == 0 {
            context.trace(format_args!("abort"));
            match txn.abort() {
                Ok(()) => context.shared().aborts += 1,
                Err(e) => {
                    if let Stop::Crashed = context.classify(e)? {
                        return Ok(());
                    }
                }
            }
            continue;
        }
        let ticket = {
            let mut shared = context.shared();
            shared.next_ticket += 1;
            shared.next_ticket
        };
        let pending = match txn.commit_deferred() {
            Ok(pending) => pending,
            Err(e) if context.fs.has_crashed() => {
                context.trace(format_args!("commit failed: {e}"));
                // Perhaps appended before the machine died: in flight.
                context.shared().in_flight.push((ticket, delta));
                return Ok(());
            }
            Err(e) => {
                return Err(format!(
                    "session {}: commit failed without a crash: {e}",
                    context.session
                ))
            }
        };
        context.trace(format_args!("commit appended at {}", pending.lsn()));
        // The server ended the transaction at the append: its reserved pages are ordinary.
        if let Some(reserved) = &mut reserved {
            reserved.committed();
        }
        context.shared().in_flight.push((ticket, delta));
        // Others run (and append their commits) while this one waits to be flushed.
        context.step();
        match pending.wait() {
            Ok(_) => {
                let mut shared = context.shared();
                let at = shared
                    .in_flight
                    .iter()
                    .position(|(t, _)| *t == ticket)
                    .expect("an appended commit is in flight until acknowledged");
                let (_, delta) = shared.in_flight.remove(at);
                apply(&mut shared.committed, &delta);
                shared.acknowledged += 1;
                drop(shared);
                context.trace(format_args!("commit acknowledged"));
            }
            Err(e) if context.fs.has_crashed() => {
                context.trace(format_args!("wait failed: {e}"));
                return Ok(());
            }
            Err(e) => {
                return Err(format!(
                    "session {}: waiting for a commit failed without a crash: {e}",
                    context.session
                ))
            }
        }
    }
    context.step();
    drop(session);
    Ok(())
}

/// The objects the transaction sees: acknowledged commits overlaid with its own changes
/// (without the collection's entries).
fn visible(committed: &Model, delta: &Delta) -> Vec<RawOid> {
    let mut oids: Vec<RawOid> = committed
        .keys()
        .filter(|oid| !collection::is_pseudo(**oid))
        .filter(|oid| !matches!(delta.get(oid), Some(None)))
        .copied()
        .collect();
    oids.extend(
        delta
            .iter()
            .filter(|(oid, bytes)| {
                !collection::is_pseudo(**oid) && bytes.is_some() && !committed.contains_key(oid)
            })
            .map(|(oid, _)| *oid),
    );
    oids
}

/// A step on the collection: run on the entries the transaction sees (acknowledged ones
/// overlaid with its own changes), and what it changed folded into the transaction's delta.
fn collection_step(
    txn: &mut Transaction<'_>,
    map: Map,
    committed: &Model,
    delta: &mut Delta,
    rng: &mut StdRng,
) -> lodestore::Result<()> {
    let mut view = collection::of_model(committed);
    for (oid, bytes) in delta.iter().filter(|(oid, _)| collection::is_pseudo(**oid)) {
        match bytes {
            Some(bytes) => view.insert(*oid, bytes.clone()),
            None => view.remove(oid),
        };
    }
    let before = view.clone();
    collection::step(txn, map, &mut view, rng)?;
    for (oid, change) in delta_between(&before, &view) {
        match change {
            Some(bytes) => {
                delta.insert(oid, Some(bytes));
            }
            None if committed.contains_key(&oid) => {
                delta.insert(oid, None);
            }
            // Inserted by this transaction and removed again: no trace.
            None => {
                delta.remove(&oid);
            }
        }
    }
    Ok(())
}

fn current(committed: &Model, delta: &Delta, oid: RawOid) -> Vec<u8> {
    match delta.get(&oid) {
        Some(Some(bytes)) => bytes.clone(),
        Some(None) => unreachable!("a freed object is not visible"),
        None => committed[&oid].clone(),
    }
}

/// One operation of the session's transaction: allocate, free, update or read an object.
fn operation(
    context: &Context<'_>,
    txn: &mut Transaction<'_>,
    delta: &mut Delta,
    reserved: Option<&mut Reserved>,
    rng: &mut StdRng,
) -> lodestore::Result<()> {
    let mut shared = context.shared();
    if let Some(reserved) = reserved {
        if rng.random_range(0..4) == 0 {
            shared.reserved_fills += 1;
            return fill_reserved(context, txn, &shared.committed, delta, reserved, rng);
        }
    }
    if let Some(map) = context.map {
        if rng.random_range(0..3) == 0 {
            shared.collection_steps += 1;
            context.trace(format_args!("collection step"));
            return collection_step(txn, map, &shared.committed, delta, rng);
        }
    }
    let oids = visible(&shared.committed, delta);
    let picked = (!oids.is_empty()).then(|| oids[rng.random_range(0..oids.len())]);
    let crowded = oids.len() >= OBJECTS_MAX;
    match rng.random_range(0..100) {
        0..40 if !crowded => {
            let size = if rng.random_range(0..12) == 0 {
                rng.random_range(5_000..30_000)
            } else {
                rng.random_range(1..400)
            };
            let bytes: Vec<u8> = (0..size).map(|_| rng.random()).collect();
            let oid = txn.alloc_bytes(TYPE_ID, &bytes)?;
            context.trace(format_args!("alloc {oid} ({size} bytes)"));
            delta.insert(oid, Some(bytes));
        }
        0..55 => {
            if let Some(oid) = picked {
                context.trace(format_args!("free {oid}"));
                txn.free(oid)?;
                if shared.committed.contains_key(&oid) {
                    delta.insert(oid, None);
                } else {
                    // Allocated by this transaction: no trace of it is left.
                    delta.remove(&oid);
                }
            }
        }
        55..90 => {
            if let Some(oid) = picked {
                let mut bytes = current(&shared.committed, delta, oid);
                let start = rng.random_range(0..bytes.len());
                let end = rng.random_range(start..=bytes.len().min(start + 3000));
                let patch: Vec<u8> = (start..end).map(|_| rng.random()).collect();
                context.trace(format_args!("write {oid} {start}..{end}"));
                txn.write_at(oid, start as u64, &patch)?;
                // An empty write changes nothing and takes no lock: another session may free
                // the object meanwhile, so it must not enter the delta.
                if !patch.is_empty() {
                    bytes[start..end].copy_from_slice(&patch);
                    delta.insert(oid, Some(bytes));
                }
            }
        }
        _ => {
            if let Some(oid) = picked {
                context.trace(format_args!("read {oid}"));
                let stored = txn.read_all(oid)?;
                if stored != current(&shared.committed, delta, oid) {
                    return Err(Error::InvalidArgument(format!(
                        "session {}: object {oid} reads back other bytes than committed and \
                         written",
                        context.session
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Fills one of the session's reserved objects (see `workload::fill_reserved`), the first
/// fill of a page bringing every reserved object of it into being, zero-filled.
fn fill_reserved(
    context: &Context<'_>,
    txn: &mut Transaction<'_>,
    committed: &Model,
    delta: &mut Delta,
    reserved: &mut Reserved,
    rng: &mut StdRng,
) -> lodestore::Result<()> {
    let may_format = visible(committed, delta).len() < OBJECTS_MAX;
    let Some((oid, page_objects)) = reserved.pick(rng, may_format) else {
        return Ok(());
    };
    if page_objects.is_empty() {
        // Formatted already: an ordinary write, if the object is still there at that size.
        let there = match delta.get(&oid) {
            Some(Some(bytes)) => Some(bytes.len()),
            Some(None) => None,
            None => committed.get(&oid).map(Vec::len),
        };
        if there != Some(reserved.object_len()) {
            return Ok(());
        }
    }
    for other in page_objects {
        delta.insert(other, Some(vec![0; reserved.object_len()]));
    }
    let bytes: Vec<u8> = (0..reserved.object_len()).map(|_| rng.random()).collect();
    context.trace(format_args!("fill {oid}"));
    txn.fill_bytes(oid, &bytes)?;
    delta.insert(oid, Some(bytes));
    Ok(())
}
