//! `lodestore bench net`: what a request to a Lodestore server costs over loopback TCP, next to
//! the machine's floor measured in the same run: a bare TCP ping-pong between two threads,
//! with a reply as large as the request's.
//!
//! - `lock (held)`: `lock_page` of a page the transaction holds already, the smallest request
//!   (a few dozen bytes each way); the floor is a 64-byte ping-pong.
//! - `fetch page`: `fetch_page` of one page; the floor is a 64-byte request answered with a
//!   page of bytes.
//! - `connect`: a new connection and its handshake (no token), from connecting to the welcome;
//!   the floor is a bare TCP connect that the other end accepts.
//!
//! Each request is also made over TLS (TLS 1.3, a certificate made for the run), on a second
//! port of the same server, so the cost of encryption shows per request, per page and per
//! connection next to plain TCP.
//!
//! A round trip costs mostly the wake-up of the thread at the other end, and that depends on
//! where the threads run: on one CPU the two hand it to each other; across two, the waker must
//! wake the other CPU, which on a virtual machine may have halted. So each is measured with
//! the threads pinned (the client on one CPU, the server's threads and the echo thread of the
//! floor on the same one or on another) and unpinned, where the scheduler places them. A
//! thread that may run on several CPUs polls a little for the next frame before it sleeps
//! (`frame::poll_before_read`); a pinned one does not, and neither does the bare echo. The same
//! requests made in process show what the protocol adds beyond the round trip. Kinds are timed
//! in turn, in bursts; each figure is the median of the runs.

use lodestore::{Error, Result};
use lodestore_core::{PageId, TxnId};
use lodestore_net::RemotePageServer;
use lodestore_server::{LockMode, PageServer, Server, ServerOptions};
use lodestore_storage::RealFileSystem;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

const PAGE_SIZE: usize = 8192;
/// Bytes of a bare ping's request, about a small Lodestore request's frame.
const PING_BYTES: usize = 64;

/// Connections opened per run for the `connect` row, per request made of the other kinds.
const CONNECTS_PER_REQUESTS: usize = 20;

/// One kind of request, timed remote (plain and TLS), in process, and against its bare floor.
#[derive(Clone, Copy)]
enum Kind {
    LockHeld,
    FetchPage,
    Connect,
}

impl Kind {
    const ALL: [Kind; 3] = [Kind::LockHeld, Kind::FetchPage, Kind::Connect];

    fn name(self) -> &'static str {
        match self {
            Kind::LockHeld => "lock (held)",
            Kind::FetchPage => "fetch page",
            Kind::Connect => "connect",
        }
    }

    /// Bytes of the bare floor's reply.
    fn reply_bytes(self) -> usize {
        match self {
            Kind::LockHeld | Kind::Connect => PING_BYTES,
            Kind::FetchPage => PAGE_SIZE,
        }
    }
}

/// Where the threads run: the client on the CPUs of `client`, the server's and the echo's on
/// those of `server`.
#[derive(Clone)]
struct Placement {
    name: &'static str,
    client: Vec<usize>,
    server: Vec<usize>,
}

/// Microseconds per request of one kind in one run.
#[derive(Clone, Copy, Default)]
struct Sample {
    remote_us: f64,
    tls_us: f64,
    floor_us: f64,
    /// NaN where there is no in-process counterpart (connecting).
    in_process_us: f64,
}

pub fn net(path: &Path, runs: usize, requests: usize) -> Result<ExitCode> {
    if runs == 0 || requests == 0 {
        return Err(Error::InvalidArgument(
            "bench net needs at least one run and one request per burst".into(),
        ));
    }
    let allowed = allowed_cpus()?;
    let mut placements = vec![Placement {
        name: "one CPU",
        client: vec![allowed[0]],
        server: vec![allowed[0]],
    }];
    if let Some(&other) = allowed.get(1) {
        placements.push(Placement {
            name: "two CPUs",
            client: vec![allowed[0]],
            server: vec![other],
        });
        placements.push(Placement {
            name: "any CPU",
            client: allowed.clone(),
            server: allowed.clone(),
        });
    }
    let dir = path.join("bench-net");
    let mut rows = Vec::new();
    for placement in placements {
        crate::bench::remove_store(&dir)?;
        let samples = measure_placed(&dir, &placement, runs, requests);
        // Whatever happened, the rest of the process may run anywhere again.
        pin_current_thread(&allowed)?;
        rows.push((placement, samples?));
        crate::bench::remove_store(&dir)?;
    }
    print_table(&rows, runs, requests);
    Ok(ExitCode::SUCCESS)
}

/// Serves a fresh store in `dir` from threads on the CPUs of `placement.server` and measures
/// from this thread, on those of `placement.client`.
fn measure_placed(
    dir: &Path,
    placement: &Placement,
    runs: usize,
    requests: usize,
) -> Result<Vec<Vec<Sample>>> {
    let server = Arc::new(Server::create(
        Arc::new(RealFileSystem),
        dir,
        PAGE_SIZE,
        ServerOptions::default(),
    )?);
    let listener = TcpListener::bind("127.0.0.1:0").map_err(io("listen"))?;
    let address = listener.local_addr().map_err(io("listen"))?.to_string();
    let tls_listener = TcpListener::bind("127.0.0.1:0").map_err(io("listen"))?;
    let tls_address = tls_listener.local_addr().map_err(io("listen"))?.to_string();
    let certificates = lodestore::tls_certs::write_set(&dir.join("tls"), &[])?;
    let tls_server =
        lodestore::TlsServer::builder(&certificates.server_certificate, &certificates.server_key)
            .build()?;
    let tls_client = lodestore::TlsClient::builder(&certificates.authority).build()?;
    let stop = Arc::new(AtomicBool::new(false));
    // Threads inherit their creator's CPUs: the serving threads, and the connection threads
    // they start, run where this thread is pinned now.
    pin_current_thread(&placement.server)?;
    let serving = [
        (listener, lodestore::ServerAuth::none()),
        (
            tls_listener,
            lodestore::ServerAuth::none().with_tls(tls_server),
        ),
    ]
    .map(|(listener, auth)| {
        let (server, stop) = (server.clone(), stop.clone());
        std::thread::spawn(move || {
            lodestore_net::serve_with(server, listener, stop, Default::default(), auth)
        })
    });
    let tls = lodestore::Credentials {
        token: None,
        tls: Some(tls_client),
    };
    let measured = measure(
        &server,
        (&address, &tls_address, &tls),
        placement,
        runs,
        requests,
    );
    stop.store(true, Ordering::Relaxed);
    let mut served = Ok(0);
    for thread in serving {
        let result = thread
            .join()
            .unwrap_or_else(|_| Err(Error::InvalidArgument("a serving thread panicked".into())));
        served = served.and(result);
    }
    let samples = measured?;
    served?;
    Ok(samples)
}

/// Microseconds per connection and handshake to `address`, `count` in a row; each closed
/// before the next.
fn connects_us(address: &str, credentials: &lodestore::Credentials, count: usize) -> Result<f64> {
    let started = Instant::now();
    for _ in 0..count {
        drop(RemotePageServer::connect_secured(
            address,
            "lodestore bench net",
            credentials,
        )?);
    }
    Ok(started.elapsed().as_secs_f64() * 1e6 / count as f64)
}

/// Microseconds per bare TCP connect to a listener that accepts each, `count` in a row.
fn bare_connects_us(count: usize) -> Result<f64> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(io("listen"))?;
    let address = listener.local_addr().map_err(io("listen"))?;
    let accepting = std::thread::spawn(move || -> std::io::Result<()> {
        for _ in 0..count {
            let (mut stream, _) = listener.accept()?;
            stream.write_all(&[1])?;
        }
        Ok(())
    });
    let started = Instant::now();
    for _ in 0..count {
        let mut stream = TcpStream::connect(address).map_err(io("connect"))?;
        // Accepted and answered: the round trip a handshake needs at least.
        let mut byte = [0u8];
        stream.read_exact(&mut byte).map_err(io("read"))?;
    }
    let took = started.elapsed();
    accepting
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("the accepting thread panicked")))
        .map_err(io("accept"))?;
    Ok(took.as_secs_f64() * 1e6 / count as f64)
}

/// `runs` samples of every kind, each kind and its floor timed in turn. Starts pinned to the
/// server's CPU (for the threads it starts) and pins itself to the client's.
fn measure(
    server: &Arc<Server>,
    (address, tls_address, tls): (&str, &str, &lodestore::Credentials),
    placement: &Placement,
    runs: usize,
    requests: usize,
) -> Result<Vec<Vec<Sample>>> {
    let echoes = Kind::ALL.map(|kind| BareEcho::start(kind.reply_bytes()));
    let remote = RemotePageServer::connect(address, "lodestore bench net")?;
    let remote_tls = RemotePageServer::connect_secured(tls_address, "lodestore bench net", tls)?;
    // The connections' threads start on accepting: make sure they have before moving away.
    let remote_txn = remote.begin()?;
    let tls_txn = remote_tls.begin()?;
    pin_current_thread(&placement.client)?;
    let mut echoes = echoes.into_iter().collect::<Result<Vec<_>>>()?;
    let page = remote.root_directory().page();
    remote.lock_page(remote_txn, page, LockMode::Shared)?;
    remote_tls.lock_page(tls_txn, page, LockMode::Shared)?;
    let local_txn = server.begin()?;
    server.lock_page(local_txn, page, LockMode::Shared)?;
    let mut samples = vec![Vec::with_capacity(runs); Kind::ALL.len()];
    let mut buf = vec![0u8; PAGE_SIZE];
    let connects = (requests / CONNECTS_PER_REQUESTS).max(1);
    let plain = lodestore::Credentials::default();
    for run in 0..runs {
        for (i, kind) in Kind::ALL.into_iter().enumerate() {
            let sample = match kind {
                Kind::Connect => Sample {
                    floor_us: bare_connects_us(connects)?,
                    remote_us: connects_us(address, &plain, connects)?,
                    tls_us: connects_us(tls_address, tls, connects)?,
                    in_process_us: f64::NAN,
                },
                _ => Sample {
                    floor_us: echoes[i].round_trips_us(requests)?,
                    remote_us: requests_us(&remote, remote_txn, page, kind, requests, &mut buf)?,
                    tls_us: requests_us(&remote_tls, tls_txn, page, kind, requests, &mut buf)?,
                    in_process_us: requests_us(
                        server.as_ref(),
                        local_txn,
                        page,
                        kind,
                        requests,
                        &mut buf,
                    )?,
                },
            };
            eprintln!(
                "{}, run {}: {:<12} {:>7.1} us remote, {:>7.1} us TLS, {:>7.1} us bare, {:>6.2} us in process",
                placement.name,
                run + 1,
                kind.name(),
                sample.remote_us,
                sample.tls_us,
                sample.floor_us,
                sample.in_process_us,
            );
            samples[i].push(sample);
        }
    }
    remote.abort(remote_txn)?;
    remote_tls.abort(tls_txn)?;
    server.abort(local_txn)?;
    for echo in echoes {
        echo.stop()?;
    }
    Ok(samples)
}

/// Microseconds per request of `kind` made `requests` times in a row through `server`.
fn requests_us(
    server: &dyn PageServer,
    txn: TxnId,
    page: PageId,
    kind: Kind,
    requests: usize,
    buf: &mut [u8],
) -> Result<f64> {
    let started = Instant::now();
    for _ in 0..requests {
        match kind {
            Kind::LockHeld => {
                server.lock_page(txn, page, LockMode::Shared)?;
            }
            Kind::FetchPage => server.fetch_page(txn, page, buf)?,
            Kind::Connect => unreachable!("connections are timed by connects_us"),
        }
    }
    Ok(started.elapsed().as_secs_f64() * 1e6 / requests as f64)
}

/// A bare loopback ping-pong: a thread answers every request of [`PING_BYTES`] with a reply
/// of its own size, both ends blocking in `read`, Nagle off.
struct BareEcho {
    stream: TcpStream,
    request: [u8; PING_BYTES],
    reply: Vec<u8>,
    echo: std::thread::JoinHandle<std::io::Result<()>>,
}

impl BareEcho {
    fn start(reply_bytes: usize) -> Result<BareEcho> {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(io("listen"))?;
        let address = listener.local_addr().map_err(io("listen"))?;
        let echo = std::thread::spawn(move || -> std::io::Result<()> {
            let (mut stream, _) = listener.accept()?;
            stream.set_nodelay(true)?;
            let (mut request, reply) = ([0u8; PING_BYTES], vec![7u8; reply_bytes]);
            // Until the other end closes.
            while stream.read_exact(&mut request).is_ok() {
                stream.write_all(&reply)?;
            }
            Ok(())
        });
        let stream = TcpStream::connect(address).map_err(io("connect"))?;
        stream.set_nodelay(true).map_err(io("connect"))?;
        Ok(BareEcho {
            stream,
            request: [1u8; PING_BYTES],
            reply: vec![0u8; reply_bytes],
            echo,
        })
    }

    /// Microseconds per round trip, `requests` in a row.
    fn round_trips_us(&mut self, requests: usize) -> Result<f64> {
        let started = Instant::now();
        for _ in 0..requests {
            self.stream.write_all(&self.request).map_err(io("write"))?;
            self.stream
                .read_exact(&mut self.reply)
                .map_err(io("read"))?;
        }
        Ok(started.elapsed().as_secs_f64() * 1e6 / requests as f64)
    }

    fn stop(self) -> Result<()> {
        drop(self.stream);
        self.echo
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("the echo thread panicked")))
            .map_err(io("echo"))
    }
}

fn io(operation: &'static str) -> impl Fn(std::io::Error) -> Error {
    move |e| Error::io("127.0.0.1", operation, e)
}

/// The CPUs this thread may run on, in order.
fn allowed_cpus() -> Result<Vec<usize>> {
    // SAFETY: a zeroed cpu_set_t is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: sched_getaffinity writes at most the size it is given.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(io("read CPU affinity")(std::io::Error::last_os_error()));
    }
    let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: CPU_ISSET reads inside the set for CPUs below CPU_SETSIZE.
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect();
    if cpus.is_empty() {
        return Err(Error::InvalidArgument(
            "this thread may run on no CPU".into(),
        ));
    }
    Ok(cpus)
}

/// Lets this thread run on `cpus` only.
fn pin_current_thread(cpus: &[usize]) -> Result<()> {
    // SAFETY: a zeroed cpu_set_t is an empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus {
        assert!(cpu < libc::CPU_SETSIZE as usize, "CPU {cpu} past the set");
        // SAFETY: CPU_SET writes inside the set for a CPU below CPU_SETSIZE (asserted).
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: sched_setaffinity reads the set's size, as given.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc != 0 {
        return Err(io("set CPU affinity")(std::io::Error::last_os_error()));
    }
    Ok(())
}

fn print_table(rows: &[(Placement, Vec<Vec<Sample>>)], runs: usize, requests: usize) {
    let median =
        |f: fn(&Sample) -> f64, of: &[Sample]| crate::bench::median(of.iter().map(f).collect());
    let mut table = comfy_table::Table::new();
    table.load_preset(comfy_table::presets::UTF8_FULL_CONDENSED);
    table.set_header([
        "threads on",
        "request",
        "remote us",
        "TLS us",
        "TLS / plain",
        "bare us",
        "remote / bare",
        "in process us",
    ]);
    for (placement, samples) in rows {
        for (kind, of) in Kind::ALL.into_iter().zip(samples) {
            let ratios: Vec<f64> = of.iter().map(|s| s.remote_us / s.floor_us).collect();
            let tls_ratios: Vec<f64> = of.iter().map(|s| s.tls_us / s.remote_us).collect();
            let in_process = median(|s| s.in_process_us, of);
            table.add_row([
                placement.name.to_string(),
                kind.name().to_string(),
                format!("{:.1}", median(|s| s.remote_us, of)),
                format!("{:.1}", median(|s| s.tls_us, of)),
                format!("{:.2}", crate::bench::median(tls_ratios)),
                format!("{:.1}", median(|s| s.floor_us, of)),
                format!("{:.2}", crate::bench::median(ratios)),
                if in_process.is_nan() {
                    "-".into()
                } else {
                    format!("{in_process:.2}")
                },
            ]);
        }
    }
    println!(
        "Loopback TCP, bursts of {requests} requests, medians of {runs} runs (the ratio is the \
         median of each run's)"
    );
    println!("{table}");
}
