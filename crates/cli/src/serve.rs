//! `lodestore serve`: an embedded store served to remote clients until SIGINT or SIGTERM.

use lodestore::{Error, Options, RecoveryMethodKind, Result, Store};
use std::io::Write;
use std::net::TcpListener;
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub fn run(path: &Path, listen: &str, method: Option<&str>) -> Result<ExitCode> {
    let mut options = Options::new();
    if let Some(method) = method {
        options = options.recovery_method(method.parse::<RecoveryMethodKind>()?);
    }
    // One thread per connection: glibc would give each a malloc arena of its own (up to
    // 8 per core) and memory freed in one arena is not reused by another, so resident memory
    // creeps up under many clients. Two arenas keep it flat (measured in docs/BENCHMARKS.md).
    // SAFETY: mallopt only changes allocator tuning; called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
    let store = Store::open_or_create(path, options)?;
    let listener = TcpListener::bind(listen).map_err(|e| Error::io(listen, "listen", e))?;
    let local = listener
        .local_addr()
        .map_err(|e| Error::io(listen, "listen", e))?;
    // The first line tells scripts and tests where the server listens (port 0 picks one).
    println!("listening on {local}");
    eprintln!("recovery method {}", store.recovery_method());
    std::io::stdout().flush().ok();
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [libc::SIGINT, libc::SIGTERM] {
        signal_flag(signal, stop.clone());
    }
    let still_open = store.serve(listener, stop)?;
    drop(store);
    // Claim a clean close only when it is one: the next open must find nothing to recover.
    // Checked by running that open's recovery in memory, which writes nothing.
    match lodestore::recover_in_memory(Arc::new(lodestore::RealFileSystem), path) {
        Ok(view) if !view.restart().needed_recovery() => {
            eprintln!("stopped; the store was closed cleanly");
        }
        Ok(_) => eprintln!(
            "stopped, but the store was not closed cleanly ({still_open} connections did not end \
             in time): the next open recovers it from its log"
        ),
        Err(e) => eprintln!("stopped; the store could not be checked after closing: {e}"),
    }
    Ok(ExitCode::SUCCESS)
}

/// Sets `flag` when `signal` arrives.
fn signal_flag(signal: libc::c_int, flag: Arc<AtomicBool>) {
    static FLAG: std::sync::OnceLock<Arc<AtomicBool>> = std::sync::OnceLock::new();
    let _ = FLAG.set(flag);
    extern "C" fn handler(_: libc::c_int) {
        if let Some(flag) = FLAG.get() {
            flag.store(true, Ordering::Relaxed);
        }
    }
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(signal, handler as *const () as libc::sighandler_t);
    }
}
