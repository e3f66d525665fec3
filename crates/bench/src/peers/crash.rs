//! Reopen after kill -9: a child process commits durable transactions on a loaded store, each
//! writing its sequence number into one atomic part and printing the number once the commit
//! returned; the parent kills it with SIGKILL mid-stream, times reopening the store and reading
//! the part back, and checks that no acknowledged commit is lost (the part holds the last
//! number printed, or the next one if its commit finished unacknowledged).
//!
//! The write-heavy variant ([`Heavy`]) first commits many updates of atomic parts, in
//! transactions of [`HEAVY_TXN_UPDATES`], and only then the acknowledged ones: the kill then
//! leaves as much work to a restart as the store lets pile up (for Lodestore, up to its
//! checkpoint interval of log).

use super::kv::{KvAccess, Peer};
use super::objects::PeerObjects;
use super::StoreKind;
use crate::lists::typed;
use crate::oo7::schema::AtomicPart;
use crate::oo7::traverse::Traverse;
use lodestore::{Error, Oid, Options, ReadTransaction, Result, Store};
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a child may run if nobody kills it: a bound, not a setting.
pub const CHILD_LIFETIME_MAX: Duration = Duration::from_secs(120);

/// Acknowledged commits the parent waits for before the kill (or [`WAIT_MAX`]).
pub const ACKS_BEFORE_KILL: usize = 200;
/// Acknowledgements read ahead of the parent; past this the reader, then the child, wait.
const ACK_QUEUE_MAX: usize = 1024;
pub const WAIT_MAX: Duration = Duration::from_secs(20);
/// How long the write-heavy child's updates may take before its first acknowledgement.
pub const HEAVY_WAIT_MAX: Duration = Duration::from_secs(600);
/// Atomic-part updates per transaction of the write-heavy phase.
pub const HEAVY_TXN_UPDATES: usize = 1000;

/// The write-heavy phase: `updates` updates of the atomic parts `parts`, in turn.
#[derive(Clone, Debug)]
pub struct Heavy {
    pub updates: u64,
    pub parts: Vec<u64>,
}

impl Heavy {
    /// Writes `parts` to `path` for a child to read with [`Heavy::read_parts`].
    pub fn write_parts(path: &Path, parts: &[u64]) -> Result<()> {
        let bytes: Vec<u8> = parts.iter().flat_map(|p| p.to_le_bytes()).collect();
        std::fs::write(path, bytes).map_err(|e| Error::io(path, "write", e))
    }

    /// The parts [`Heavy::write_parts`] wrote to `path`.
    pub fn read_parts(path: &Path) -> Result<Vec<u64>> {
        let bytes = std::fs::read(path).map_err(|e| Error::io(path, "read", e))?;
        if bytes.is_empty() || !bytes.len().is_multiple_of(8) {
            return Err(Error::InvalidArgument(format!(
                "{}: {} bytes, not a list of part OIDs (8 bytes each)",
                path.display(),
                bytes.len()
            )));
        }
        Ok(bytes
            .chunks_exact(8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
            .collect())
    }

    /// The parts of each transaction of the phase, in order.
    fn transactions(&self) -> impl Iterator<Item = Vec<u64>> + '_ {
        let mut next = 0usize;
        let mut left = self.updates;
        std::iter::from_fn(move || {
            if left == 0 {
                return None;
            }
            let count = left.min(HEAVY_TXN_UPDATES as u64) as usize;
            left -= count as u64;
            let txn = (0..count)
                .map(|i| self.parts[(next + i) % self.parts.len()])
                .collect();
            next = (next + count) % self.parts.len();
            Some(txn)
        })
    }
}

/// What one kill and reopen measured.
#[derive(Clone, Copy, Debug)]
pub struct Reopened {
    /// Opening the store and reading the part, in milliseconds.
    pub reopen_ms: f64,
    pub acknowledged: u64,
    /// The sequence number found: `acknowledged` or one more.
    pub found: u64,
    /// Lodestore only: log bytes from the last checkpoint to the end, which restart read,
    /// and the restart's own time in milliseconds (within `reopen_ms`).
    pub log_replayed_bytes: Option<u64>,
    pub restart_ms: Option<f64>,
}

/// The child's side: opens the store `kind` in `dir`, commits the write-heavy phase if given,
/// then commits until killed (or [`CHILD_LIFETIME_MAX`] after its first acknowledgement), printing each
/// acknowledged sequence number on its own line.
pub fn child(kind: StoreKind, dir: &Path, part: u64, heavy: Option<&Heavy>) -> Result<()> {
    let part: Oid<AtomicPart> = typed(part);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    // The child's lifetime counts from its first acknowledgement, after the heavy phase.
    let mut started: Option<Instant> = None;
    let mut acknowledge = |n: u64| -> Result<bool> {
        writeln!(out, "{n}")
            .and_then(|_| out.flush())
            .map_err(|e| Error::io("stdout", "write", e))?;
        Ok(started.get_or_insert_with(Instant::now).elapsed() < CHILD_LIFETIME_MAX)
    };
    let heavy_transactions = || heavy.into_iter().flat_map(Heavy::transactions);
    match kind.open_peer(dir)? {
        None => {
            let store = Store::open(dir, Options::new())?;
            let mut session = store.session()?;
            for parts in heavy_transactions() {
                session.transact(|txn| {
                    for &oid in &parts {
                        let atomic = txn.get_mut(typed::<AtomicPart>(oid))?;
                        atomic.x += 1;
                        atomic.y += 1;
                    }
                    Ok(())
                })?;
            }
            let mut n = session.transact(|txn| Ok(txn.get(part)?.x as u64))?;
            loop {
                n += 1;
                session.transact(|txn| {
                    txn.get_mut(part)?.x = n as i64;
                    Ok(())
                })?;
                if !acknowledge(n)? {
                    return Ok(());
                }
            }
        }
        Some(peer) => {
            for parts in heavy_transactions() {
                peer.write(&mut |kv| {
                    let mut objects = PeerObjects::new(kv);
                    parts.iter().try_for_each(|&oid| objects.update(typed(oid)))
                })?;
            }
            let mut n = read_sequence(peer.as_ref(), part)?;
            loop {
                n += 1;
                peer.write(&mut |kv| write_sequence(kv, part, n))?;
                if !acknowledge(n)? {
                    return Ok(());
                }
            }
        }
    }
}

fn read_sequence(peer: &dyn Peer, part: Oid<AtomicPart>) -> Result<u64> {
    let mut n = 0;
    peer.read(&mut |kv| {
        n = PeerObjects::new(kv).read(part)?.x as u64;
        Ok(())
    })?;
    Ok(n)
}

fn write_sequence(kv: &mut dyn KvAccess, part: Oid<AtomicPart>, n: u64) -> Result<()> {
    let mut objects = PeerObjects::new(kv);
    let mut atomic = objects.read(part)?;
    atomic.x = n as i64;
    objects.put(part, &atomic)
}

/// The parent's side: runs `command` (which must end up in [`child`] for `kind`, `dir` and
/// `part`), kills it with SIGKILL after [`ACKS_BEFORE_KILL`] acknowledgements, reopens the
/// store and checks the part. `first_ack_within` bounds the wait for the first
/// acknowledgement ([`WAIT_MAX`], or [`HEAVY_WAIT_MAX`] after a write-heavy phase).
pub fn kill_and_reopen(
    command: &[OsString],
    kind: StoreKind,
    dir: &Path,
    part: u64,
    first_ack_within: Duration,
) -> Result<Reopened> {
    let (program, args) = command
        .split_first()
        .ok_or_else(|| Error::InvalidArgument("no command for the crash child".into()))?;
    let mut child = Command::new(program)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| Error::io(Path::new(program), "start the crash child", e))?;
    let stdout = child.stdout.take().expect("piped stdout");
    // A reader thread, so a child that stops printing cannot hold the parent past WAIT_MAX.
    let (sender, acks) = std::sync::mpsc::sync_channel::<Result<u64>>(ACK_QUEUE_MAX);
    let reader = std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout);
        let mut line = Vec::new();
        loop {
            line.clear();
            // A line cut by the kill was never acknowledged.
            match lines.read_until(b'\n', &mut line) {
                Ok(_) if line.last() == Some(&b'\n') => {}
                _ => return,
            }
            let text = String::from_utf8_lossy(&line[..line.len() - 1]).into_owned();
            let parsed = text.parse().map_err(|_| {
                Error::InvalidArgument(format!(
                    "crash child printed {text:?}, not a sequence number"
                ))
            });
            if sender.send(parsed).is_err() {
                return;
            }
        }
    });
    let mut deadline = Instant::now() + first_ack_within;
    let mut received = Vec::new();
    while received.len() < ACKS_BEFORE_KILL {
        let left = deadline.saturating_duration_since(Instant::now());
        match acks.recv_timeout(left) {
            Ok(ack) => {
                if received.is_empty() {
                    deadline = Instant::now() + WAIT_MAX;
                }
                received.push(ack)
            }
            Err(_) => break,
        }
    }
    child
        .kill()
        .map_err(|e| Error::io("crash child", "kill", e))?;
    // Lines written before the kill were acknowledged too; the reader ends at the pipe's end.
    received.extend(acks.iter());
    reader.join().expect("the crash child's reader panicked");
    let acknowledgements = received.len();
    let acknowledged = match received.into_iter().collect::<Result<Vec<u64>>>()?.last() {
        Some(&last) => last,
        None => 0,
    };
    let output = child
        .wait_with_output()
        .map_err(|e| Error::io("crash child", "wait", e))?;
    if acknowledgements == 0 {
        return Err(Error::InvalidArgument(format!(
            "{kind}: the crash child acknowledged no commit: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    let part: Oid<AtomicPart> = typed(part);
    let started = Instant::now();
    let mut restart = None;
    let (found, reopen_ms) = match kind.open_peer(dir)? {
        None => {
            let store = Store::open(dir, Options::new())?;
            let mut session = store.session()?;
            let found = session.transact(|txn| Ok(txn.get(part)?.x as u64))?;
            let reopen_ms = started.elapsed().as_secs_f64() * 1e3;
            restart = Some(store.restart_report().clone());
            drop(session);
            store.close()?;
            (found, reopen_ms)
        }
        Some(peer) => {
            let found = read_sequence(peer.as_ref(), part)?;
            (found, started.elapsed().as_secs_f64() * 1e3)
        }
    };
    let mut reopened = verdict(kind, reopen_ms, acknowledged, found)?;
    if let Some(report) = restart {
        reopened.log_replayed_bytes = Some(report.log_end.saturating_sub(report.checkpoint_lsn));
        reopened.restart_ms = Some(report.elapsed_us as f64 / 1e3);
    }
    Ok(reopened)
}

fn verdict(kind: StoreKind, reopen_ms: f64, acknowledged: u64, found: u64) -> Result<Reopened> {
    if found != acknowledged && found != acknowledged.wrapping_add(1) {
        return Err(Error::InvalidArgument(format!(
            "{kind} lost acknowledged commits: after kill -9 the part holds sequence number \
             {found}, but {acknowledged} was acknowledged"
        )));
    }
    Ok(Reopened {
        reopen_ms,
        acknowledged,
        found,
        log_replayed_bytes: None,
        restart_ms: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heavy_phase_cycles_through_the_parts_in_transactions_of_a_thousand() {
        let heavy = Heavy {
            updates: 2_500,
            parts: (10..1_510).collect(),
        };
        let txns: Vec<Vec<u64>> = heavy.transactions().collect();
        assert_eq!(
            txns.iter().map(Vec::len).collect::<Vec<_>>(),
            [1000, 1000, 500]
        );
        assert_eq!(txns[0][0], 10);
        assert_eq!(txns[1][0], 1010);
        // The second transaction runs past the last part and starts again from the first.
        assert_eq!(txns[1][500], 10);
        assert_eq!(txns[2][0], 510);
        let none = Heavy {
            updates: 0,
            parts: vec![1],
        };
        assert_eq!(none.transactions().count(), 0);
    }

    #[test]
    fn a_parts_file_round_trips_and_a_damaged_one_is_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("parts");
        Heavy::write_parts(&path, &[7, u64::MAX, 0]).unwrap();
        assert_eq!(Heavy::read_parts(&path).unwrap(), [7, u64::MAX, 0]);
        std::fs::write(&path, [1u8; 12]).unwrap();
        let error = Heavy::read_parts(&path).unwrap_err().to_string();
        assert!(
            error.contains("parts") && error.contains("12 bytes"),
            "{error}"
        );
        std::fs::write(&path, []).unwrap();
        assert!(Heavy::read_parts(&path).is_err());
        assert!(Heavy::read_parts(&dir.path().join("missing")).is_err());
    }

    #[test]
    fn a_lost_acknowledged_commit_is_an_error_and_one_unacknowledged_is_not() {
        assert_eq!(verdict(StoreKind::Lmdb, 1.0, 40, 40).unwrap().found, 40);
        assert_eq!(verdict(StoreKind::Lmdb, 1.0, 40, 41).unwrap().found, 41);
        let lost = verdict(StoreKind::Redb, 1.0, 40, 39)
            .unwrap_err()
            .to_string();
        assert!(lost.contains("redb lost acknowledged commits"), "{lost}");
        assert!(verdict(StoreKind::Redb, 1.0, 40, 42).is_err());
        // Sequence numbers start from a part's field, which may be negative.
        assert!(verdict(StoreKind::Sqlite, 1.0, u64::MAX, 0).is_ok());
    }
}
