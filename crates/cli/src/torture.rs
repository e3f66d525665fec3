//! `lodestore torture`: a crash campaign with a progress bar and a summary.

use indicatif::{ProgressBar, ProgressStyle};
use lodestore::{RecoveryMethodKind, Result};
use lodestore_torture::CampaignOptions;
use std::process::ExitCode;

pub fn run(
    method: &str,
    seed: u64,
    crashes: u64,
    every: Option<u64>,
    media_faults: bool,
    json: bool,
) -> Result<ExitCode> {
    let method: RecoveryMethodKind = method.parse()?;
    if every == Some(0) {
        return Err(lodestore::Error::InvalidArgument(
            "--every must be at least 1".into(),
        ));
    }
    let options = CampaignOptions {
        method,
        seed,
        crashes,
        every,
        media_faults,
        ..CampaignOptions::default()
    };
    let bar = ProgressBar::new(crashes);
    bar.set_style(
        ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40}] {pos}/{len} crashes ({per_sec}, eta {eta})",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    let report = lodestore_torture::run(&options, |done| {
        if done % 100 == 0 {
            bar.set_position(done);
        }
    });
    bar.finish_and_clear();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("report serialises")
        );
    } else {
        println!(
            "method {}  seed {}  crash points {}  in {:.1} s",
            report.method,
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
            "  commits acknowledged         {:>8}",
            report.commits_acknowledged
        );
        println!("  aborts                       {:>8}", report.aborts);
        println!(
            "  commits in flight at a crash {:>8} ({} survived whole, the rest left no trace)",
            report.commits_in_flight, report.commits_in_flight_survived
        );
        println!(
            "  media faults: {} reported as errors, {} recovered intact",
            report.media_faults_detected, report.media_faults_survived
        );
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
