//! `lodestore bench detect`: what update detection costs, per scheme, measured in one run.
//!
//! - Hot loop: a transaction rewrites objects it already wrote, through `get_mut`, round after
//!   round. Reported as nanoseconds per update and as a ratio to the same loop under `WPL`
//!   (detector none: the API path without any detection work). Each run times the loop in
//!   several short bursts and keeps the fastest, so a burst the machine's other work slowed
//!   does not count.
//! - First write: a transaction writes one object on each of many pages it has not written
//!   yet. The cost detection adds is this time minus the same under `WPL`; for page protection
//!   it is reported as a ratio to a bare write fault with a page copy by the same mechanism
//!   (a protected arena armed, written, captured) timed just before it in the same run; the
//!   figure is the median of the runs' ratios.
//!
//! Each figure is the median of the runs.

use bytemuck::{Pod, Zeroable};
use lodestore::{DetectionStats, Oid, Options, Persistent, PhaseTimes, Result, Scheme, Store};
use lodestore_client::detect::protection::{FaultMechanism, ProtectedArena};
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

/// A small object, as OO7's atomic parts are.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
struct Part {
    id: u64,
    x: u64,
    y: u64,
    build_date: u64,
    payload: [u64; 4],
}
impl Persistent for Part {
    const TYPE_ID: u32 = 0x0B_0001;
}

/// A part padded to more than half a page, so each lies on a page of its own.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C)]
struct PagePart {
    part: Part,
    padding: [u64; 512],
}
impl Persistent for PagePart {
    const TYPE_ID: u32 = 0x0B_0002;
}

const PAGE_SIZE: usize = 8192;
const HOT_OBJECTS: usize = 4096;
/// Rounds over the hot objects per timed burst, and bursts per run.
const HOT_ROUNDS: usize = 20;
const HOT_BURSTS: usize = 10;
const FIRST_WRITE_PAGES: usize = 2000;

/// The schemes measured: the detector-off baseline first.
fn schemes() -> Vec<Scheme> {
    let mut schemes = vec![
        Scheme::WPL,
        Scheme::PD_ESM,
        Scheme::PD_UFFD_ESM,
        Scheme::WPL_UFFD,
        Scheme::SD_ESM,
        Scheme::REMSET,
        Scheme::OBJ,
    ];
    for name in ["CARD-16", "CARD-256", "CARD-4096"] {
        schemes.push(name.parse().expect("a named scheme"));
    }
    schemes
}

#[derive(Clone, Debug, Default)]
struct Figures {
    hot_ns: f64,
    first_write_ns: f64,
    /// Page protection: the first write's cost over the baseline's, as a ratio to the bare
    /// fault and copy timed just before it in the same run.
    versus_fault: Option<f64>,
    stats: DetectionStats,
    /// Of the first-write transaction's commit.
    phases: PhaseTimes,
}

pub fn detect(path: &Path, runs: usize) -> Result<ExitCode> {
    if runs == 0 {
        return Err(lodestore::Error::InvalidArgument(
            "bench detect needs at least one run".into(),
        ));
    }
    let dir = path.join("bench-detect");
    crate::bench::remove_store(&dir)?;
    let options = Options::new()
        .page_size(PAGE_SIZE)
        .client_cache_bytes(64 << 20)
        .server_pool_bytes(64 << 20)
        .recovery_buffer_bytes(32 << 20);
    let store = Store::create(&dir, options)?;
    let (hot, pages) = populate(&store)?;
    let schemes = schemes();
    let mut all: Vec<Vec<Figures>> = vec![Vec::new(); schemes.len()];
    let mut raw_signal = Vec::new();
    let mut raw_uffd = Vec::new();
    for run in 0..runs {
        for (i, scheme) in schemes.iter().enumerate() {
            // The bare fault is timed just before the scheme that pays it, so both meet the
            // machine in the same state: a userfaultfd fault's cost (a sleep and a wake-up of
            // the writer) moves by a third from one moment to the next on a virtual machine.
            let raw = match scheme.fault_mechanism() {
                Some(mechanism) => {
                    let ns = raw_trap_and_copy_ns(mechanism, FIRST_WRITE_PAGES)?;
                    match mechanism {
                        FaultMechanism::Signal => raw_signal.push(ns),
                        FaultMechanism::Userfaultfd => raw_uffd.push(ns),
                    }
                    Some(ns)
                }
                None => None,
            };
            let mut figures = measure(&store, *scheme, &hot, &pages)?;
            // The schemes' first entry is the baseline, measured first in every run.
            let base_first_write_ns = all[0].last().map_or(0.0, |f| f.first_write_ns);
            figures.versus_fault =
                raw.map(|ns| (figures.first_write_ns - base_first_write_ns) / ns);
            eprintln!(
                "run {}: {:<9} hot {:>6.1} ns/update, first write {:>7.0} ns/page",
                run + 1,
                scheme.name(),
                figures.hot_ns,
                figures.first_write_ns
            );
            all[i].push(figures);
        }
    }
    drop(store);
    crate::bench::remove_store(&dir)?;

    let raw_signal_ns = crate::bench::median(raw_signal);
    let raw_uffd_ns = crate::bench::median(raw_uffd);
    let medians: Vec<Figures> = all
        .iter()
        .map(|runs| Figures {
            hot_ns: crate::bench::median(runs.iter().map(|f| f.hot_ns).collect()),
            first_write_ns: crate::bench::median(runs.iter().map(|f| f.first_write_ns).collect()),
            versus_fault: runs[0].versus_fault.map(|_| {
                crate::bench::median(runs.iter().filter_map(|f| f.versus_fault).collect())
            }),
            stats: runs.last().expect("a run").stats,
            phases: runs.last().expect("a run").phases,
        })
        .collect();
    let base = medians[0].clone();
    println!(
        "bare write fault + {PAGE_SIZE}-byte copy (protected arena), median of {runs} runs: \
         SIGSEGV + mprotect {raw_signal_ns:.0} ns, userfaultfd {raw_uffd_ns:.0} ns"
    );
    println!(
        "{:<10} {:>10} {:>8} {:>12} {:>12} {:>9} {:>7} {:>8} {:>8} {:>9}",
        "scheme",
        "hot ns/upd",
        "x none",
        "first ns/pg",
        "+ over none",
        "x fault",
        "traps",
        "copied",
        "records",
        "log KiB"
    );
    for (scheme, figures) in schemes.iter().zip(&medians) {
        let extra = figures.first_write_ns - base.first_write_ns;
        let versus_fault = figures
            .versus_fault
            .map_or_else(|| "-".into(), |ratio| format!("{ratio:.2}"));
        let stats = figures.stats;
        println!(
            "{:<10} {:>10.1} {:>8.3} {:>12.0} {:>12.0} {:>9} {:>7} {:>8} {:>8} {:>9.0}",
            scheme.name(),
            figures.hot_ns,
            figures.hot_ns / base.hot_ns,
            figures.first_write_ns,
            extra,
            versus_fault,
            stats.traps,
            stats.pages_copied + stats.pieces_copied,
            stats.log_records,
            stats.log_bytes as f64 / 1024.0
        );
    }
    println!(
        "hot: fastest of {HOT_BURSTS} bursts of {HOT_ROUNDS} rounds over {HOT_OBJECTS} objects \
         already written; first write: one object on each of {FIRST_WRITE_PAGES} pages; \
         counters of the last run."
    );
    println!();
    println!("commit of the first-write transaction by phase (Hosking section 5), last run, ms:");
    println!(
        "{:<10} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "scheme", "running", "old", "new", "write", "other"
    );
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    for (scheme, figures) in schemes.iter().zip(&medians) {
        let p = figures.phases;
        println!(
            "{:<10} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
            scheme.name(),
            ms(p.running),
            ms(p.old_objects),
            ms(p.new_objects),
            ms(p.write),
            ms(p.other)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Small parts packed on pages, and page-sized parts.
type Objects = (Vec<Oid<Part>>, Vec<Oid<PagePart>>);

/// Creates the objects: small ones packed on pages, and page-sized ones.
fn populate(store: &Store) -> Result<Objects> {
    let mut session = store.session()?;
    let mut txn = session.begin()?;
    let zero = Part::zeroed();
    let hot = (0..HOT_OBJECTS)
        .map(|_| txn.alloc(&zero))
        .collect::<Result<Vec<_>>>()?;
    let pages = (0..FIRST_WRITE_PAGES)
        .map(|_| txn.alloc(&PagePart::zeroed()))
        .collect::<Result<Vec<_>>>()?;
    txn.commit()?;
    store.checkpoint()?;
    Ok((hot, pages))
}

fn measure(
    store: &Store,
    scheme: Scheme,
    hot: &[Oid<Part>],
    pages: &[Oid<PagePart>],
) -> Result<Figures> {
    let mut session = store.session_with_scheme(scheme)?;
    // Warm the client cache so no figure includes page fetches.
    let mut txn = session.begin()?;
    for &oid in hot {
        txn.get(oid)?;
    }
    for &oid in pages {
        txn.get(oid)?;
    }
    txn.commit()?;
    // Write every page once, so the recovery buffer's memory is mapped (the kernel maps it as
    // a session first reaches it) and the first writes timed below pay for the detection
    // alone, as in a session that has run before. Committed, not aborted: an abort drops the
    // pages it wrote from the cache.
    let mut txn = session.begin()?;
    for &oid in pages {
        txn.get_mut(oid)?.part.x += 1;
    }
    txn.commit()?;

    let before = session.stats().phases;
    let counted_before = session.detection_stats();
    let mut txn = session.begin()?;
    let started = Instant::now();
    for &oid in pages {
        txn.get_mut(oid)?.part.x += 1;
    }
    let first_write_ns = started.elapsed().as_nanos() as f64 / pages.len() as f64;
    txn.commit()?;
    let after = session.stats().phases;
    let phases = after.since(&before);

    let mut txn = session.begin()?;
    for &oid in hot {
        txn.get_mut(oid)?.x += 1;
    }
    let mut hot_ns = f64::INFINITY;
    for _ in 0..HOT_BURSTS {
        let started = Instant::now();
        for _ in 0..HOT_ROUNDS {
            for &oid in hot {
                let part = txn.get_mut(oid)?;
                part.x += 1;
                part.y += 1;
            }
        }
        let ns = started.elapsed().as_nanos() as f64 / (HOT_ROUNDS * hot.len()) as f64;
        hot_ns = hot_ns.min(ns);
    }
    txn.commit()?;
    Ok(Figures {
        hot_ns,
        first_write_ns,
        versus_fault: None, // set by the caller, which times the bare fault
        stats: session.detection_stats().since(&counted_before),
        phases,
    })
}

/// A bare write fault with a page copy: a protected arena's frame armed, written once, the
/// capture taken; per page.
fn raw_trap_and_copy_ns(mechanism: FaultMechanism, frames: usize) -> Result<f64> {
    let mut arena = ProtectedArena::new(PAGE_SIZE, frames, mechanism)?;
    let mut pre_images = vec![1u8; PAGE_SIZE * frames];
    // Populate the memory and the user view's page tables first, as a warm client cache is:
    // the figure is the fault and the copy, not the kernel allocating pages.
    let mut sum = 0u64;
    // SAFETY: both views span `frames * PAGE_SIZE` bytes; the shadow view is writable.
    unsafe {
        std::ptr::write_bytes(arena.shadow(), 0, frames * PAGE_SIZE);
        for offset in (0..frames * PAGE_SIZE).step_by(4096) {
            sum += std::ptr::read_volatile(arena.user().add(offset)) as u64;
        }
    }
    std::hint::black_box(sum);
    let started = Instant::now();
    for frame in 0..frames {
        arena.arm(frame, pre_images[frame * PAGE_SIZE..].as_mut_ptr());
        // SAFETY: the frame lies in the arena's user view and is armed: the write faults,
        // the handler copies the frame and makes it writable, and the write completes.
        unsafe {
            std::ptr::write_volatile(arena.user().add(frame * PAGE_SIZE + 64), 1u8);
        }
        arena.take_capture();
    }
    let ns = started.elapsed().as_nanos() as f64 / frames as f64;
    arena.protect_all()?;
    Ok(ns)
}
