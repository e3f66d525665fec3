//! One libp2p node, as a peer that holds records or as a reader that only asks: Kademlia over
//! TCP with Noise and yamux, identify (so peers learn where one another listen), connection
//! limits, and the loop that drives the swarm and answers the commands of synchronous callers.

use crate::record::MAX_RECORD_BYTES;
use crate::store::CopyStore;
use either::Either;
use futures::StreamExt;
use libp2p::core::{upgrade, Transport};
use libp2p::kad::{self, GetRecordOk, QueryId, QueryResult, Quorum, Record, RecordKey};
use libp2p::pnet::{PnetConfig, PreSharedKey};
use libp2p::swarm::{NetworkBehaviour, SwarmEvent};
use libp2p::{connection_limits, identify, identity, noise, tcp, yamux, Multiaddr, PeerId};
use libp2p::{StreamProtocol, Swarm};
use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::time::Duration;
use tokio::sync::mpsc;

/// The Kademlia protocol of Lodestore's archive DHTs (apart from public DHTs).
pub const KAD_PROTOCOL: StreamProtocol = StreamProtocol::new("/lodestore/archive-kad/1");
/// Identify's protocol version string.
const IDENTIFY_VERSION: &str = "/lodestore/archive/1";
/// Longest one lookup or store may take in the DHT.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection idle this long is closed.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Connections a node accepts at most, and per peer.
const MAX_INCOMING: u32 = 512;
const MAX_PER_PEER: u32 = 2;
/// Listening addresses taken from one identify message at most.
const MAX_LISTEN_ADDRS: usize = 8;
/// How often a peer re-sends its records to the page's closest peers, which repairs the
/// replicas of a peer that was down or replaced.
pub const REPLICATION_INTERVAL: Duration = Duration::from_secs(600);

#[derive(NetworkBehaviour)]
pub struct Behaviour {
    kad: kad::Behaviour<CopyStore>,
    identify: identify::Behaviour,
    limits: connection_limits::Behaviour,
}

/// What a node is.
pub enum Role {
    /// Holds records (an archive peer).
    Peer(CopyStore),
    /// Reads and writes through peers, holding nothing (a store's archive).
    Reader,
}

/// Peers a reader's lookup asks per replica of a page: twice as many, so that a read still
/// finds a page's replicas while as many peers as there are replicas have joined closer to
/// the page than they are (until the replicas re-send the record to the newcomers).
const LOOKUP_WIDTH_PER_REPLICA: usize = 2;

/// How long a new connection may take to be set up (key exchange, multiplexer): a few round
/// trips, even across the world; a stranger to a private DHT is cut off after it.
const UPGRADE_TIMEOUT: Duration = Duration::from_secs(5);

/// The pre-shared key of a private DHT, derived from a token (at least 16 bytes) every
/// member holds: with one, a connection starts with a cipher keyed by it (libp2p's private
/// networks, `pnet`), so that only members complete the Noise handshake after it, and
/// strangers can neither read nor write records. The token never leaves the machine.
pub fn swarm_key(token: &[u8]) -> Result<PreSharedKey, String> {
    use hmac::{Hmac, Mac};
    if token.len() < MIN_TOKEN_BYTES {
        return Err(format!(
            "a DHT token has at least {MIN_TOKEN_BYTES} bytes, not {}",
            token.len()
        ));
    }
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(token).expect("HMAC takes any key");
    mac.update(b"lodestore archive DHT pre-shared key v1");
    Ok(PreSharedKey::new(mac.finalize().into_bytes().into()))
}

/// The shortest token a private DHT takes.
pub const MIN_TOKEN_BYTES: usize = 16;

/// Builds the swarm of a node with `key`; `replicas` is how many peers hold each record;
/// with `private`, only holders of that key connect.
pub fn swarm(
    key: identity::Keypair,
    role: Role,
    replicas: usize,
    private: Option<PreSharedKey>,
) -> Result<Swarm<Behaviour>, String> {
    let peer = matches!(role, Role::Peer(_));
    // A peer re-sends its records to a page's `replicas` closest peers; a reader looks
    // wider (and stores to exactly `replicas` peers by name, `Command::Put`).
    let width = if peer {
        replicas
    } else {
        (replicas * LOOKUP_WIDTH_PER_REPLICA).min(kad::K_VALUE.get())
    };
    let width = NonZeroUsize::new(width).ok_or("replicas must be at least 1")?;
    let store = match role {
        Role::Peer(store) => store,
        Role::Reader => CopyStore::nothing(),
    };
    let built = libp2p::SwarmBuilder::with_existing_identity(key)
        .with_tokio()
        .with_other_transport(
            |key| -> Result<_, Box<dyn std::error::Error + Send + Sync>> {
                let noise = noise::Config::new(key)?;
                let tcp = tcp::tokio::Transport::new(tcp::Config::default().nodelay(true));
                let base = match private {
                    Some(psk) => Either::Left(
                        tcp.and_then(move |socket, _| PnetConfig::new(psk).handshake(socket)),
                    ),
                    None => Either::Right(tcp),
                };
                Ok(base
                    .upgrade(upgrade::Version::V1Lazy)
                    .authenticate(noise)
                    .multiplex(yamux::Config::default())
                    .timeout(UPGRADE_TIMEOUT))
            },
        )
        .map_err(|e| format!("transport: {e}"))?
        .with_behaviour(|key| {
            let id = key.public().to_peer_id();
            let mut config = kad::Config::new(KAD_PROTOCOL);
            config
                .set_query_timeout(QUERY_TIMEOUT)
                .set_replication_factor(width)
                // Copies are history: they never expire and are never re-published by the
                // reader, which keeps nothing; peers re-send theirs to repair replicas.
                .set_record_ttl(None)
                .set_publication_interval(None)
                .set_provider_record_ttl(None)
                .set_provider_publication_interval(None)
                .set_replication_interval(peer.then_some(REPLICATION_INTERVAL))
                .set_caching(kad::Caching::Disabled)
                // A record with every copy of a page, plus the message around it.
                .set_max_packet_size(MAX_RECORD_BYTES + (64 << 10));
            let mut kad = kad::Behaviour::with_config(id, store, config);
            kad.set_mode(Some(if peer {
                kad::Mode::Server
            } else {
                kad::Mode::Client
            }));
            let identify = identify::Behaviour::new(identify::Config::new(
                IDENTIFY_VERSION.into(),
                key.public(),
            ));
            let limits = connection_limits::Behaviour::new(
                connection_limits::ConnectionLimits::default()
                    .with_max_established_incoming(Some(MAX_INCOMING))
                    .with_max_established_per_peer(Some(MAX_PER_PEER)),
            );
            Behaviour {
                kad,
                identify,
                limits,
            }
        })
        .map_err(|e| format!("behaviour: {e}"))?;
    Ok(built
        .with_swarm_config(|c| c.with_idle_connection_timeout(IDLE_TIMEOUT))
        .build())
}

/// Tells the node where a peer listens (the URL's peers, a peer's bootstrap list).
pub fn add_peer(swarm: &mut Swarm<Behaviour>, id: PeerId, addr: Multiaddr) {
    swarm.behaviour_mut().kad.add_address(&id, addr);
}

/// Starts a lookup of the node's own id, which fills its routing table.
pub fn bootstrap(swarm: &mut Swarm<Behaviour>) {
    if let Err(e) = swarm.behaviour_mut().kad.bootstrap() {
        tracing::debug!(error = %e, "no peer to bootstrap from yet");
    }
}

/// A command from a synchronous caller; the answer comes back on `reply`.
pub enum Command {
    /// Stores `value` under `key` on `replicas` peers (merged into what they hold).
    Put {
        key: RecordKey,
        value: Vec<u8>,
        reply: std::sync::mpsc::Sender<Result<(), String>>,
    },
    /// Every value the peers closest to `key` hold for it.
    Get {
        key: RecordKey,
        reply: std::sync::mpsc::Sender<Result<Vec<Vec<u8>>, String>>,
    },
}

enum Pending {
    /// Finding the peers closest to the record's key, to store it on `replicas` of them.
    Locate {
        record: Record,
        reply: std::sync::mpsc::Sender<Result<(), String>>,
    },
    Put(std::sync::mpsc::Sender<Result<(), String>>),
    Get {
        found: Vec<Vec<u8>>,
        answered: u32,
        reply: std::sync::mpsc::Sender<Result<Vec<Vec<u8>>, String>>,
    },
}

/// Drives `swarm` until `commands` closes (every sender dropped); `replicas` peers must take
/// each put.
pub async fn run(
    mut swarm: Swarm<Behaviour>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    replicas: usize,
    mut on_listen: impl FnMut(&Multiaddr),
) {
    let quorum = Quorum::N(NonZeroUsize::new(replicas).expect("checked by swarm()"));
    let mut pending: HashMap<QueryId, Pending> = HashMap::new();
    loop {
        tokio::select! {
            command = commands.recv() => match command {
                None => return,
                Some(Command::Put { key, value, reply }) => {
                    let id = swarm.behaviour_mut().kad.get_closest_peers(key.to_vec());
                    pending.insert(id, Pending::Locate { record: Record::new(key, value), reply });
                }
                Some(Command::Get { key, reply }) => {
                    let id = swarm.behaviour_mut().kad.get_record(key);
                    pending.insert(id, Pending::Get { found: Vec::new(), answered: 0, reply });
                }
            },
            event = swarm.select_next_some() => match event {
                SwarmEvent::NewListenAddr { address, .. } => on_listen(&address),
                // Only peers that hold records belong in the routing table.
                SwarmEvent::Behaviour(BehaviourEvent::Identify(identify::Event::Received {
                    peer_id, info, ..
                })) if info.protocols.contains(&KAD_PROTOCOL) => {
                    for addr in info.listen_addrs.into_iter().take(MAX_LISTEN_ADDRS) {
                        swarm.behaviour_mut().kad.add_address(&peer_id, addr);
                    }
                }
                SwarmEvent::Behaviour(BehaviourEvent::Kad(kad::Event::OutboundQueryProgressed {
                    id,
                    result: QueryResult::GetClosestPeers(result),
                    ..
                })) => {
                    let Some(Pending::Locate { record, reply }) = pending.remove(&id) else {
                        continue;
                    };
                    // Peers found by a lookup cut short may not be the closest, where reads
                    // look: a put to them would be lost to readers.
                    let peers = match result {
                        Ok(ok) => ok.peers,
                        Err(e) => {
                            let _ = reply.send(Err(format!("finding the closest peers: {e}")));
                            continue;
                        }
                    };
                    if peers.len() < replicas {
                        let _ = reply.send(Err(format!(
                            "{} peers reachable; {replicas} replicas wanted",
                            peers.len()
                        )));
                        continue;
                    }
                    let closest = peers.into_iter().take(replicas).map(|p| p.peer_id);
                    let closest: Vec<PeerId> = closest.collect();
                    let id = swarm.behaviour_mut().kad.put_record_to(record, closest.into_iter(), quorum);
                    pending.insert(id, Pending::Put(reply));
                }
                SwarmEvent::Behaviour(BehaviourEvent::Kad(
                    kad::Event::OutboundQueryProgressed { id, result, step, stats },
                )) => progressed(&mut pending, id, result, step.last, stats.num_successes()),
                _ => {}
            },
        }
    }
}

/// Hands a query's progress to the caller waiting for it.
fn progressed(
    pending: &mut HashMap<QueryId, Pending>,
    id: QueryId,
    result: QueryResult,
    last: bool,
    successes: u32,
) {
    let Some(entry) = pending.get_mut(&id) else {
        return; // a bootstrap or a replication, nobody waiting
    };
    let outcome = match (entry, result) {
        (Pending::Put(_), QueryResult::PutRecord(result)) => {
            Some(Finished::Put(result.map(|_| ()).map_err(|e| match &e {
                kad::PutRecordError::QuorumFailed {
                    success, quorum, ..
                }
                | kad::PutRecordError::Timeout {
                    success, quorum, ..
                } => format!("{e}: {} of {quorum} peers took the record", success.len()),
            })))
        }
        (
            Pending::Get {
                found, answered, ..
            },
            QueryResult::GetRecord(result),
        ) => {
            *answered = (*answered).max(successes);
            match result {
                Ok(GetRecordOk::FoundRecord(peer_record)) => {
                    found.push(peer_record.record.value);
                    last.then_some(Finished::Get)
                }
                Ok(GetRecordOk::FinishedWithNoAdditionalRecord { .. }) => Some(Finished::Get),
                Err(kad::GetRecordError::NotFound { .. }) => Some(Finished::Get),
                // A lookup cut short may lack the replica holding a copy between two it
                // found, and the later copy would then pass for the page at an earlier time:
                // what it found is not enough to answer.
                Err(e) => Some(Finished::GetFailed(format!(
                    "{e} after {} of the closest peers answered",
                    *answered
                ))),
            }
        }
        _ => None,
    };
    let Some(outcome) = outcome.or(last.then_some(Finished::Get)) else {
        return;
    };
    match (pending.remove(&id), outcome) {
        (Some(Pending::Put(reply)), Finished::Put(result)) => {
            let _ = reply.send(result);
        }
        (Some(Pending::Locate { reply, .. }), _) => {
            let _ = reply.send(Err(
                "the lookup of the closest peers ended unanswered".into()
            ));
        }
        (Some(Pending::Put(reply)), _) => {
            let _ = reply.send(Err("the store query ended without an answer".into()));
        }
        (
            Some(Pending::Get {
                found,
                answered,
                reply,
            }),
            outcome,
        ) => {
            let answer = match outcome {
                Finished::GetFailed(why) => Err(why),
                _ if found.is_empty() && answered == 0 => {
                    Err("no peer of the DHT answered".to_string())
                }
                _ => Ok(found),
            };
            let _ = reply.send(answer);
        }
        (None, _) => {}
    }
}

enum Finished {
    Put(Result<(), String>),
    Get,
    GetFailed(String),
}
