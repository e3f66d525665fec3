//! `lodestore torture`: a crash campaign with a progress bar and a summary.

use indicatif::{ProgressBar, ProgressStyle};
use lodestore::{RecoveryMethodKind, Result, Scheme};
use lodestore_torture::{CampaignOptions, RECOVERY_BUFFER_PAGES_DEFAULT};
use std::process::ExitCode;

/// Arguments of `lodestore torture`.
#[derive(clap::Args, Debug)]
pub struct TortureArgs {
    /// Recovery method under test: esm, redo (clients ship log records only), wpl (whole-page
    /// logging; the background installer is off so a seed replays exactly), or a main-memory
    /// method of differential logging: dl1p, dl2p (XOR records, one-pass or two-pass restart)
    /// or pl2p (its physical-logging baseline); these close and reopen the recovered store
    /// before the oracle reads its files, since their data file is written at close. Or
    /// dbcache (deferred, atomic after-image writes; a larger server pool, as it keeps every
    /// page a running transaction changed). Or s1, s2, s2ps: dbcache with --multi-level of
    /// that strategy (as `init --method`).
    #[arg(long, default_value = "esm")]
    method: String,
    /// Update-detection scheme of the workload's session (PD-ESM, PD-UFFD-ESM, SD-ESM, SL-ESM,
    /// WPL, OBJ, REMSET, PAGES, CARD-16 ... CARD-4096).
    #[arg(long, default_value = "SD-ESM")]
    scheme: String,
    /// Bytes of the session's recovery buffer (at least a page; small forces early logging).
    #[arg(long, default_value_t = RECOVERY_BUFFER_PAGES_DEFAULT * 4096, value_parser = crate::args::recovery_buffer)]
    recovery_buffer: usize,
    /// Seed of the campaign; the same seed replays the same crashes.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Number of crash points.
    #[arg(long, default_value_t = 10_000, value_parser = crate::args::crash_points)]
    crashes: u64,
    /// Crash at exactly this I/O of every workload instead of a random one.
    #[arg(long)]
    every: Option<u64>,
    /// Only crashes: no flipped bits or misdirected writes.
    #[arg(long)]
    no_media_faults: bool,
    /// Sessions running at once (1 to 8). With more than one, their steps are interleaved
    /// from the seed, commits are deferred so that several are in flight together, and lock
    /// conflicts abort at once instead of waiting.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=lodestore_torture::SESSIONS_MAX as i64))]
    sessions: u8,
    /// The store keeps snapshots: the workload takes them, reads as of them and archives
    /// their pages, and after every crash each acknowledged snapshot must read exactly what
    /// was committed before it (one session only, for now).
    #[arg(long)]
    snapshots: bool,
    /// The workload also changes a collection (a B+-tree map of a few hundred entries):
    /// batches of inserts and removes, range removes, scans in both directions; after every
    /// crash the tree must pass its check and hold exactly the committed entries (and, with
    /// --snapshots, the entries committed before each snapshot as of it). With --sessions, all
    /// of them change the one collection.
    #[arg(long)]
    collections: bool,
    /// Log streams of a dl1p, dl2p or pl2p store (1 to 64): transactions go to the idlest.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=64))]
    log_streams: u8,
    /// Restart level of a dl1p, dl2p or pl2p store (1 to 4, Lee, Kim & Cha's Table 1): 1
    /// loads the backup, then reads the streams, then replays them; 2 replays each stream as
    /// it is read; 3 reads the backup and the streams at once; 4 also replays while the
    /// backup goes in
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u8).range(1..=4))]
    restart_level: u8,
    /// With --multi-level under dbcache: write a persistence sphere once it reaches this many
    /// pages, at a subtransaction's end (0: at its transaction's end).
    #[arg(long, default_value_t = 0)]
    sphere_write_pages: usize,
    /// Start at this crash point with a fresh store, instead of at 0 (a violation's
    /// reproduction gives it when the store was fresh there, which saves replaying the
    /// points before).
    #[arg(long, default_value_t = 0)]
    from: u64,
    /// Run multi-level transactions by this strategy (s1, s2 or s2ps; Hasse & Weikum): bank
    /// transfers of --sessions sessions interleaved step by step, some aborted and
    /// compensated, crashes during recovery and the warm start included; after each crash the
    /// balances must be exactly the acknowledged commits'. Media faults are not injected.
    #[arg(long, value_parser = crate::args::strategy, conflicts_with_all = ["snapshots", "collections"])]
    multi_level: Option<lodestore::multilevel::Strategy>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: &TortureArgs) -> Result<ExitCode> {
    let (method, multi_level) = crate::inspect::init_method(&args.method, args.multi_level)?;
    if args.sphere_write_pages > 0
        && (multi_level.is_none() || method != RecoveryMethodKind::Dbcache)
    {
        return Err(lodestore::Error::InvalidArgument(
            "--sphere-write-pages applies to multi-level campaigns under dbcache".into(),
        ));
    }
    if multi_level.is_some() && (args.snapshots || args.collections) {
        return Err(lodestore::Error::InvalidArgument(
            "multi-level campaigns run bank transfers: --snapshots and --collections do not apply"
                .into(),
        ));
    }
    let scheme: Scheme = args.scheme.parse()?;
    if args.every == Some(0) {
        return Err(lodestore::Error::InvalidArgument(
            "--every must be at least 1".into(),
        ));
    }
    if args.snapshots && args.sessions > 1 {
        return Err(lodestore::Error::InvalidArgument(
            "--snapshots runs with one session; several sessions with snapshots are not \
             modelled yet"
                .into(),
        ));
    }
    if args.from >= args.crashes {
        return Err(lodestore::Error::InvalidArgument(format!(
            "--from {} must be below --crashes {}",
            args.from, args.crashes
        )));
    }
    let (crashes, json) = (args.crashes, args.json);
    let options = CampaignOptions {
        method,
        scheme,
        recovery_buffer_bytes: args.recovery_buffer,
        seed: args.seed,
        crashes,
        every: args.every,
        media_faults: !args.no_media_faults,
        sessions: usize::from(args.sessions),
        snapshots: args.snapshots,
        collections: args.collections,
        log_streams: usize::from(args.log_streams),
        restart_level: lodestore::RestartLevel::from_number(args.restart_level)
            .expect("clap checks the range"),
        first_crash: args.from,
        sphere_write_pages: args.sphere_write_pages,
        ..CampaignOptions::default()
    };
    let bar = ProgressBar::new(crashes - args.from);
    bar.set_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40}] {pos}/{len} crashes ({per_sec}, eta {eta})",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    let progress = |done: u64| {
        if done.is_multiple_of(100) {
            bar.set_position(done);
        }
    };
    let report = match multi_level {
        Some(strategy) => lodestore_torture::multilevel::run(&options, strategy, progress),
        None => lodestore_torture::run(&options, progress),
    };
    bar.finish_and_clear();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("report serialises")
        );
    } else {
        println!(
            "method {}  scheme {}  sessions {}  seed {}  crash points {}  in {:.1} s",
            report.method,
            report.scheme,
            report.sessions,
            report.seed,
            report.crashes,
            report.elapsed_ms as f64 / 1000.0
        );
        for (fault, count) in &report.crashes_by_fault {
            println!("  {fault:<14} {count:>8}");
        }
        println!(
            "  crashes during recovery      {:>8}",
            report.crashes_during_recovery
        );
        println!(
            "  restarts left to checkpoint {:>8}",
            report.restarts_deferring_checkpoint
        );
        println!(
            "  commits acknowledged         {:>8}",
            report.commits_acknowledged
        );
        println!("  aborts                       {:>8}", report.aborts);
        println!(
            "  commits in flight at a crash {:>8} ({} survived whole, the rest left no trace)",
            report.commits_in_flight, report.commits_in_flight_survived
        );
        println!(
            "  crashes cutting several commits at once {:>8}",
            report.crashes_with_commits_in_flight_together
        );
        println!(
            "  media faults: {} reported as errors, {} recovered intact",
            report.media_faults_detected, report.media_faults_survived
        );
        println!(
            "  objects reserved ahead {}, fills of them {}",
            report.objects_reserved, report.reserved_fills
        );
        if args.snapshots {
            println!(
                "  snapshots taken {}, read as of them {}, deleted {}, cut by a crash {} ({} \
                 there after it), checked after crashes {}",
                report.snapshots_taken,
                report.as_of_reads,
                report.snapshots_deleted,
                report.snapshots_in_flight,
                report.snapshots_in_flight_survived,
                report.snapshots_verified
            );
        }
        if args.collections {
            println!(
                "  collection steps {}, trees checked after crashes {} (at most {} entries, \
                 height {})",
                report.collection_steps,
                report.collection_checks,
                report.collection_entries_max,
                report.collection_height_max
            );
        }
    }
    for violation in &report.violations {
        eprintln!(
            "VIOLATION at crash {} after a {} fault: {}\nreproduce with: {}",
            violation.crash, violation.fault, violation.message, violation.reproduce
        );
    }
    println!(
        "{} passed, {} failed",
        report.crashes,
        report.violations.len()
    );
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
