//! `lodestore bench commit`: committed transactions per second and commit latency for several
//! numbers of threads, next to this machine's ceiling measured in the same run on the same file
//! system: the latency of one small write plus fdatasync, and the bandwidth of large writes
//! plus one fdatasync.

use lodestore::{Error, Options, Result, Store};
use lodestore_bench::ceiling;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Bytes of each thread's object: more than half an 8 KiB page, so every thread updates a page
/// of its own and the benchmark measures commits, not lock waits.
const OBJECT_BYTES: usize = 5000;

#[derive(Clone, Debug)]
struct Measure {
    threads: usize,
    /// The adaptive commit delay the store ran with (`Options::commit_delay`), microseconds.
    delay_us: u64,
    commits_per_s: f64,
    median_us: f64,
    p99_us: f64,
    log_mb_per_s: f64,
    /// Commits one log flush (write + sync) carried, on average: how well group commit works.
    commits_per_flush: f64,
    /// Wall time between flushes, on average: the length of a group-commit round.
    flush_interval_us: f64,
}

pub fn commit(
    path: &Path,
    threads: &[usize],
    delays_us: &[u64],
    siblings: usize,
    seconds: f64,
    runs: usize,
    csv: Option<&Path>,
) -> Result<ExitCode> {
    if threads.is_empty()
        || threads.contains(&0)
        || delays_us.is_empty()
        || runs == 0
        || seconds.is_nan()
        || seconds <= 0.0
    {
        return Err(Error::InvalidArgument(
            "bench commit needs thread counts of at least 1, at least one run and a positive duration".into(),
        ));
    }
    std::fs::create_dir_all(path).map_err(|e| Error::io(path, "create directory", e))?;
    // One row per delay and thread count, in that order.
    let cases: Vec<(u64, usize)> = delays_us
        .iter()
        .flat_map(|&d| threads.iter().map(move |&t| (d, t)))
        .collect();
    let mut rows: Vec<Vec<Measure>> = vec![Vec::new(); cases.len()];
    let mut ceilings = Vec::new();
    for run in 0..runs {
        ceilings.push(ceiling::measure(path)?);
        for (i, &(delay, t)) in cases.iter().enumerate() {
            let dir = path.join(format!("bench-commit-{t}"));
            remove_store(&dir)?;
            let measure = measure(&dir, t, delay, siblings, seconds)?;
            remove_store(&dir)?;
            eprintln!(
                "run {}: {t:>2} threads, delay {delay} us: {:>9.0} commits/s, median {:>7.1} us",
                run + 1,
                measure.commits_per_s,
                measure.median_us
            );
            rows[i].push(measure);
        }
    }
    let fsync = median(ceilings.iter().map(|c| c.fdatasync_median_us).collect());
    let bandwidth = median(ceilings.iter().map(|c| c.batched_sync_mb_per_s).collect());
    println!("ceiling (median of {runs} runs): write 512 B + fdatasync {fsync:.1} us; batched sync {bandwidth:.0} MB/s");
    println!("delay us  threads  commits/s  median us  p99 us  log MB/s  commits/flush  us/flush  x 1 thread  latency / fdatasync  log / batched");
    let mut lines = vec![
        "threads,run,commits_per_s,median_us,p99_us,log_mb_per_s,commits_per_flush,flush_interval_us,fdatasync_us,batched_mb_per_s,commit_delay_us"
            .to_string(),
    ];
    for (i, &(delay, t)) in cases.iter().enumerate() {
        // Against the first thread count at the same delay.
        let first = i - i % threads.len();
        let single = median(rows[first].iter().map(|m| m.commits_per_s).collect());
        let rate = median(rows[i].iter().map(|m| m.commits_per_s).collect());
        let latency = median(rows[i].iter().map(|m| m.median_us).collect());
        let p99 = median(rows[i].iter().map(|m| m.p99_us).collect());
        let log = median(rows[i].iter().map(|m| m.log_mb_per_s).collect());
        let per_flush = median(rows[i].iter().map(|m| m.commits_per_flush).collect());
        let interval = median(rows[i].iter().map(|m| m.flush_interval_us).collect());
        println!(
            "{delay:>8} {t:>8} {rate:>10.0} {latency:>10.1} {p99:>7.1} {log:>9.2} {per_flush:>14.1} {interval:>9.1} {:>11.2} {:>20.2} {:>14.4}",
            rate / single,
            latency / fsync,
            log / bandwidth
        );
        for (run, m) in rows[i].iter().enumerate() {
            lines.push(format!(
                "{},{},{:.1},{:.2},{:.2},{:.3},{:.2},{:.1},{:.2},{:.1},{}",
                m.threads,
                run,
                m.commits_per_s,
                m.median_us,
                m.p99_us,
                m.log_mb_per_s,
                m.commits_per_flush,
                m.flush_interval_us,
                ceilings[run].fdatasync_median_us,
                ceilings[run].batched_sync_mb_per_s,
                m.delay_us
            ));
        }
    }
    if let Some(csv) = csv {
        std::fs::write(csv, lines.join("\n") + "\n").map_err(|e| Error::io(csv, "write", e))?;
    }
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn remove_store(dir: &Path) -> Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| Error::io(dir, "remove", e))?;
    }
    Ok(())
}

fn measure(
    dir: &Path,
    threads: usize,
    delay_us: u64,
    siblings: usize,
    seconds: f64,
) -> Result<Measure> {
    let options = Options::new()
        .commit_delay(Duration::from_micros(delay_us))
        .commit_siblings(siblings);
    let store = Store::create(dir, options)?;
    let objects = {
        let mut session = store.session()?;
        let mut txn = session.begin()?;
        let objects = (0..threads)
            .map(|_| txn.alloc_zeroed(1, OBJECT_BYTES as u64))
            .collect::<Result<Vec<_>>>()?;
        txn.commit()?;
        objects
    };
    let log_before = store.log_stats();
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(seconds);
    let latencies: Vec<Vec<f64>> = std::thread::scope(|scope| {
        let workers: Vec<_> = objects
            .iter()
            .map(|&oid| {
                let store = &store;
                scope.spawn(move || -> Result<Vec<f64>> {
                    let mut session = store.session()?;
                    let mut latencies = Vec::new();
                    let mut counter = 0u64;
                    while Instant::now() < deadline {
                        let begun = Instant::now();
                        let mut txn = session.begin()?;
                        counter += 1;
                        txn.write_at(oid, 0, &counter.to_le_bytes())?;
                        txn.commit()?;
                        latencies.push(begun.elapsed().as_secs_f64() * 1e6);
                    }
                    Ok(latencies)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("bench thread panicked"))
            .collect::<Result<Vec<_>>>()
    })?;
    let elapsed = started.elapsed().as_secs_f64();
    let log_after = store.log_stats();
    let log_bytes = log_after.bytes_flushed - log_before.bytes_flushed;
    let flushes = (log_after.flushes - log_before.flushes).max(1) as f64;
    if std::env::var_os("LODESTORE_BENCH_DEBUG").is_some() {
        eprintln!(
            "{threads} threads: {:?} {:?}",
            store.log_stats(),
            store.server_stats()
        );
    }
    let mut all: Vec<f64> = latencies.into_iter().flatten().collect();
    let commits = all.len() as f64;
    all.sort_by(|a, b| a.total_cmp(b));
    let p99 = all.get(all.len() * 99 / 100).copied().unwrap_or(0.0);
    Ok(Measure {
        threads,
        delay_us,
        commits_per_s: commits / elapsed,
        median_us: median(all.clone()),
        p99_us: p99,
        log_mb_per_s: log_bytes as f64 / elapsed / 1e6,
        commits_per_flush: commits / flushes,
        flush_interval_us: elapsed * 1e6 / flushes,
    })
}

pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(|a, b| a.total_cmp(b));
    values[values.len() / 2]
}
