//! Parsers for the numbers the command line takes. Each refuses what a command could not run
//! with (zero where at least one is needed, infinity, NaN, values past a stated limit) before
//! any work starts, and clap names the argument in the error.

use std::ops::RangeInclusive;

/// Longest duration any command runs for: a week.
pub const SECONDS_MAX: f64 = 7.0 * 24.0 * 3600.0;
/// Most threads a command starts (each has a client cache of its own).
pub const THREADS_MAX: u64 = 256;
/// Most objects the demo builds (its index of OIDs is one object of 8 bytes each).
pub const DEMO_OBJECTS_MAX: u64 = 50_000_000;
/// Most accounts `stress` keeps (its bank root is one object of 8 bytes each).
pub const ACCOUNTS_MAX: u64 = 10_000_000;
/// Most repetitions of one measurement.
pub const RUNS_MAX: u64 = 1000;

fn integer_in(text: &str, range: RangeInclusive<u64>) -> Result<u64, String> {
    let value: u64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a whole number"))?;
    if !range.contains(&value) {
        return Err(format!(
            "{value} is out of range: from {} to {}",
            range.start(),
            range.end()
        ));
    }
    Ok(value)
}

/// A duration in seconds: finite, more than zero, at most a week.
pub fn seconds(text: &str) -> Result<f64, String> {
    let value: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !value.is_finite() || value <= 0.0 || value > SECONDS_MAX {
        return Err(format!(
            "{text} seconds: give a finite number more than 0 and at most {SECONDS_MAX}"
        ));
    }
    Ok(value)
}

/// A duration in seconds that may be zero (`stress --seconds 0` only sets up its bank).
pub fn seconds_or_zero(text: &str) -> Result<f64, String> {
    if text.trim().parse::<f64>() == Ok(0.0) {
        return Ok(0.0);
    }
    seconds(text)
}

/// A multi-level strategy: s1, s2 or s2ps.
pub fn strategy(text: &str) -> Result<lodestore::multilevel::Strategy, String> {
    text.parse().map_err(|e: lodestore::Error| e.to_string())
}

pub fn threads(text: &str) -> Result<u32, String> {
    integer_in(text, 1..=THREADS_MAX).map(|n| n as u32)
}

pub fn thread_count(text: &str) -> Result<usize, String> {
    integer_in(text, 1..=THREADS_MAX).map(|n| n as usize)
}

/// An adaptive commit delay in microseconds, up to `lodestore_server::COMMIT_DELAY_MAX`.
pub fn commit_delay_us(text: &str) -> Result<u64, String> {
    integer_in(
        text,
        0..=lodestore_server::COMMIT_DELAY_MAX.as_micros() as u64,
    )
}

/// A number of other transactions, 0 to the most threads a benchmark runs.
pub fn thread_count_or_zero(text: &str) -> Result<usize, String> {
    integer_in(text, 0..=THREADS_MAX).map(|n| n as usize)
}

pub fn demo_objects(text: &str) -> Result<u64, String> {
    integer_in(text, 1..=DEMO_OBJECTS_MAX)
}

pub fn accounts(text: &str) -> Result<u64, String> {
    integer_in(text, 2..=ACCOUNTS_MAX)
}

pub fn runs(text: &str) -> Result<usize, String> {
    integer_in(text, 1..=RUNS_MAX).map(|n| n as usize)
}

pub fn runs_u32(text: &str) -> Result<u32, String> {
    integer_in(text, 1..=RUNS_MAX).map(|n| n as u32)
}

/// Requests per timed burst.
pub fn requests(text: &str) -> Result<usize, String> {
    integer_in(text, 1..=10_000_000).map(|n| n as usize)
}

/// OO1 database size in parts.
pub fn oo1_parts(text: &str) -> Result<u64, String> {
    integer_in(text, 10..=10_000_000)
}

/// OO1 parts, or 0 for none.
pub fn oo1_parts_or_none(text: &str) -> Result<u64, String> {
    if text.trim() == "0" {
        return Ok(0);
    }
    oo1_parts(text)
}

/// Traversals per commit of a long-running transaction.
pub fn iterations(text: &str) -> Result<u32, String> {
    integer_in(text, 1..=100_000).map(|n| n as u32)
}

/// Crash points of a campaign.
pub fn crash_points(text: &str) -> Result<u64, String> {
    integer_in(text, 1..=100_000_000)
}

/// Bytes of a recovery buffer given on the command line: at least a page, at most 1 GiB.
pub fn recovery_buffer(text: &str) -> Result<usize, String> {
    integer_in(text, 4096..=1 << 30).map(|n| n as usize)
}

/// One of the page sizes a store may have.
pub fn page_size(text: &str) -> Result<usize, String> {
    let value = integer_in(text, 0..=u64::MAX)?;
    match usize::try_from(value) {
        Ok(size) if lodestore::page_size_is_supported(size) => Ok(size),
        _ => Err(format!(
            "{value} is not one of {:?}",
            lodestore::PAGE_SIZES_SUPPORTED
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Cli;
    use clap::Parser;
    use proptest::prelude::*;

    #[test]
    fn the_values_that_crashed_commands_are_refused_by_name() {
        let stress = |flag: &'static str, value: &'static str| {
            vec!["lodestore", "stress", "s", "--acks", "a", flag, value]
        };
        for args in [
            vec!["lodestore", "init", "s", "--page-size", "0"],
            vec!["lodestore", "init", "s", "--page-size", "5000"],
            stress("--seconds", "inf"),
            stress("--seconds", "1e300"),
            stress("--seconds", "NaN"),
            stress("--threads", "100000"),
            stress("--accounts", "1"),
            vec![
                "lodestore",
                "demo",
                "s",
                "--objects",
                "18446744073709551615",
            ],
            vec!["lodestore", "demo", "s", "--objects", "0"],
            vec!["lodestore", "bench", "commit", "p", "--threads", "0"],
            vec!["lodestore", "bench", "detect", "p", "--runs", "0"],
            vec![
                "lodestore",
                "bench",
                "oo1",
                "--parts",
                "18446744073709551615",
            ],
            vec!["lodestore", "bench", "oo1", "--iterations-per-commit", "0"],
            vec!["lodestore", "torture", "--crashes", "0"],
            vec!["lodestore", "torture", "--recovery-buffer", "0"],
        ] {
            let flag = args[args.len() - 2];
            let error = match Cli::try_parse_from(&args) {
                Err(error) => error.to_string(),
                Ok(_) => panic!("{args:?} was accepted"),
            };
            assert!(error.contains(flag), "{args:?}: {error}");
        }
    }

    fn number_like() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<u64>().prop_map(|n| n.to_string()),
            any::<i64>().prop_map(|n| n.to_string()),
            any::<f64>().prop_map(|x| x.to_string()),
            Just("inf".to_string()),
            Just("-inf".to_string()),
            Just("NaN".to_string()),
            Just("1e300".to_string()),
            Just("".to_string()),
            "[0-9a-z.e+-]{0,12}",
        ]
    }

    fn command_line() -> impl Strategy<Value = Vec<String>> {
        let flags = prop_oneof![
            Just(("init", "--page-size")),
            Just(("demo", "--objects")),
            Just(("demo", "--page-size")),
            Just(("stress", "--seconds")),
            Just(("stress", "--threads")),
            Just(("stress", "--accounts")),
        ];
        (flags, number_like()).prop_map(|((command, flag), value)| {
            let mut args = vec![
                "lodestore".to_string(),
                command.to_string(),
                "s".to_string(),
            ];
            if command == "stress" {
                args.extend(["--acks".to_string(), "a".to_string()]);
            }
            args.push(format!("{flag}={value}"));
            args
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        /// Any value for any numeric argument parses to one within its limits or is refused
        /// with the argument named; never a panic.
        #[test]
        fn arbitrary_numbers_parse_within_limits_or_are_refused(args in command_line()) {
            let flag = args.last().unwrap().split('=').next().unwrap().to_string();
            match Cli::try_parse_from(&args) {
                Err(error) => prop_assert!(
                    error.to_string().contains(&flag) || error.kind() == clap::error::ErrorKind::UnknownArgument,
                    "{:?}: {}", args, error
                ),
                Ok(cli) => match cli.command {
                    crate::Command::Init { page_size, .. } => {
                        prop_assert!(lodestore::page_size_is_supported(page_size));
                    }
                    crate::Command::Demo { objects, page_size, .. } => {
                        prop_assert!((1..=DEMO_OBJECTS_MAX).contains(&objects));
                        prop_assert!(lodestore::page_size_is_supported(page_size));
                    }
                    crate::Command::Stress { seconds, threads, accounts, .. } => {
                        prop_assert!((0.0..=SECONDS_MAX).contains(&seconds));
                        prop_assert!((1..=THREADS_MAX as u32).contains(&threads));
                        prop_assert!((2..=ACCOUNTS_MAX).contains(&accounts));
                    }
                    _ => prop_assert!(false, "parsed as another command"),
                },
            }
        }

        /// Any option values give a store or an error naming the value, never a panic. Most
        /// values drawn are near or inside the limits, so both outcomes are exercised.
        #[test]
        fn arbitrary_options_open_or_are_refused(
            page_size in prop_oneof![
                1 => Just(None),
                1 => any::<usize>().prop_map(Some),
                1 => (0usize..70_000).prop_map(Some),
                3 => (0usize..5).prop_map(|i| Some(4096 << i)),
            ],
            cache in prop_oneof![1 => any::<usize>(), 3 => 0usize..(8 << 20)],
            pool in prop_oneof![1 => any::<usize>(), 3 => 0usize..(8 << 20)],
            buffer in prop_oneof![1 => any::<usize>(), 3 => 0usize..(1 << 20)],
            segment in prop_oneof![
                1 => any::<u64>(),
                1 => 0u64..(2 << 20),
                3 => (64u64..256).prop_map(|k| k * 4096),
            ],
            checkpoint in prop_oneof![1 => any::<u64>(), 1 => Just(0u64), 2 => 1u64..(1 << 30)],
            timeout_ms in prop_oneof![1 => any::<u64>(), 3 => 0u64..100_000],
        ) {
            let fs = std::sync::Arc::new(lodestore::MemoryFileSystem::new());
            let mut options = lodestore::Options::new()
                .file_system(fs)
                .client_cache_bytes(cache)
                .server_pool_bytes(pool)
                .recovery_buffer_bytes(buffer)
                .log_segment_bytes(segment)
                .checkpoint_log_bytes(checkpoint)
                .lock_wait_timeout(std::time::Duration::from_millis(timeout_ms));
            if let Some(size) = page_size {
                options = options.page_size(size);
            }
            match lodestore::Store::create("/s", options) {
                Ok(store) => prop_assert!(lodestore::page_size_is_supported(store.page_size())),
                Err(error) => prop_assert!(!error.to_string().is_empty()),
            }
        }
    }
}
