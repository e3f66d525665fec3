//! `lodestore stress`: bank transfers between accounts from several threads, each acknowledged
//! in a file only after its commit returned, for kill -9 tests.
//!
//! Layout, readable from `lodestore dump --json`: the root `bank` is an object of N unsigned
//! 64-bit little-endian OIDs, one per account in order; an account is 16 bytes, a signed 64-bit
//! balance then an unsigned 64-bit count of the transfers it took part in, both little-endian.
//! Every account starts with balance 1000, so the total is 1000 N forever.

use bytemuck::{Pod, Zeroable};
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

pub fn run(
    path: Option<&Path>,
    connect: Option<&str>,
    security: &crate::security::ClientSecurityArgs,
    accounts: u64,
    threads: u32,
    seconds: f64,
    acks: &Path,
) -> Result<ExitCode> {
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
        (Some(path), None) => Store::open_or_create(path, Options::new())?,
        (None, None) => {
            return Err(Error::InvalidArgument(
                "stress needs a store folder PATH or --connect ADDRESS".into(),
            ))
        }
    };
    let oids = open_bank(&store, accounts)?;
    let acks = OpenOptions::new()
        .create(true)
        .append(true)
        .open(acks)
        .map_err(|e| Error::io(acks, "open", e))?;
    let acks = Mutex::new(acks);
    let committed = AtomicU64::new(0);
    let retried = AtomicU64::new(0);
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (store, oids, acks) = (&store, &oids, &acks);
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
                            match transfer(&mut session, oids[from], oids[to], amount) {
                                Ok(lsn) => {
                                    let line = format!("{lsn} {from} {to}\n");
                                    let mut file = acks.lock().unwrap_or_else(|e| e.into_inner());
                                    file.write_all(line.as_bytes())
                                        .map_err(|e| Error::io("acks file", "write", e))?;
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
    println!(
        "{} transfers committed by {threads} threads in {seconds} s ({} retried after deadlocks or timeouts)",
        committed.load(Ordering::Relaxed),
        retried.load(Ordering::Relaxed)
    );
    Ok(ExitCode::SUCCESS)
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

/// The accounts of the bank in `store`, created with `accounts` accounts if there is none.
fn open_bank(store: &Store, accounts: u64) -> Result<Vec<Oid<Account>>> {
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
