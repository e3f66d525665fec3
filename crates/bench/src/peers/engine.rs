//! The store under test, Lodestore or a peer, and what every workload does with either: load a
//! database, commit small durable transactions from several threads, close.

use super::database::Database;
use super::kv::Peer;
use super::objects::PeerObjects;
use super::StoreKind;
use crate::lists::typed;
use crate::oo7::schema::AtomicPart;
use crate::oo7::traverse::Traverse;
use lodestore::{Oid, Options, Result, Store};
use std::path::Path;
use std::time::{Duration, Instant};

pub enum Engine {
    Lodestore(Box<Store>),
    Peer(Box<dyn Peer>),
}

impl Engine {
    /// A new store of `kind` in `dir` holding `database`, and the seconds that took: a peer
    /// loads the database's entries; Lodestore builds it with `generate`, which allocates and
    /// links the objects as an application would (from a plan of their contents drawn before,
    /// for OO7: `Oo7Plan`).
    pub fn load(
        kind: StoreKind,
        dir: &Path,
        database: &Database,
        generate: impl FnOnce(&Store) -> Result<()>,
    ) -> Result<(Engine, f64)> {
        let started = Instant::now();
        let engine = match kind.open_peer(dir)? {
            None => {
                let store = Store::create(dir, Options::new())?;
                generate(&store)?;
                Engine::Lodestore(Box::new(store))
            }
            Some(peer) => {
                database.load(peer.as_ref())?;
                Engine::Peer(peer)
            }
        };
        Ok((engine, started.elapsed().as_secs_f64()))
    }

    /// Durable commits per second by `threads` threads, each updating OO7 atomic parts of its
    /// own stripe of `parts`, one per transaction, for `seconds`.
    pub fn durable_commits(&self, threads: usize, parts: &[u64], seconds: f64) -> Result<f64> {
        let stripe = parts.len().div_ceil(threads).max(1);
        let started = Instant::now();
        let deadline = started + Duration::from_secs_f64(seconds);
        let commits: u64 = std::thread::scope(|scope| {
            let workers: Vec<_> = parts
                .chunks(stripe)
                .take(threads)
                .map(|stripe| scope.spawn(move || self.commit_loop(stripe, deadline)))
                .collect();
            workers
                .into_iter()
                .map(|w| w.join().expect("commit thread panicked"))
                .sum::<Result<u64>>()
        })?;
        Ok(commits as f64 / started.elapsed().as_secs_f64())
    }

    /// One thread of [`Engine::durable_commits`]: transactions updating the next part of
    /// `stripe` until `deadline`; the number committed.
    fn commit_loop(&self, stripe: &[u64], deadline: Instant) -> Result<u64> {
        let mut commits = 0u64;
        let part = |n: u64| -> Oid<AtomicPart> { typed(stripe[n as usize % stripe.len()]) };
        match self {
            Engine::Lodestore(store) => {
                let mut session = store.session()?;
                while Instant::now() < deadline {
                    session.transact(|txn| {
                        let atomic = txn.get_mut(part(commits))?;
                        atomic.x += 1;
                        atomic.y += 1;
                        Ok(())
                    })?;
                    commits += 1;
                }
            }
            Engine::Peer(peer) => {
                while Instant::now() < deadline {
                    peer.write(&mut |kv| PeerObjects::new(kv).update(part(commits)))?;
                    commits += 1;
                }
            }
        }
        Ok(commits)
    }

    pub fn close(self) -> Result<()> {
        match self {
            Engine::Lodestore(store) => store.close(),
            Engine::Peer(peer) => {
                drop(peer);
                Ok(())
            }
        }
    }
}
