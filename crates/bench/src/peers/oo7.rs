//! The OO7 traversals on any store: the traversal code Lodestore runs, through a Lodestore
//! transaction or a peer's ([`PeerObjects`]).

use super::engine::Engine;
use super::kv::{KvAccess, Peer};
use super::objects::PeerObjects;
use super::{median, PeersConfig, TraversalFigure};
use crate::oo7::schema::Module;
use crate::oo7::{self, Traversal, TraversalCounts};
use lodestore::{Error, Oid, Result, Session};
use std::time::Instant;

/// The measured traversals of `config` on `engine` (median time of each, after one unmeasured
/// T1), then the checksum of a final T1.
pub fn traversals(engine: &Engine, config: &PeersConfig) -> Result<(Vec<TraversalFigure>, u64)> {
    let mut runner = Runner::new(engine)?;
    runner.traverse(Traversal::T1, config.seed)?;
    let mut figures = Vec::new();
    for &traversal in &config.traversals {
        let mut times = Vec::new();
        let mut counts = TraversalCounts::default();
        for run in 0..config.traversal_runs {
            let started = Instant::now();
            counts = runner.traverse(traversal, config.seed + u64::from(run))?;
            times.push(started.elapsed().as_secs_f64() * 1e3);
        }
        figures.push(TraversalFigure {
            traversal,
            median_ms: median(times),
            counts,
        });
    }
    let checksum = runner.traverse(Traversal::T1, config.seed)?.checksum;
    Ok((figures, checksum))
}

/// Runs traversals of the first module, each in one transaction.
enum Runner<'e> {
    Lodestore {
        session: Box<Session>,
        module: Oid<Module>,
    },
    Peer {
        peer: &'e dyn Peer,
        module: Oid<Module>,
    },
}

impl<'e> Runner<'e> {
    fn new(engine: &'e Engine) -> Result<Runner<'e>> {
        let first = |modules: Vec<Oid<Module>>| {
            modules
                .first()
                .copied()
                .ok_or_else(|| Error::InvalidArgument("the OO7 database has no module".into()))
        };
        Ok(match engine {
            Engine::Lodestore(store) => {
                let mut session = Box::new(store.session()?);
                let mut txn = session.begin()?;
                let module = first(oo7::modules(&mut txn)?)?;
                txn.commit()?;
                Runner::Lodestore { session, module }
            }
            Engine::Peer(peer) => {
                let mut modules = Vec::new();
                peer.read(&mut |kv| {
                    modules = oo7::modules(&mut PeerObjects::new(kv))?;
                    Ok(())
                })?;
                Runner::Peer {
                    peer: peer.as_ref(),
                    module: first(modules)?,
                }
            }
        })
    }

    fn traverse(&mut self, traversal: Traversal, seed: u64) -> Result<TraversalCounts> {
        match self {
            Runner::Lodestore { session, module } => {
                let mut txn = session.begin()?;
                let counts = oo7::traverse(&mut txn, *module, traversal, seed)?;
                txn.commit()?;
                Ok(counts)
            }
            Runner::Peer { peer, module } => {
                let mut counts = TraversalCounts::default();
                let work = &mut |kv: &mut dyn KvAccess| {
                    counts = oo7::traverse(&mut PeerObjects::new(kv), *module, traversal, seed)?;
                    Ok(())
                };
                if traversal.updates() {
                    peer.write(work)?;
                } else {
                    peer.read(work)?;
                }
                Ok(counts)
            }
        }
    }
}
