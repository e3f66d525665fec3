//! Crash campaigns of multi-level transactions (Hasse & Weikum): bank transfers between a few
//! accounts, each a multi-level transaction of one `AddFields` operation (both balances),
//! several sessions' transactions interleaved step by step from the seed, some aborted (their
//! operations compensated), the store crashed at a random I/O, sometimes again during its
//! recovery and warm start. The oracle: after each recovery the balances are exactly those the
//! acknowledged commits made (compensations and the warm start leaving no trace of the
//! others), with the commit the crash cut counted whole or not at all, and the total
//! conserved; a store closed cleanly then passes `check`.

use crate::{crash_rng, store_options, CampaignOptions, CampaignReport, Violation};
use lodestore::multilevel::{AddFields, MultiLevelTransaction, Strategy};
use lodestore::{RawOid, RecoveryMethodKind, Store};
use lodestore_storage::{Fault, SimFileSystem};
use rand::rngs::StdRng;
use rand::Rng;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ACCOUNTS: usize = 12;
/// Bytes of an account: several to a page, so operations of different accounts share pages.
const ACCOUNT_BYTES: u64 = 600;
const OPENING: i64 = 1000;
/// Steps of the workload in one crash point at most.
const STEPS_MAX: usize = 40;

/// What a worker is asked to do next.
enum Step {
    Transfer { from: usize, to: usize, amount: i64 },
    Commit,
    Abort,
}

/// A worker's answer: its transaction's changes so far (zeros after a commit or an abort), or
/// why it failed.
type Answer = Result<Vec<i64>, lodestore::Error>;

struct Subject {
    fs: Arc<SimFileSystem>,
    path: PathBuf,
    oids: Vec<RawOid>,
    /// The balances the acknowledged commits made.
    committed: Vec<i64>,
    /// The changes of a commit the crash cut, if any: there whole or not at all.
    in_doubt: Option<Vec<i64>>,
    fault: Option<Fault>,
}

/// Runs a campaign of `strategy`'s multi-level transactions; the rest as `options` say
/// (method, seed, crash points, `every`, sessions, page size; media faults are not injected).
pub fn run(
    options: &CampaignOptions,
    strategy: Strategy,
    mut progress: impl FnMut(u64),
) -> CampaignReport {
    let started = Instant::now();
    let mut report = CampaignReport {
        method: format!("{}+{}", options.method.name(), strategy.name()),
        scheme: options.scheme.name().to_string(),
        sessions: options.sessions,
        seed: options.seed,
        ..CampaignReport::default()
    };
    let mut subject = match fresh(options) {
        Ok(subject) => subject,
        Err(message) => {
            report
                .violations
                .push(violation(options, strategy, 0, None, message));
            return report;
        }
    };
    for crash in options.first_crash..options.crashes {
        let mut rng = crash_rng(options.seed, crash);
        if let Err(message) = iteration(options, strategy, &mut subject, &mut rng, &mut report) {
            report
                .violations
                .push(violation(options, strategy, crash, subject.fault, message));
            break;
        }
        report.crashes += 1;
        progress(report.crashes);
    }
    report.elapsed_ms = started.elapsed().as_millis() as u64;
    report
}

fn options_for(
    fs: &Arc<SimFileSystem>,
    options: &CampaignOptions,
    strategy: Strategy,
) -> lodestore::Options {
    store_options(
        fs,
        options.page_size,
        options.scheme,
        options.method,
        options.recovery_buffer_bytes,
    )
    .multi_level_strategy(strategy)
    .sphere_write_pages(options.sphere_write_pages)
    // Steps run one at a time: a lock wait would wait for nobody.
    .lock_wait_timeout(Duration::ZERO)
    // Deferred page writes: a pool smaller than the store, so pages of spheres leave it and
    // force their spheres' writes.
    .server_pool_bytes(if options.method == RecoveryMethodKind::Dbcache {
        4 * options.page_size
    } else {
        6 * options.page_size
    })
}

fn fresh(options: &CampaignOptions) -> Result<Subject, String> {
    let fs = Arc::new(SimFileSystem::new());
    let path = Path::new("/torture/multilevel").to_path_buf();
    let store = Store::create(&path, options_for(&fs, options, Strategy::default()))
        .map_err(|e| format!("create failed: {e}"))?;
    let oids = (|| {
        let mut session = store.session()?;
        let mut txn = session.begin()?;
        let mut oids = Vec::new();
        for _ in 0..ACCOUNTS {
            let oid = txn.alloc_zeroed(7, ACCOUNT_BYTES)?;
            txn.write_at(oid, 0, &OPENING.to_le_bytes())?;
            oids.push(oid);
        }
        txn.commit()?;
        Ok::<_, lodestore::Error>(oids)
    })()
    .map_err(|e| format!("opening the accounts failed: {e}"))?;
    drop(store);
    Ok(Subject {
        fs,
        path,
        oids,
        committed: vec![OPENING; ACCOUNTS],
        in_doubt: None,
        fault: None,
    })
}

/// One crash point: open (recovering and compensating), verify, run transfers until the
/// crash, crash.
fn iteration(
    options: &CampaignOptions,
    strategy: Strategy,
    subject: &mut Subject,
    rng: &mut StdRng,
    report: &mut CampaignReport,
) -> Result<(), String> {
    if rng.random_bool(0.15) {
        // The crash hits recovery or the warm start.
        subject.fs.arm(rng.random_range(1..=40));
    }
    let store = match Store::open(&subject.path, options_for(&subject.fs, options, strategy)) {
        Ok(store) => store,
        Err(_) if subject.fs.has_crashed() => {
            report.crashes_during_recovery += 1;
            crash(subject, rng, report);
            return Ok(());
        }
        Err(e) => return Err(format!("recovery failed: {e}")),
    };
    subject.fs.disarm();
    if store.restart_report().checkpoint_deferred {
        report.restarts_deferring_checkpoint += 1;
    }
    verify(&store, subject, report)?;
    if rng.random_bool(0.05) {
        // Now and then a clean close, and `check` on what it left.
        store.close().map_err(|e| format!("close failed: {e}"))?;
        let found = lodestore::check(subject.fs.as_ref(), &subject.path)
            .map_err(|e| format!("check failed: {e}"))?;
        if !found.is_sound() {
            return Err(format!("check after a clean close: {:?}", found.problems));
        }
        return Ok(());
    }
    let store = Arc::new(store);
    subject
        .fs
        .arm(options.every.unwrap_or_else(|| rng.random_range(1..=400)));
    let workers: Vec<_> = (0..options.sessions)
        .map(|_| {
            let (steps, step_rx) = channel();
            let (answer_tx, answers) = channel();
            let (store, oids) = (store.clone(), subject.oids.clone());
            let thread =
                std::thread::spawn(move || worker(store, strategy, oids, step_rx, answer_tx));
            (steps, answers, thread)
        })
        .collect();
    let mut current = vec![vec![0i64; ACCOUNTS]; workers.len()];
    for _ in 0..STEPS_MAX {
        let w = rng.random_range(0..workers.len());
        let (steps, answers, _) = &workers[w];
        let step = match rng.random_range(0..10) {
            0..=6 => Step::Transfer {
                from: rng.random_range(0..ACCOUNTS),
                to: rng.random_range(0..ACCOUNTS),
                amount: rng.random_range(1..50),
            },
            7 | 8 => Step::Commit,
            _ => Step::Abort,
        };
        let (committing, aborting) = (matches!(step, Step::Commit), matches!(step, Step::Abort));
        if steps.send(step).is_err() {
            break;
        }
        match answers.recv() {
            Ok(Ok(delta)) => {
                if committing {
                    for (c, d) in subject.committed.iter_mut().zip(&current[w]) {
                        *c += d;
                    }
                    report.commits_acknowledged += 1;
                } else if aborting {
                    report.aborts += 1;
                }
                current[w] = delta;
            }
            Ok(Err(_)) | Err(_) => {
                if committing {
                    subject.in_doubt = Some(current[w].clone());
                }
                break;
            }
        }
    }
    subject.fs.crash_now();
    // The workers end first (a dropped transaction's compensation fails on the crashed file
    // system and is left to the warm start); then the files are resolved.
    for (steps, _, thread) in workers {
        drop(steps);
        let _ = thread.join();
    }
    drop(store);
    crash(subject, rng, report);
    Ok(())
}

fn crash(subject: &mut Subject, rng: &mut StdRng, report: &mut CampaignReport) {
    subject.fs.crash_now();
    let fault = Fault::CRASHES[rng.random_range(0..Fault::CRASHES.len())];
    subject.fs.recover(fault, rng.random());
    subject.fs.disarm();
    subject.fault = Some(fault);
    *report
        .crashes_by_fault
        .entry(fault.name().to_string())
        .or_default() += 1;
}

/// The balances after recovery: the acknowledged commits' exactly, the one in doubt whole or
/// not at all.
fn verify(store: &Store, subject: &mut Subject, report: &mut CampaignReport) -> Result<(), String> {
    let found = (|| {
        let mut session = store.session()?;
        let mut txn = session.begin()?;
        subject
            .oids
            .iter()
            .map(|&oid| {
                let mut b = [0u8; 8];
                txn.read_at(oid, 0, &mut b)?;
                Ok(i64::from_le_bytes(b))
            })
            .collect::<Result<Vec<i64>, lodestore::Error>>()
    })()
    .map_err(|e| format!("reading the balances failed: {e}"))?;
    let total: i64 = found.iter().sum();
    if total != OPENING * ACCOUNTS as i64 {
        return Err(format!("money appeared or vanished: balances {found:?}"));
    }
    let with_doubtful = subject.in_doubt.take().map(|delta| {
        report.commits_in_flight += 1;
        subject
            .committed
            .iter()
            .zip(&delta)
            .map(|(c, d)| c + d)
            .collect::<Vec<_>>()
    });
    if found == subject.committed {
        return Ok(());
    }
    if Some(&found) == with_doubtful.as_ref() {
        report.commits_in_flight_survived += 1;
        subject.committed = found;
        return Ok(());
    }
    Err(format!(
        "balances {found:?}, acknowledged commits made {:?}, with the one in doubt {with_doubtful:?}",
        subject.committed
    ))
}

/// A session on its own thread running transactions one step at a time, as asked. Every call
/// to the store happens inside a step (a transaction begins at its first step), so the
/// interleaving, and with it every I/O, is the seed's alone.
fn worker(
    store: Arc<Store>,
    strategy: Strategy,
    oids: Vec<RawOid>,
    steps: Receiver<Step>,
    answers: Sender<Answer>,
) {
    let Ok(mut session) = store.session() else {
        return;
    };
    'transactions: loop {
        let Ok(mut step) = steps.recv() else {
            return;
        };
        let mut txn: MultiLevelTransaction<'_> = match session.begin_multi_level_with(strategy) {
            Ok(txn) => txn,
            Err(e) => {
                let _ = answers.send(Err(e));
                return;
            }
        };
        let mut delta = vec![0i64; ACCOUNTS];
        loop {
            match step {
                Step::Transfer { from, to, amount } => {
                    let op = AddFields {
                        fields: vec![(oids[from], 0, -amount), (oids[to], 0, amount)],
                    };
                    match txn.apply(&op) {
                        Ok(_) => {
                            delta[from] -= amount;
                            delta[to] += amount;
                            let _ = answers.send(Ok(delta.clone()));
                        }
                        // A lock conflict (S1 holds page locks to the end): abort, begin anew.
                        Err(e) if e.is_retryable() => {
                            let _ = answers.send(txn.abort().map(|()| vec![0; ACCOUNTS]));
                            continue 'transactions;
                        }
                        Err(e) => {
                            let _ = answers.send(Err(e));
                        }
                    }
                }
                Step::Commit => {
                    let _ = answers.send(txn.commit().map(|_| vec![0; ACCOUNTS]));
                    continue 'transactions;
                }
                Step::Abort => {
                    let _ = answers.send(txn.abort().map(|()| vec![0; ACCOUNTS]));
                    continue 'transactions;
                }
            }
            step = match steps.recv() {
                Ok(step) => step,
                Err(_) => return,
            };
        }
    }
}

fn violation(
    options: &CampaignOptions,
    strategy: Strategy,
    crash: u64,
    fault: Option<Fault>,
    message: String,
) -> Violation {
    Violation {
        crash,
        fault: fault.map_or("none", |f| f.name()).to_string(),
        message,
        reproduce: format!(
            "lodestore torture --multi-level {} --method {} --scheme {} --sessions {} --seed {} --crashes {}{}{}",
            strategy.name(),
            options.method.name(),
            options.scheme.name(),
            options.sessions,
            options.seed,
            crash + 1,
            options.every.map_or(String::new(), |n| format!(" --every {n}")),
            match options.sphere_write_pages {
                0 => String::new(),
                n => format!(" --sphere-write-pages {n}"),
            }
        ),
    }
}
