//! The Hosking, Brown & Moss experiments (sections 5 and 6) on OO1: lookup and traversal series
//! (1 cold and 9 warm iterations), update series at each update probability (10 cold-warm, then
//! 10 hot iterations starting where the last warm one did), and long-running transactions of
//! k hot update traversals per commit, fitted per scheme to y = a + b k. Every scheme sees the
//! same random sequence: the part numbers and update decisions depend on the seed, the
//! iteration and the probability, never on the scheme.

use crate::oo1::{self, ops};
use crate::record::{Meter, RunRecord};
use crate::workspace;
use lodestore::{Error, Options, Result, Scheme, Session, Store};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Iterations of each series, as OO1 prescribes.
pub const ITERATIONS: u32 = 10;

#[derive(Clone, Debug)]
pub struct Oo1Config {
    pub parts: u64,
    pub seed: u64,
    pub schemes: Vec<Scheme>,
    pub probabilities: Vec<f64>,
    /// Hot traversals per commit of the long-running transactions (empty: none).
    pub iterations_per_commit: Vec<u32>,
    /// Update probabilities of the long-running transactions.
    pub long_probabilities: Vec<f64>,
    pub runs: u32,
    pub recovery_buffer_bytes: usize,
    pub cache_bytes: usize,
    pub server_pool_bytes: usize,
    pub out: PathBuf,
    pub quiet: bool,
}

impl Oo1Config {
    fn preset(&self) -> String {
        format!("oo1-{}", self.parts)
    }
}

pub fn run(config: &Oo1Config) -> Result<Vec<RunRecord>> {
    if config.runs == 0 {
        return Err(Error::InvalidArgument("--runs must be at least 1".into()));
    }
    for &p in config
        .probabilities
        .iter()
        .chain(&config.long_probabilities)
    {
        if !(0.0..=1.0).contains(&p) {
            return Err(Error::InvalidArgument(format!(
                "update probability {p} is outside 0 to 1"
            )));
        }
    }
    let template = template(&config.out, config.parts, config.seed, config.quiet)?;
    let steps = config.runs as usize
        * config.schemes.len()
        * (1 + config.probabilities.len() + config.long_probabilities.len());
    let bar = workspace::progress_bar(steps as u64, "OO1", config.quiet);
    let mut records = Vec::new();
    for run in 1..=config.runs {
        for &scheme in &config.schemes {
            bar.set_message(format!("OO1 {}", scheme.name()));
            let mut bench = Bench::open(config, &template, scheme, run)?;
            bench.read_only_series(&mut records)?;
            bar.inc(1);
            for &p in &config.probabilities {
                let mut bench = Bench::open(config, &template, scheme, run)?;
                bench.update_series(p, &mut records)?;
                bar.inc(1);
            }
            for &p in &config.long_probabilities {
                let mut bench = Bench::open(config, &template, scheme, run)?;
                bench.long_running(p, &mut records)?;
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    workspace::remove_work(&config.out)?;
    Ok(records)
}

/// The OO1 database of `parts` parts for `seed`, generated once under `out/templates`.
pub fn template(out: &Path, parts: u64, seed: u64, quiet: bool) -> Result<PathBuf> {
    let name = format!("oo1-{parts}-seed{seed}-layout{}", oo1::LAYOUT);
    workspace::template(out, &name, |path| {
        let store = Store::create(path, Options::new())?;
        let bar = workspace::progress_bar(parts, "generating OO1", quiet);
        oo1::generate(&store, parts, seed, &bar)?;
        bar.finish_and_clear();
        Ok(())
    })
}

/// A fresh copy of the database, opened cold with one session.
struct Bench<'a> {
    config: &'a Oo1Config,
    scheme: Scheme,
    run: u32,
    // Declared before the store: a session ends before its store closes.
    session: Session,
    store: Store,
    index: oo1::schema::PartIndex,
}

impl<'a> Bench<'a> {
    fn open(config: &'a Oo1Config, template: &Path, scheme: Scheme, run: u32) -> Result<Bench<'a>> {
        let path = workspace::fresh_copy(template, &config.out)?;
        let options = Options::new()
            .scheme(scheme)
            .recovery_buffer_bytes(config.recovery_buffer_bytes)
            .client_cache_bytes(config.cache_bytes)
            .server_pool_bytes(config.server_pool_bytes);
        let store = Store::open(&path, options)?;
        let mut session = store.session()?;
        // Reading the root is the "schema information" a cold start may have.
        let mut txn = session.begin()?;
        let index = ops::root(&mut txn)?.index;
        txn.commit()?;
        Ok(Bench {
            config,
            scheme,
            run,
            session,
            store,
            index,
        })
    }

    /// The random stream of one iteration of one series: the same for every scheme.
    fn rng(&self, series: u64, iteration: u32) -> StdRng {
        StdRng::seed_from_u64(
            self.config
                .seed
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .wrapping_add(series << 32)
                .wrapping_add(iteration as u64 + 1000 * self.run as u64),
        )
    }

    fn start_number(&self, iteration: u32) -> u64 {
        self.rng(0, iteration).random_range(1..=self.config.parts)
    }

    fn record(
        &self,
        experiment: &str,
        operation: &str,
        iteration: Option<u32>,
        temperature: &str,
    ) -> RunRecord {
        RunRecord {
            experiment: experiment.into(),
            preset: self.config.preset(),
            scheme: self.scheme.name().into(),
            traversal: operation.into(),
            clients: 1,
            client: 0,
            run: self.run,
            iteration,
            temperature: temperature.into(),
            recovery_buffer_bytes: self.config.recovery_buffer_bytes as u64,
            cache_bytes: self.config.cache_bytes as u64,
            ..RunRecord::default()
        }
    }

    /// Lookup and traversal, 10 iterations each (1 cold, 9 warm).
    fn read_only_series(&mut self, records: &mut Vec<RunRecord>) -> Result<()> {
        for iteration in 1..=ITERATIONS {
            let mut rng = self.rng(1, iteration);
            let numbers: Vec<u64> = (0..ops::LOOKUP_PARTS)
                .map(|_| rng.random_range(1..=self.config.parts))
                .collect();
            let mut record = self.record(
                "oo1-lookup",
                "lookup",
                Some(iteration),
                temperature(iteration),
            );
            let meter = Meter::start(&self.store, &self.session);
            let started = Instant::now();
            let mut txn = self.session.begin()?;
            let counts = ops::lookup(&mut txn, self.index, &numbers)?;
            txn.commit()?;
            meter.finish(&self.store, &self.session, started.elapsed(), &mut record);
            record.parts_visited = Some(counts.parts_visited);
            records.push(record);
        }
        for iteration in 1..=ITERATIONS {
            let record = self.record(
                "oo1-traversal",
                "traversal",
                Some(iteration),
                temperature(iteration),
            );
            records.push(self.traversals(record, self.start_number(iteration), 0.0, 1, 2)?);
        }
        Ok(())
    }

    /// Update at probability `p`: 10 cold-warm iterations, then 10 hot ones from the last start.
    fn update_series(&mut self, p: f64, records: &mut Vec<RunRecord>) -> Result<()> {
        for iteration in 1..=ITERATIONS {
            let mut record = self.record(
                "oo1-update",
                "update",
                Some(iteration),
                temperature(iteration),
            );
            record.update_probability = Some(p);
            records.push(self.traversals(record, self.start_number(iteration), p, 1, 3)?);
        }
        let hot_start = self.start_number(ITERATIONS);
        for iteration in 1..=ITERATIONS {
            let mut record = self.record("oo1-update", "update", Some(iteration), "hot");
            record.update_probability = Some(p);
            records.push(self.traversals(record, hot_start, p, 1, 4)?);
        }
        Ok(())
    }

    /// Long-running transactions of k hot update traversals per commit, for each k.
    fn long_running(&mut self, p: f64, records: &mut Vec<RunRecord>) -> Result<()> {
        let hot_start = self.start_number(ITERATIONS);
        // Warm the cache with the hot traversal first.
        let warm = self.record("oo1-long", "warm-up", None, "hot");
        self.traversals(warm, hot_start, p, 1, 5)?;
        for &k in &self.config.iterations_per_commit.clone() {
            let mut record = self.record("oo1-long", "long-update", None, "hot");
            record.update_probability = Some(p);
            record.iterations_per_commit = Some(k);
            records.push(self.traversals(record, hot_start, p, k, 6)?);
        }
        Ok(())
    }

    /// `k` traversals from part `start` as one transaction, measured into `record`.
    fn traversals(
        &mut self,
        mut record: RunRecord,
        start: u64,
        p: f64,
        k: u32,
        series: u64,
    ) -> Result<RunRecord> {
        let mut rng = self.rng(series, record.iteration.unwrap_or(k));
        let meter = Meter::start(&self.store, &self.session);
        let started = Instant::now();
        let mut txn = self.session.begin()?;
        let start = ops::part_by_number(&mut txn, self.index, start)?;
        let mut visited = 0;
        let mut updates = 0;
        let mut distinct = 0;
        for _ in 0..k {
            let counts = ops::traverse(&mut txn, start, p, &mut rng)?;
            visited += counts.parts_visited;
            updates += counts.updates;
            distinct = distinct.max(counts.distinct_objects_modified);
        }
        txn.commit()?;
        meter.finish(&self.store, &self.session, started.elapsed(), &mut record);
        record.parts_visited = Some(visited);
        record.updates = updates;
        record.distinct_objects_modified = distinct;
        Ok(record)
    }
}

fn temperature(iteration: u32) -> &'static str {
    if iteration == 1 {
        "cold"
    } else {
        "warm"
    }
}

/// Least-squares fit of y = a + b x; `None` with fewer than two distinct x.
pub fn fit_line(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mean_x = points.iter().map(|p| p.0).sum::<f64>() / n;
    let mean_y = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mean_x).powi(2)).sum();
    if sxx == 0.0 {
        return None;
    }
    let sxy: f64 = points.iter().map(|p| (p.0 - mean_x) * (p.1 - mean_y)).sum();
    let b = sxy / sxx;
    Some((mean_y - b * mean_x, b))
}
