//! The QuickStore experiments (QuickStore section 4): OO7 traversals, each one transaction,
//! repeated with the client cache kept across transactions, for every scheme and recovery
//! buffer size asked for, with 1 to N clients (threads of the embedded store, each traversing
//! its own module, as QuickStore section 4.1 gives each client its own module).

use super::gate::Gate;
use crate::oo7::{self, Oo7Params, Traversal};
use crate::record::{Meter, RunRecord};
use crate::workspace;
use lodestore::{Error, Options, RecoveryMethodKind, Result, Scheme, Store};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Retries of a transaction chosen as a deadlock victim before the run fails.
const RETRIES_MAX: u32 = 20;

#[derive(Clone, Debug)]
pub struct Oo7Config {
    pub preset: String,
    pub params: Oo7Params,
    pub seed: u64,
    pub schemes: Vec<Scheme>,
    pub traversals: Vec<Traversal>,
    pub runs: u32,
    pub recovery_buffers: Vec<usize>,
    pub cache_bytes: usize,
    pub server_pool_bytes: usize,
    pub clients: Vec<u32>,
    /// A fresh client cache for every measured transaction instead of one kept across them.
    pub cold: bool,
    /// Serve the store on a loopback port and connect the clients over TCP.
    pub remote: bool,
    /// With `remote`: over TLS, clients presenting certificates.
    pub tls: bool,
    /// The server's recovery method for every scheme; `None`: the one QuickStore pairs with
    /// each scheme ([`lodestore::paired_method`]).
    pub method: Option<RecoveryMethodKind>,
    pub out: PathBuf,
    pub quiet: bool,
}

/// Runs every configuration and returns one record per measured transaction and client.
pub fn run(config: &Oo7Config) -> Result<Vec<RunRecord>> {
    config.params.validate()?;
    if let Some(&most) = config.clients.iter().max() {
        if most == 0 || most > config.params.modules {
            return Err(Error::InvalidArgument(format!(
                "--clients up to {most}: each client traverses its own module and preset {} has {}",
                config.preset, config.params.modules
            )));
        }
    }
    if config.runs == 0 {
        return Err(Error::InvalidArgument("--runs must be at least 1".into()));
    }
    let template = template(
        &config.out,
        &config.preset,
        &config.params,
        config.seed,
        config.quiet,
    )?;

    // TLS: a certificate set for this run, the server requiring the clients' certificates.
    let certificates = if config.remote && config.tls {
        let dir = config
            .out
            .join(format!(".tls-{}", hex_of(&fresh_token()[..8])));
        let set = lodestore::tls_certs::write_set(&dir, &[])?;
        let server = lodestore::TlsServer::builder(&set.server_certificate, &set.server_key)
            .client_authority(&set.authority, lodestore::Access::ReadWrite)
            .build()?;
        let client = lodestore::TlsClient::builder(&set.authority)
            .certificate(&set.client_certificate, &set.client_key)
            .build()?;
        Some(TlsRun {
            dir,
            server,
            client,
        })
    } else {
        None
    };
    let configurations =
        config.recovery_buffers.len() * config.schemes.len() * config.clients.len();
    let bar = workspace::progress_bar(configurations as u64, "OO7 configurations", config.quiet);
    let mut records = Vec::new();
    for &recovery_buffer in &config.recovery_buffers {
        for &scheme in &config.schemes {
            for &clients in &config.clients {
                bar.set_message(format!("OO7 {} x{clients}", scheme.name()));
                let path = workspace::fresh_copy(&template, &config.out)?;
                let method = config
                    .method
                    .unwrap_or_else(|| lodestore::paired_method(scheme));
                let options = Options::new()
                    .scheme(scheme)
                    .recovery_method(method)
                    .recovery_buffer_bytes(recovery_buffer)
                    .client_cache_bytes(config.cache_bytes)
                    .server_pool_bytes(config.server_pool_bytes);
                let store = Store::open(&path, options.clone())?;
                let store_of_config = &store;
                // Remote: the store is served on a loopback port and every client connects to
                // it, so pages and log records cross TCP as they would between machines.
                let collected = Mutex::new(Vec::new());
                let stop_serving = Arc::new(AtomicBool::new(false));
                let (listener, served) = if config.remote {
                    let listener = TcpListener::bind("127.0.0.1:0")
                        .map_err(|e| Error::io("127.0.0.1:0", "listen", e))?;
                    let address = listener
                        .local_addr()
                        .map_err(|e| Error::io("127.0.0.1:0", "listen", e))?;
                    (Some(listener), Some(address.to_string()))
                } else {
                    (None, None)
                };
                let served = &served;
                // Remote clients authenticate as they would on a network: a fresh token per
                // configuration, proven in every connection's handshake.
                let token = lodestore::Token::new(fresh_token())?;
                let mut options = options.token(token.clone());
                if let Some(tls) = &certificates {
                    options = options.tls(tls.client.clone());
                }
                let gate = Gate::new(clients as usize);
                let phase_start = Mutex::new(0u64);
                let phase_pages = Mutex::new(0f64);
                std::thread::scope(|scope| -> Result<()> {
                    let serving = listener.map(|listener| {
                        let (store, stop) = (&store, stop_serving.clone());
                        let mut auth = lodestore::ServerAuth::none()
                            .with(token.clone(), lodestore::Access::ReadWrite);
                        if let Some(tls) = &certificates {
                            auth = auth.with_tls(tls.server.clone());
                        }
                        scope.spawn(move || {
                            store.serve_with(
                                listener,
                                stop,
                                lodestore::ServeLimits::default(),
                                auth,
                            )
                        })
                    });
                    let handles: Vec<_> = (0..clients)
                        .map(|client| {
                            let store = store_of_config;
                            let options = options.clone();
                            let collected = &collected;
                            let (gate, phase_start, phase_pages) =
                                (&gate, &phase_start, &phase_pages);
                            scope.spawn(move || {
                                let connected = match served {
                                    Some(address) => Some(Store::connect(address, options)?),
                                    None => None,
                                };
                                let store = connected.as_ref().unwrap_or(store);
                                let setup = ClientSetup {
                                    config,
                                    scheme,
                                    method,
                                    recovery_buffer,
                                    clients,
                                    client,
                                    server: store_of_config,
                                    gate,
                                    phase_start,
                                    phase_pages,
                                };
                                let mine = match run_client(store, &setup) {
                                    Ok(mine) => mine,
                                    Err(e) => {
                                        gate.break_it();
                                        return Err(e);
                                    }
                                };
                                // None: another client failed, and its error is the one to
                                // report.
                                collected
                                    .lock()
                                    .expect("no panics while holding it")
                                    .extend(mine.unwrap_or_default());
                                Ok::<(), Error>(())
                            })
                        })
                        .collect();
                    let mut outcome = Ok(());
                    for handle in handles {
                        let joined = handle.join().expect("a client thread panicked");
                        outcome = outcome.and(joined);
                    }
                    stop_serving.store(true, Ordering::Relaxed);
                    if let Some(serving) = serving {
                        serving.join().expect("the serving thread panicked")?;
                    }
                    outcome
                })?;
                records.extend(collected.into_inner().expect("clients finished"));
                drop(store);
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    workspace::remove_work(&config.out)?;
    Ok(records)
}

/// The generated OO7 database of `preset` and `seed`, made once under `out/templates` and
/// reused by every experiment that copies it.
pub fn template(
    out: &std::path::Path,
    preset: &str,
    params: &Oo7Params,
    seed: u64,
    quiet: bool,
) -> Result<PathBuf> {
    workspace::template(
        out,
        &format!("oo7-{preset}-seed{seed}-layout{}", oo7::LAYOUT),
        |path| {
            let store = Store::create(path, Options::new())?;
            let total = params.modules as u64 * params.composite_parts_per_module as u64;
            let bar = workspace::progress_bar(total, &format!("generating {preset}"), quiet);
            oo7::generate(&store, params, seed, &bar)?;
            bar.finish_and_clear();
            Ok(())
        },
    )
}

struct ClientSetup<'a> {
    config: &'a Oo7Config,
    scheme: Scheme,
    method: RecoveryMethodKind,
    recovery_buffer: usize,
    clients: u32,
    client: u32,
    /// The configuration's own store, whose log the server writes.
    server: &'a Store,
    /// Lines the clients up at the start and end of each traversal's measured runs, so the
    /// server's log writes in between belong to exactly those transactions.
    gate: &'a Gate,
    phase_start: &'a Mutex<u64>,
    phase_pages: &'a Mutex<f64>,
}

/// One client: for each traversal, one unmeasured transaction to warm the cache (unless cold
/// runs were asked for), then the measured runs. The server's log pages per transaction are
/// what its log flushed while all clients ran their measured transactions, divided among them
/// (one client's window would also count the others' writes). `None` when another client
/// failed.
fn run_client(store: &Store, setup: &ClientSetup<'_>) -> Result<Option<Vec<RunRecord>>> {
    let Ok(records) = run_client_gated(store, setup)? else {
        return Ok(None);
    };
    Ok(Some(records))
}

type Gated<T> = std::result::Result<T, super::gate::Broken>;

fn run_client_gated(store: &Store, setup: &ClientSetup<'_>) -> Result<Gated<Vec<RunRecord>>> {
    let page_size = setup.server.page_size() as f64;
    let log_flushed = || setup.server.log_stats().bytes_flushed;
    let config = setup.config;
    let mut session = store.session()?;
    let (modules, _) = with_retries(setup.client, || {
        let mut txn = session.begin()?;
        let modules = oo7::modules(&mut txn)?;
        txn.commit()?;
        Ok(modules)
    })?;
    let module = modules[setup.client as usize];
    let mut records = Vec::new();
    for &traversal in &config.traversals {
        if !config.cold {
            with_retries(setup.client, || {
                let mut txn = session.begin()?;
                oo7::traverse(&mut txn, module, traversal, config.seed)?;
                txn.commit()
            })?;
        }
        let gate = |leading: &dyn Fn()| -> Gated<()> {
            if setup.gate.wait()? {
                leading();
            }
            setup.gate.wait().map(|_| ())
        };
        if let Err(broken) = gate(&|| *setup.phase_start.lock().expect("no panics") = log_flushed())
        {
            return Ok(Err(broken));
        }
        let first_of_phase = records.len();
        for run in 1..=config.runs {
            if config.cold {
                session = store.session()?;
            }
            let meter = Meter::start(store, &session);
            let started = Instant::now();
            let (counts, retries) = with_retries(setup.client, || {
                let mut txn = session.begin()?;
                let counts = oo7::traverse(&mut txn, module, traversal, config.seed + run as u64)?;
                txn.commit()?;
                Ok(counts)
            })?;
            let elapsed = started.elapsed();
            let mut record = RunRecord {
                experiment: "oo7".into(),
                preset: config.preset.clone(),
                scheme: setup.scheme.name().into(),
                method: setup.method.name().into(),
                traversal: traversal.name().into(),
                clients: setup.clients,
                client: setup.client,
                run,
                temperature: if config.cold { "cold" } else { "warm" }.into(),
                recovery_buffer_bytes: setup.recovery_buffer as u64,
                cache_bytes: config.cache_bytes as u64,
                retries,
                atomic_parts_visited: Some(counts.atomic_parts_visited),
                updates: counts.updates,
                distinct_objects_modified: counts.distinct_objects_modified,
                distinct_composite_parts_visited: Some(counts.distinct_composite_parts_visited),
                ..RunRecord::default()
            };
            meter.finish(store, &session, elapsed, &mut record);
            records.push(record);
        }
        let transactions = f64::from(setup.clients) * f64::from(config.runs);
        if let Err(broken) = gate(&|| {
            let start = *setup.phase_start.lock().expect("no panics");
            let pages = (log_flushed() - start) as f64 / page_size / transactions;
            *setup.phase_pages.lock().expect("no panics") = pages;
        }) {
            return Ok(Err(broken));
        }
        let pages = *setup.phase_pages.lock().expect("no panics");
        for record in &mut records[first_of_phase..] {
            record.server_log_pages_written = pages;
        }
    }
    Ok(Ok(records))
}

/// Runs `transaction` until it is not a deadlock victim (at most [`RETRIES_MAX`] retries);
/// returns its result and the retries. Clients share a page where the allocator put one
/// module's objects into free space on another module's page, so page locks can conflict; a
/// victim runs again, as an application would.
fn with_retries<T>(client: u32, mut transaction: impl FnMut() -> Result<T>) -> Result<(T, u32)> {
    let mut retries = 0;
    loop {
        match transaction() {
            Err(Error::Deadlock { .. } | Error::LockTimeout { .. }) if retries < RETRIES_MAX => {
                retries += 1;
                tracing::debug!(client, retries, "OO7 transaction retried after a deadlock");
            }
            other => return other.map(|value| (value, retries)),
        }
    }
}

/// A random token of 32 bytes for one benchmark configuration's server and clients.
/// A run's TLS: the certificates' folder (removed when the run ends) and both ends' setup.
struct TlsRun {
    dir: PathBuf,
    server: lodestore::TlsServer,
    client: lodestore::TlsClient,
}

impl Drop for TlsRun {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn fresh_token() -> Vec<u8> {
    use rand::RngCore;
    let mut bytes = vec![0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    bytes
}
