//! Crash campaigns in the test suite: 100,000 simulated crash points in all, across every fault
//! kind (four seeds of 25,000, run in parallel), plus a campaign crashing at a fixed I/O.
//! Longer campaigns: `lodestore torture --seed S --crashes N`.

use lodestore_torture::{run, CampaignOptions};

fn campaign(options: CampaignOptions) {
    let report = run(&options, |_| {});
    for violation in &report.violations {
        eprintln!(
            "violation at crash {} ({}): {}\n  reproduce: {}",
            violation.crash, violation.fault, violation.message, violation.reproduce
        );
    }
    assert!(report.passed(), "{} violations", report.violations.len());
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
}

fn seeded(seed: u64) {
    campaign(CampaignOptions {
        seed,
        crashes: 25_000,
        ..CampaignOptions::default()
    });
}

#[test]
fn crash_campaign_seed_1() {
    seeded(1);
}

#[test]
fn crash_campaign_seed_2() {
    seeded(2);
}

#[test]
fn crash_campaign_seed_3() {
    seeded(3);
}

#[test]
fn crash_campaign_seed_4() {
    seeded(4);
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
