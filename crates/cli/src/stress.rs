//! `lodestore stress`: bank transfers between accounts from several threads, each acknowledged
//! in a file only after its commit returned, for kill -9 tests.
//!
//! Layout, readable from `lodestore dump --json`: the root `bank` is an object of N unsigned
//! 64-bit little-endian OIDs, one per account in order; an account is 16 bytes, a signed 64-bit
//! balance then an unsigned 64-bit count of the transfers it took part in, both little-endian.
//! Every account starts with balance 1000, so the total is 1000 N forever.

use bytemuck::{Pod, Zeroable};
use lodestore::multilevel::{AddFields, Strategy};
use lodestore::{Error, Oid, Options, Persistent, RawOid, Result, Store};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::fs::OpenOptions;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub const BANK_ROOT: &str = "bank";
const BANK_TYPE: u32 = 1000;
pub const INITIAL_BALANCE: i64 = 1000;
/// Attempts of one transfer before the thread gives up on it (deadlocks, timeouts).
const RETRIES_MAX: u32 = 100;

#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub struct Account {
    pub balance: i64,
    pub transfers: u64,
}

impl Persistent for Account {
    const TYPE_ID: u32 = 1001;
}

/// What a stress run does.
pub struct Workload<'a> {
    pub accounts: u64,
    pub threads: u32,
    pub seconds: f64,
    /// Where acknowledged transfers are appended.
    pub acks: &'a Path,
    /// Transfers as multi-level transactions (else flat ones), run by `strategy` or, without
    /// one, by the store's.
    pub semantic: bool,
    pub strategy: Option<Strategy>,
    /// The store's record bound between checkpoints (`Options::checkpoint_log_records`),
    /// else its default; embedded stores only.
    pub checkpoint_records: Option<u64>,
}

pub fn run(
    path: Option<&Path>,
    connect: Option<&str>,
    security: &crate::security::ClientSecurityArgs,
    workload: Workload<'_>,
) -> Result<ExitCode> {
    let Workload {
        accounts,
        threads,
        seconds,
        acks,
        semantic,
        strategy,
        checkpoint_records,
    } = workload;
    if accounts < 2 || threads == 0 || seconds.is_nan() || seconds < 0.0 {
        return Err(Error::InvalidArgument(
            "stress needs at least 2 accounts, 1 thread and a non-negative duration".into(),
        ));
    }
    let store = match (path, connect) {
        (_, Some(address)) => {
            let credentials = security.credentials()?;
            let mut options = Options::new();
            if let Some(token) = credentials.token {
                options = options.token(token);
            }
            if let Some(tls) = credentials.tls {
                options = options.tls(tls);
            }
            Store::connect(address, options)?
        }
        (Some(path), None) => {
            let mut options = Options::new();
            if let Some(records) = checkpoint_records {
                options = options.checkpoint_log_records(records);
            }
            Store::open_or_create(path, options)?
        }
        (None, None) => {
            return Err(Error::InvalidArgument(
                "stress needs a store folder PATH or --connect ADDRESS".into(),
            ))
        }
    };
    let semantic = semantic.then(|| strategy.unwrap_or_else(|| store.multi_level_strategy()));
    let oids = open_bank(&store, accounts)?;
    let acks = OpenOptions::new()
        .create(true)
        .append(true)
        .open(acks)
        .map_err(|e| Error::io(acks, "open", e))?;
    let acks = Mutex::new(acks);
    let counts = transfers(&store, &oids, threads, seconds, semantic, Some(&acks))?;
    let how = match semantic {
        Some(strategy) => format!("multi-level transactions, {strategy}"),
        None => "flat transactions, page locks".to_string(),
    };
    println!(
        "{} transfers committed by {threads} threads in {seconds} s ({how}; {} retried after deadlocks or timeouts)",
        counts.committed, counts.retried
    );
    Ok(ExitCode::SUCCESS)
}

/// What a run of transfers did.
#[derive(Clone, Copy, Debug, Default)]
pub struct Transfers {
    pub committed: u64,
    /// Attempts that lost a lock conflict and ran again.
    pub retried: u64,
}

/// Transfers between random pairs of `oids` from `threads` sessions for `seconds`, each
/// appended to `acks` (when given) once its commit returned.
pub fn transfers(
    store: &Store,
    oids: &[Oid<Account>],
    threads: u32,
    seconds: f64,
    semantic: Option<Strategy>,
    acks: Option<&Mutex<std::fs::File>>,
) -> Result<Transfers> {
    let committed = AtomicU64::new(0);
    let retried = AtomicU64::new(0);
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (committed, retried) = (&committed, &retried);
                scope.spawn(move || -> Result<()> {
                    let mut rng =
                        StdRng::seed_from_u64(std::process::id() as u64 * 1000 + t as u64);
                    let mut session = store.session()?;
                    while Instant::now() < deadline {
                        let from = rng.random_range(0..oids.len());
                        let mut to = rng.random_range(0..oids.len() - 1);
                        if to >= from {
                            to += 1;
                        }
                        let amount = rng.random_range(1..=100);
                        let mut attempts = 0;
                        loop {
                            let done = match semantic {
                                Some(strategy) => transfer_semantic(
                                    &mut session,
                                    strategy,
                                    oids[from],
                                    oids[to],
                                    amount,
                                ),
                                None => transfer(&mut session, oids[from], oids[to], amount),
                            };
                            match done {
                                Ok(lsn) => {
                                    if let Some(acks) = acks {
                                        let line = format!("{lsn} {from} {to}\n");
                                        let mut file =
                                            acks.lock().unwrap_or_else(|e| e.into_inner());
                                        file.write_all(line.as_bytes())
                                            .map_err(|e| Error::io("acks file", "write", e))?;
                                    }
                                    committed.fetch_add(1, Ordering::Relaxed);
                                    break;
                                }
                                Err(e) if e.is_retryable() && attempts < RETRIES_MAX => {
                                    attempts += 1;
                                    retried.fetch_add(1, Ordering::Relaxed);
                                }
                                Err(e) => return Err(e),
                            }
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("stress thread panicked"))
            .collect::<Result<Vec<()>>>()
    })?;
    Ok(Transfers {
        committed: committed.load(Ordering::Relaxed),
        retried: retried.load(Ordering::Relaxed),
    })
}

/// One transfer in its own transaction; the commit LSN numbers it.
fn transfer(
    session: &mut lodestore::Session,
    from: Oid<Account>,
    to: Oid<Account>,
    amount: i64,
) -> Result<u64> {
    let mut txn = session.begin()?;
    let source = txn.get_mut(from)?;
    source.balance -= amount;
    source.transfers += 1;
    let target = txn.get_mut(to)?;
    target.balance += amount;
    target.transfers += 1;
    Ok(txn.commit()?.0)
}

/// One transfer as a multi-level transaction: one operation of commuting increments of the
/// two accounts' balances and counts, a subtransaction under increment locks on both.
fn transfer_semantic(
    session: &mut lodestore::Session,
    strategy: Strategy,
    from: Oid<Account>,
    to: Oid<Account>,
    amount: i64,
) -> Result<u64> {
    let mut txn = session.begin_multi_level_with(strategy)?;
    let (from, to) = (from.raw(), to.raw());
    txn.apply(&AddFields {
        fields: vec![
            (from, BALANCE_OFFSET, -amount),
            (from, TRANSFERS_OFFSET, 1),
            (to, BALANCE_OFFSET, amount),
            (to, TRANSFERS_OFFSET, 1),
        ],
    })?;
    Ok(txn.commit()?.0)
}

/// Where an account's fields are.
const BALANCE_OFFSET: u32 = std::mem::offset_of!(Account, balance) as u32;
const TRANSFERS_OFFSET: u32 = std::mem::offset_of!(Account, transfers) as u32;

/// The accounts of the bank in `store`, created with `accounts` accounts if there is none.
pub fn open_bank(store: &Store, accounts: u64) -> Result<Vec<Oid<Account>>> {
    let mut session = store.session()?;
    let mut txn = session.begin()?;
    if let Some(bank) = txn.root(BANK_ROOT)? {
        let bytes = txn.read_all(bank)?;
        return Ok(bytes
            .chunks_exact(8)
            .map(|c| Oid::from_raw(RawOid(u64::from_le_bytes(c.try_into().expect("8 bytes")))))
            .collect());
    }
    let mut oids = Vec::with_capacity(accounts as usize);
    let mut raw = Vec::with_capacity(accounts as usize * 8);
    for _ in 0..accounts {
        let oid = txn.alloc(&Account {
            balance: INITIAL_BALANCE,
            transfers: 0,
        })?;
        raw.extend_from_slice(&oid.raw().0.to_le_bytes());
        oids.push(oid);
    }
    let bank = txn.alloc_bytes(BANK_TYPE, &raw)?;
    txn.set_root(BANK_ROOT, bank)?;
    txn.commit()?;
    Ok(oids)
}
