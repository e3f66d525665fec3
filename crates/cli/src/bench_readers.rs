//! `lodestore bench readers`: what a long reader costs writers. Two writer threads move units
//! between accounts of a `BTreeMap` (durable commits) for a fixed time, three ways in turn: alone;
//! next to a reader that scans every account again and again inside one `read_latest` (no
//! locks, one snapshot); and next to the same reader in an ordinary transaction, which takes
//! shared locks and holds them to its end, and starts again when chosen as a deadlock victim.
//! Prints writers' commits per second (and as a ratio to the writers alone), the reader's scans
//! and restarts (medians of the runs).

use crate::bench::{median, remove_store};
use lodestore::{BTreeMap, Error, Options, Result, Store};
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ACCOUNTS: u64 = 20_000;
const WRITERS: u64 = 2;
const MODES: [&str; 3] = ["writers alone", "lock-free reader", "locking reader"];

pub fn readers(path: &Path, seconds: f64, runs: usize) -> Result<ExitCode> {
    if seconds.is_nan() || seconds <= 0.0 {
        return Err(Error::InvalidArgument(
            "bench readers: --seconds must be a positive number of seconds".into(),
        ));
    }
    std::fs::create_dir_all(path).map_err(|e| Error::io(path, "create folder", e))?;
    let mut commits: Vec<Vec<f64>> = vec![Vec::new(); MODES.len()];
    let mut scans: Vec<Vec<f64>> = vec![Vec::new(); MODES.len()];
    let mut restarts: Vec<Vec<f64>> = vec![Vec::new(); MODES.len()];
    for run in 0..runs {
        for (mode, name) in MODES.iter().enumerate() {
            let dir = path.join("bench-readers");
            remove_store(&dir)?;
            let (rate, scanned, restarted) = measure(&dir, mode, Duration::from_secs_f64(seconds))?;
            remove_store(&dir)?;
            eprintln!(
                "run {}: {name:<17} writers {rate:>8.0} commits/s, reader {scanned} scans, \
                 {restarted} restarts",
                run + 1
            );
            commits[mode].push(rate);
            scans[mode].push(scanned as f64);
            restarts[mode].push(restarted as f64);
        }
    }
    let alone = median(commits[0].clone());
    println!(
        "{WRITERS} writers moving units between {ACCOUNTS} accounts (durable commits), {seconds} s \
         per mode; medians of {runs} runs"
    );
    println!("mode               writer commits/s  x alone  reader scans  reader restarts");
    for (mode, name) in MODES.iter().enumerate() {
        let rate = median(commits[mode].clone());
        println!(
            "{name:<18} {rate:>17.0} {:>8.2} {:>13.0} {:>16.0}",
            rate / alone,
            median(scans[mode].clone()),
            median(restarts[mode].clone())
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Writers' commits per second, the reader's full scans and its restarts (as a deadlock victim
/// or after a lock timeout) in one window of `mode`.
fn measure(dir: &Path, mode: usize, window: Duration) -> Result<(f64, u64, u64)> {
    let store = Arc::new(Store::create(dir, Options::new().snapshots(true))?);
    let accounts = {
        let mut session = store.session()?;
        let mut txn = session.begin()?;
        let accounts: BTreeMap<u64, u64> = BTreeMap::create(&mut txn)?;
        for a in 0..ACCOUNTS {
            accounts.insert(&mut txn, &a, &1_000)?;
        }
        txn.commit()?;
        accounts
    };
    let stop = Arc::new(AtomicBool::new(false));
    let commits = Arc::new(AtomicU64::new(0));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (store, stop, commits) = (store.clone(), stop.clone(), commits.clone());
            std::thread::spawn(move || -> Result<()> {
                let mut session = store.session()?;
                let mut i = w;
                while !stop.load(Ordering::Relaxed) {
                    let (from, to) = ((i * 7_919) % ACCOUNTS, (i * 104_729 + 1) % ACCOUNTS);
                    i += WRITERS;
                    let moved = session.transact(|txn| {
                        let a = accounts.get(txn, &from)?.unwrap_or(0);
                        let b = accounts.get(txn, &to)?.unwrap_or(0);
                        if a > 0 && from != to {
                            accounts.insert(txn, &from, &(a - 1))?;
                            accounts.insert(txn, &to, &(b + 1))?;
                        }
                        Ok(())
                    });
                    match moved {
                        Ok(()) => {
                            commits.fetch_add(1, Ordering::Relaxed);
                        }
                        // A writer that waited too long for the locking reader retries.
                        Err(e) if e.is_retryable() => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(())
            })
        })
        .collect();
    let started = Instant::now();
    let mut session = store.session()?;
    let scan = |total: &mut u64, entry: Result<(u64, u64)>| -> Result<()> {
        *total += entry?.1;
        Ok(())
    };
    let mut scanned = 0u64;
    let mut restarts = 0u64;
    match mode {
        0 => std::thread::sleep(window),
        1 => store.read_latest(&mut session, |txn| {
            while started.elapsed() < window {
                let mut total = 0;
                for entry in accounts.iter(txn) {
                    scan(&mut total, entry)?;
                }
                check_total(total)?;
                scanned += 1;
            }
            Ok(())
        })?,
        _ => {
            // Chosen as a deadlock victim (or timed out), the reader starts again.
            while started.elapsed() < window {
                let mut txn = session.begin()?;
                let read = (|| -> Result<u64> {
                    let mut done = 0;
                    while started.elapsed() < window {
                        let mut total = 0;
                        for entry in accounts.iter(&mut txn) {
                            scan(&mut total, entry)?;
                        }
                        check_total(total)?;
                        done += 1;
                    }
                    Ok(done)
                })();
                match read {
                    Ok(done) => {
                        scanned += done;
                        txn.commit()?;
                    }
                    Err(e) if e.is_retryable() => {
                        restarts += 1;
                        txn.abort()?;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let done = commits.load(Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        writer
            .join()
            .map_err(|_| Error::InvalidArgument("a writer thread panicked".into()))??;
    }
    Ok((done as f64 / elapsed, scanned, restarts))
}

/// Every scan of one committed state adds up to the units the accounts started with.
fn check_total(total: u64) -> Result<()> {
    if total != ACCOUNTS * 1_000 {
        return Err(Error::InvalidArgument(format!(
            "a reader saw {total} units, not {}: not one committed state",
            ACCOUNTS * 1_000
        )));
    }
    Ok(())
}
