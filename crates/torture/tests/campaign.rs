//! Crash campaigns in the test suite: 100,000 simulated crash points across every fault kind
//! (four seeds of 25,000, run in parallel, each under one of QuickStore's schemes), 2,500 more
//! under each of the other schemes, a campaign crashing at a fixed I/O, and campaigns of the
//! redo-at-server and whole-page-logging methods. The recovery buffer is two pages, so log
//! records are generated early and pieces re-armed all the time.
//! Four sessions at once, their steps interleaved from the seed and their commits deferred so
//! that a crash cuts several, run under each recovery method.
//! Snapshots under each recovery method: snapshots taken, read as of themselves and archived
//! in the workload, and every acknowledged one checked after each crash.
//! Collections under each recovery method: a B+-tree map changed in the workload, checked and
//! compared entry by entry after each crash (as of every snapshot in one campaign; by four
//! interleaved sessions in another).
//! Longer campaigns: `lodestore torture --method M --scheme NAME --seed S --crashes N
//! [--sessions 4] [--snapshots] [--collections]`.

use lodestore::{RecoveryMethodKind, Scheme};
use lodestore_torture::{run, CampaignOptions, CampaignReport};

/// Prints each violation with the command that replays it, then fails if there was one.
fn assert_no_violations(report: &CampaignReport, what: &str) {
    for violation in &report.violations {
        eprintln!(
            "violation at crash {} ({}): {}\n  reproduce: {}",
            violation.crash, violation.fault, violation.message, violation.reproduce
        );
    }
    assert!(
        report.passed(),
        "{what}: {} violations",
        report.violations.len()
    );
}

fn campaign(options: CampaignOptions) -> CampaignReport {
    let report = run(&options, |_| {});
    assert_no_violations(&report, "campaign");
    assert_eq!(report.crashes, options.crashes);
    // The campaign must really exercise what it claims to.
    assert!(
        report.commits_acknowledged > options.crashes / 2,
        "{report:?}"
    );
    assert!(report.crashes_during_recovery > 0, "{report:?}");
    assert!(report.commits_in_flight_survived > 0, "{report:?}");
    assert!(
        report.commits_in_flight > report.commits_in_flight_survived,
        "{report:?}"
    );
    assert_eq!(
        report.crashes_by_fault.len(),
        if options.media_faults { 7 } else { 5 }
    );
    report
}

fn seeded(seed: u64, scheme: Scheme, crashes: u64) {
    campaign(CampaignOptions {
        seed,
        scheme,
        crashes,
        ..CampaignOptions::default()
    });
}

#[test]
fn crash_campaign_seed_1_page_diffing() {
    seeded(1, Scheme::PD_ESM, 25_000);
}

#[test]
fn crash_campaign_seed_2_sub_page_diffing() {
    seeded(2, Scheme::SD_ESM, 25_000);
}

#[test]
fn crash_campaign_seed_3_sub_page_logging() {
    seeded(3, Scheme::SL_ESM, 25_000);
}

#[test]
fn crash_campaign_seed_4_whole_pages() {
    seeded(4, Scheme::WPL, 25_000);
}

#[test]
fn crash_campaigns_of_the_other_schemes() {
    let covered = [Scheme::PD_ESM, Scheme::SD_ESM, Scheme::SL_ESM, Scheme::WPL];
    for (index, scheme) in Scheme::all()
        .into_iter()
        .filter(|s| !covered.contains(s))
        .enumerate()
    {
        eprintln!("scheme {scheme}");
        seeded(10 + index as u64, scheme, 2_500);
    }
}

#[test]
fn crash_at_every_fifth_io() {
    campaign(CampaignOptions {
        seed: 5,
        crashes: 2_000,
        every: Some(5),
        media_faults: false,
        ..CampaignOptions::default()
    });
}

fn with_method(seed: u64, method: RecoveryMethodKind, scheme: Scheme, crashes: u64) {
    campaign(CampaignOptions {
        seed,
        method,
        scheme,
        crashes,
        ..CampaignOptions::default()
    });
}

#[test]
fn crash_campaign_whole_page_logging_at_the_server() {
    with_method(20, RecoveryMethodKind::Wpl, Scheme::WPL, 15_000);
}

#[test]
fn crash_campaign_whole_page_logging_of_client_records() {
    // Clients that log their own changes: the server applies the records and logs the page.
    with_method(21, RecoveryMethodKind::Wpl, Scheme::SD_ESM, 5_000);
}

#[test]
fn crash_campaign_database_cache_method() {
    // Deferred, atomic after-image writes: flat transactions' spheres at their commits, pages
    // of ended transactions forced out by evictions, several sessions.
    with_method(23, RecoveryMethodKind::Dbcache, Scheme::WPL, 5_000);
    campaign(CampaignOptions {
        seed: 24,
        method: RecoveryMethodKind::Dbcache,
        scheme: Scheme::SD_ESM,
        crashes: 1_500,
        sessions: 3,
        ..CampaignOptions::default()
    });
}

#[test]
fn crash_campaign_redo_at_server() {
    with_method(22, RecoveryMethodKind::Redo, Scheme::PD_ESM, 10_000);
}

/// Differential logging: several log streams and sessions, crashes during checkpoints and
/// restarts included (the checkpoint interval of the campaign's store is short).
fn with_streams(seed: u64, method: RecoveryMethodKind, sessions: usize, crashes: u64) {
    let report = campaign(CampaignOptions {
        seed,
        method,
        scheme: Scheme::SD_ESM,
        crashes,
        sessions,
        log_streams: 3,
        ..CampaignOptions::default()
    });
    assert!(report.crashes_during_recovery > 0, "{report:?}");
}

#[test]
fn crash_campaign_differential_logging_one_pass() {
    with_streams(60, RecoveryMethodKind::Dl1p, 4, 1_500);
}

#[test]
fn crash_campaign_differential_logging_two_pass() {
    with_streams(61, RecoveryMethodKind::Dl2p, 1, 1_000);
}

#[test]
fn crash_campaign_physical_logging_baseline() {
    with_streams(62, RecoveryMethodKind::Pl2p, 4, 1_000);
}

/// A seed of a long campaign that once failed: under the physical baseline a client logged a
/// page added after the checkpoint with the page's header among the changed bytes, and the
/// restart merged the file growth's format into that after-image instead of laying the image
/// on it, leaving a page whose header named page 0 (refused when the close wrote it home).
#[test]
fn crash_campaign_physical_logging_of_pages_past_the_backup() {
    let report = run(
        &CampaignOptions {
            seed: 882_118,
            method: RecoveryMethodKind::Pl2p,
            scheme: Scheme::SL_ESM,
            crashes: 87,
            sessions: 4,
            collections: true,
            ..CampaignOptions::default()
        },
        |_| {},
    );
    assert_no_violations(&report, "pl2p at seed 882118");
    assert_eq!(report.crashes, 87);
}

fn with_sessions(seed: u64, method: RecoveryMethodKind, scheme: Scheme, crashes: u64) {
    let options = CampaignOptions {
        seed,
        method,
        scheme,
        crashes,
        sessions: 4,
        ..CampaignOptions::default()
    };
    let report = campaign(options);
    // Several sessions' commits were cut by one crash, and the oracle checked them together.
    assert!(
        report.crashes_with_commits_in_flight_together > 0,
        "{report:?}"
    );
}

#[test]
fn crash_campaign_four_sessions_esm() {
    with_sessions(30, RecoveryMethodKind::Esm, Scheme::SD_ESM, 1_500);
}

#[test]
fn crash_campaign_four_sessions_redo_at_server() {
    with_sessions(31, RecoveryMethodKind::Redo, Scheme::PD_ESM, 1_500);
}

#[test]
fn crash_campaign_four_sessions_whole_page_logging() {
    with_sessions(32, RecoveryMethodKind::Wpl, Scheme::WPL, 1_500);
}

#[test]
fn an_interleaving_replays_from_its_seed() {
    let options = CampaignOptions {
        seed: 33,
        crashes: 200,
        sessions: 4,
        ..CampaignOptions::default()
    };
    let (first, second) = (run(&options, |_| {}), run(&options, |_| {}));
    assert!(first.passed() && second.passed());
    let outcome = |r: &CampaignReport| {
        (
            r.commits_acknowledged,
            r.aborts,
            r.commits_in_flight,
            r.commits_in_flight_survived,
            r.crashes_during_recovery,
            r.crashes_by_fault.clone(),
        )
    };
    assert_eq!(outcome(&first), outcome(&second));
}

fn with_snapshots(seed: u64, method: RecoveryMethodKind, scheme: Scheme, crashes: u64) {
    let report = campaign(CampaignOptions {
        seed,
        method,
        scheme,
        crashes,
        snapshots: true,
        ..CampaignOptions::default()
    });
    // Snapshots were taken, read and checked, and crashes cut some while they were taken.
    assert!(report.snapshots_taken > crashes / 4, "{report:?}");
    assert!(report.as_of_reads > crashes / 4, "{report:?}");
    assert!(report.snapshots_verified > crashes, "{report:?}");
    assert!(report.snapshots_in_flight > 0, "{report:?}");
    assert!(report.snapshots_deleted > crashes / 10, "{report:?}");
}

#[test]
fn crash_campaign_snapshots_esm() {
    with_snapshots(40, RecoveryMethodKind::Esm, Scheme::SD_ESM, 1_500);
}

#[test]
fn crash_campaign_snapshots_redo_at_server() {
    with_snapshots(41, RecoveryMethodKind::Redo, Scheme::PD_REDO, 1_500);
}

#[test]
fn crash_campaign_snapshots_whole_page_logging() {
    with_snapshots(42, RecoveryMethodKind::Wpl, Scheme::WPL, 1_500);
}

fn with_collections(
    seed: u64,
    method: RecoveryMethodKind,
    scheme: Scheme,
    crashes: u64,
    snapshots: bool,
) {
    let report = campaign(CampaignOptions {
        seed,
        method,
        scheme,
        crashes,
        snapshots,
        collections: true,
        ..CampaignOptions::default()
    });
    // The map was changed in most transactions and checked after most crashes, and it grew
    // past one leaf, so splits, merges and root changes happened under the crashes.
    assert!(report.collection_steps > crashes, "{report:?}");
    assert!(report.collection_checks > crashes / 2, "{report:?}");
    assert!(report.collection_height_max >= 1, "{report:?}");
    assert!(report.collection_entries_max > 300, "{report:?}");
    if snapshots {
        assert!(report.snapshots_verified > crashes, "{report:?}");
    }
}

#[test]
fn crash_campaign_collections_esm() {
    with_collections(50, RecoveryMethodKind::Esm, Scheme::SD_ESM, 2_000, false);
}

#[test]
fn crash_campaign_collections_redo_at_server() {
    with_collections(51, RecoveryMethodKind::Redo, Scheme::PD_REDO, 2_000, false);
}

#[test]
fn crash_campaign_collections_whole_page_logging() {
    with_collections(52, RecoveryMethodKind::Wpl, Scheme::WPL, 2_000, false);
}

#[test]
fn crash_campaign_collections_with_snapshots() {
    with_collections(53, RecoveryMethodKind::Esm, Scheme::PD_ESM, 1_500, true);
}

#[test]
fn crash_campaign_collections_four_sessions() {
    let crashes = 1_500;
    let report = campaign(CampaignOptions {
        seed: 54,
        method: RecoveryMethodKind::Esm,
        scheme: Scheme::SD_ESM,
        crashes,
        sessions: 4,
        collections: true,
        ..CampaignOptions::default()
    });
    // Sessions meet on the tree's header, inner nodes and leaves: many conflicts, aborted and
    // retried, and still most crash points see commits and a checked tree.
    assert!(report.collection_steps > crashes, "{report:?}");
    assert!(report.collection_checks > crashes / 2, "{report:?}");
    assert!(report.aborts > 0, "{report:?}");
    assert!(
        report.crashes_with_commits_in_flight_together > 0,
        "{report:?}"
    );
}

/// Multi-level transactions under each strategy: three sessions' transfers interleaved, some
/// aborted and compensated, crashes in recovery and in the warm start included; the balances
/// after every crash are exactly the acknowledged commits'. Longer: `lodestore torture
/// --multi-level s2ps --sessions 4 --crashes 100000`.
#[test]
fn crash_campaign_multi_level_strategies() {
    use lodestore::multilevel::Strategy;
    for (method, strategy) in [
        (RecoveryMethodKind::Esm, Strategy::S2Ps),
        (RecoveryMethodKind::Esm, Strategy::S2),
        (RecoveryMethodKind::Esm, Strategy::S1),
        (RecoveryMethodKind::Wpl, Strategy::S2Ps),
        (RecoveryMethodKind::Dbcache, Strategy::S2Ps),
        (RecoveryMethodKind::Dbcache, Strategy::S2),
        (RecoveryMethodKind::Dbcache, Strategy::S1),
    ] {
        let options = CampaignOptions {
            method,
            sessions: 3,
            crashes: 1500,
            seed: 11,
            media_faults: false,
            ..CampaignOptions::default()
        };
        let report = lodestore_torture::multilevel::run(&options, strategy, |_| {});
        assert_no_violations(&report, &format!("{method} {strategy}"));
        assert_eq!(report.crashes, options.crashes);
        assert!(report.commits_acknowledged > options.crashes, "{report:?}");
        assert!(report.aborts > 0, "{report:?}");
        if method == RecoveryMethodKind::Esm {
            // ESM's restarts leave their pages to the next checkpoint, and the crashes after
            // them fall on a store whose redone pages have not gone home.
            assert!(report.restarts_deferring_checkpoint > 0, "{report:?}");
        }
        if method == RecoveryMethodKind::Esm && strategy == Strategy::S1 {
            // Flat transactions log nothing before their commit, so an ESM restart has no
            // loser to undo, and one that defers its checkpoint writes nothing a crash could
            // hit.
            assert!(
                report.crashes_during_recovery > 0 || report.restarts_deferring_checkpoint > 0,
                "{report:?}"
            );
        } else {
            assert!(report.crashes_during_recovery > 0, "{report:?}");
        }
        assert!(report.commits_in_flight > 0, "{report:?}");
    }
}

/// The database-cache method writing spheres early (at two pages): writes at subtransactions'
/// ends, not forced, beside the transactions' own.
#[test]
fn crash_campaign_multi_level_early_sphere_writes() {
    use lodestore::multilevel::Strategy;
    let options = CampaignOptions {
        method: RecoveryMethodKind::Dbcache,
        sessions: 3,
        crashes: 1500,
        seed: 12,
        media_faults: false,
        sphere_write_pages: 2,
        ..CampaignOptions::default()
    };
    let report = lodestore_torture::multilevel::run(&options, Strategy::S2Ps, |_| {});
    assert_no_violations(&report, "early sphere writes");
    assert!(report.commits_in_flight > 0, "{report:?}");
}

/// Multi-level transactions crashed at every one of the first 150 I/Os of a workload, three
/// times on each store, esm, wpl and dbcache.
#[test]
fn crash_campaign_multi_level_at_every_io() {
    use lodestore::multilevel::Strategy;
    for method in [
        RecoveryMethodKind::Esm,
        RecoveryMethodKind::Wpl,
        RecoveryMethodKind::Dbcache,
    ] {
        for every in 1..=150 {
            let options = CampaignOptions {
                method,
                sessions: 3,
                crashes: 3,
                every: Some(every),
                seed: every,
                media_faults: false,
                ..CampaignOptions::default()
            };
            let report = lodestore_torture::multilevel::run(&options, Strategy::S2Ps, |_| {});
            assert_no_violations(&report, &format!("{method} at I/O {every}"));
        }
    }
}
