//! A model of a main-memory store under differential logging, checked against an oracle.
//!
//! Each seed plays a random history on a few small pages: transactions assigned to the idlest
//! of several log streams, strict page locks, changes logged as XOR records and, in a second
//! log of the same history, as physical records; commits (folded into the last change record
//! or separate) that force their stream; aborts undone in memory (XOR: no compensation
//! records, except for an abort while a checkpoint runs, which logs its undo as XOR records;
//! physical: compensation records, forced before the locks are released); fuzzy ping-pong checkpoints (Algorithm 2) whose page
//! copies interleave with everything else. Then a crash cuts each stream anywhere past what it
//! made durable, and every restart rebuilds the image from the last complete checkpoint's
//! backup. The oracle: the initial image with exactly the changes of the transactions whose
//! commit survived the cut.
//!
//! A failing seed reproduces alone: `LODESTORE_DL_MODEL_SEED=N cargo test -p
//! lodestore-difflog --test model`.

use lodestore_core::{Error, Lsn, PageId, Result, TxnId};
use lodestore_difflog::marks::{CheckpointBegin, CheckpointEnd};
use lodestore_difflog::physical::PhysicalRecordBuilder;
use lodestore_difflog::restart::parallel::{replay_streams, restore_level4, XorRestart};
use lodestore_difflog::restart::{
    one_pass, physical_redo_merging, physical_two_pass, physical_undo_after_merge, two_pass,
    MemoryImage, OnePassForward, Replay, StreamTail, Window,
};
use lodestore_difflog::xor::{self, XorRecordBuilder};
use lodestore_wal::record::Body;
use lodestore_wal::{Record, RecordBody};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::{HashMap, HashSet};
use std::path::Path;

const PAGE_SIZE: usize = 48;
const LSN_STEP: u64 = 64;

/// One log (XOR or physical) of the history: its streams and how far each is durable.
#[derive(Default)]
struct Log {
    streams: Vec<Vec<Record>>,
    durable: Vec<usize>,
    /// The windows of the last complete checkpoint (the anchor's).
    anchor: Vec<Window>,
    /// The begin marks' LSNs of the checkpoint running.
    begins: Vec<Lsn>,
}

impl Log {
    fn new(streams: usize) -> Log {
        Log {
            streams: vec![Vec::new(); streams],
            durable: vec![0; streams],
            anchor: vec![Window::default(); streams],
            begins: vec![Lsn::ZERO; streams],
        }
    }

    fn append(&mut self, stream: usize, txn: Option<TxnId>, prev: Lsn, body: &dyn Body) -> Lsn {
        let records = &mut self.streams[stream];
        let lsn = Lsn(4096 + records.len() as u64 * LSN_STEP);
        let mut bytes = vec![0u8; body.body_len()];
        let flags = body.write_body(&mut bytes);
        let body = match body.kind() {
            4 => RecordBody::Commit,
            5 => RecordBody::Abort,
            kind => RecordBody::Family {
                kind,
                flags,
                body: bytes,
            },
        };
        records.push(Record {
            lsn,
            prev,
            txn,
            body,
        });
        lsn
    }

    fn flush(&mut self, stream: usize) {
        self.durable[stream] = self.streams[stream].len();
    }

    fn pending(&self, stream: usize) -> usize {
        self.streams[stream].len() - self.durable[stream]
    }
}

/// A change: page, offset, bytes before, bytes after.
type Change = (usize, usize, Vec<u8>, Vec<u8>);

struct Txn {
    stream: usize,
    /// Its changes, in order.
    changes: Vec<Change>,
    last: [Lsn; 2],
}

struct Model {
    rng: StdRng,
    pages: usize,
    initial: Vec<Vec<u8>>,
    mem: Vec<Vec<u8>>,
    backup_id: Vec<bool>,
    dirty: [Vec<bool>; 2],
    backups: [Vec<Vec<u8>>; 2],
    /// The checkpoint the anchor names.
    checkpoint: u64,
    /// The checkpoint running and the next page it copies.
    running: Option<(u64, usize)>,
    logs: [Log; 2],
    txns: HashMap<TxnId, Txn>,
    /// Every transaction's changes, for the oracle.
    history: HashMap<TxnId, Vec<Change>>,
    owner: Vec<Option<TxnId>>,
    next_txn: u64,
    serial: u64,
    /// Fold a commit into the last change record this often (percent).
    fold_commits: u32,
}

/// Struct of a commit or abort body: the engine's own kinds.
struct End(u8);
impl Body for End {
    fn kind(&self) -> u8 {
        self.0
    }
    fn body_len(&self) -> usize {
        0
    }
    fn write_body(&self, _: &mut [u8]) -> u16 {
        0
    }
}

const XOR: usize = 0;
const PHYSICAL: usize = 1;

impl Model {
    fn new(seed: u64) -> Model {
        let mut rng = StdRng::seed_from_u64(seed);
        let pages = rng.random_range(2..8);
        let streams = rng.random_range(1..5);
        let initial: Vec<Vec<u8>> = (0..pages)
            .map(|_| (0..PAGE_SIZE).map(|_| rng.random()).collect())
            .collect();
        Model {
            pages,
            mem: initial.clone(),
            backup_id: vec![false; pages],
            dirty: [vec![false; pages], vec![false; pages]],
            backups: [initial.clone(), initial.clone()],
            initial,
            checkpoint: 0,
            running: None,
            logs: [Log::new(streams), Log::new(streams)],
            txns: HashMap::new(),
            history: HashMap::new(),
            owner: vec![None; pages],
            next_txn: 1,
            serial: 0,
            fold_commits: rng.random_range(0..=100),
            rng,
        }
    }

    fn step(&mut self) {
        let roll = self.rng.random_range(0..100);
        let active: Vec<TxnId> = {
            let mut v: Vec<TxnId> = self.txns.keys().copied().collect();
            v.sort();
            v
        };
        if roll < 12 || active.is_empty() {
            self.begin();
        } else if roll < 55 {
            let txn = active[self.rng.random_range(0..active.len())];
            self.change(txn, false);
        } else if roll < 70 {
            let txn = active[self.rng.random_range(0..active.len())];
            self.commit(txn);
        } else if roll < 76 {
            let txn = active[self.rng.random_range(0..active.len())];
            self.abort(txn);
        } else {
            self.checkpoint_step();
        }
    }

    fn begin(&mut self) {
        // The idlest stream: fewest records waiting to be made durable.
        let log = &self.logs[XOR];
        let stream = (0..log.streams.len())
            .min_by_key(|&s| (log.pending(s), self.rng.random_range(0..4u32)))
            .unwrap();
        let txn = TxnId(self.next_txn);
        self.next_txn += 1;
        self.txns.insert(
            txn,
            Txn {
                stream,
                changes: Vec::new(),
                last: [Lsn::ZERO; 2],
            },
        );
        self.history.insert(txn, Vec::new());
    }

    /// One record of one to three changes on pages `txn` may lock; returns false if none.
    fn change(&mut self, txn: TxnId, commits: bool) -> bool {
        let free: Vec<usize> = (0..self.pages)
            .filter(|&p| self.owner[p].is_none_or(|o| o == txn))
            .collect();
        if free.is_empty() {
            return false;
        }
        let mut xb = XorRecordBuilder::new();
        let mut pb = PhysicalRecordBuilder::changes(self.serial + 1);
        for _ in 0..self.rng.random_range(1..4) {
            let page = free[self.rng.random_range(0..free.len())];
            let offset = self.rng.random_range(0..PAGE_SIZE);
            let len = self.rng.random_range(1..=PAGE_SIZE - offset);
            let before = self.mem[page][offset..offset + len].to_vec();
            let after: Vec<u8> = (0..len).map(|_| self.rng.random()).collect();
            xb.push_change(
                PageId(page as u32),
                offset,
                self.backup_id[page],
                &before,
                &after,
            );
            pb.push(PageId(page as u32), offset, &before, &after);
            self.mem[page][offset..offset + len].copy_from_slice(&after);
            self.dirty[0][page] = true;
            self.dirty[1][page] = true;
            self.owner[page] = Some(txn);
            let change = (page, offset, before, after);
            self.history.get_mut(&txn).unwrap().push(change.clone());
            self.txns.get_mut(&txn).unwrap().changes.push(change);
        }
        self.serial += 1;
        let t = self.txns.get_mut(&txn).unwrap();
        let (stream, last) = (t.stream, t.last);
        let x = self.logs[XOR].append(stream, Some(txn), last[XOR], &xb.commits(commits));
        let p = self.logs[PHYSICAL].append(stream, Some(txn), last[PHYSICAL], &pb.commits(commits));
        t.last = [x, p];
        true
    }

    fn commit(&mut self, txn: TxnId) {
        let fold = self.rng.random_range(0..100) < self.fold_commits;
        if !(fold && self.change(txn, true)) {
            let t = &self.txns[&txn];
            let (stream, last) = (t.stream, t.last);
            self.logs[XOR].append(stream, Some(txn), last[XOR], &End(4));
            self.logs[PHYSICAL].append(stream, Some(txn), last[PHYSICAL], &End(4));
        }
        let stream = self.txns[&txn].stream;
        // A commit is acknowledged once its stream is durable.
        self.logs[XOR].flush(stream);
        self.logs[PHYSICAL].flush(stream);
        self.release(txn);
    }

    fn abort(&mut self, txn: TxnId) {
        let t = self.txns.remove(&txn).unwrap();
        let mut xb = XorRecordBuilder::new();
        self.serial += 1;
        let mut clr = PhysicalRecordBuilder::compensation(self.serial);
        for (page, offset, before, after) in t.changes.iter().rev() {
            // Undo in memory: no record needed, except while a checkpoint may be copying the
            // page, when the undo may or may not reach the backup (see the restart's rule).
            if self.running.is_some() {
                xb.push_change(
                    PageId(*page as u32),
                    *offset,
                    self.backup_id[*page],
                    after,
                    before,
                );
            }
            clr.push(PageId(*page as u32), *offset, after, before);
            self.mem[*page][*offset..*offset + before.len()].copy_from_slice(before);
            self.dirty[0][*page] = true;
            self.dirty[1][*page] = true;
        }
        let mut last = t.last;
        if !xb.is_empty() {
            last[XOR] = self.logs[XOR].append(t.stream, Some(txn), last[XOR], &xb);
        }
        if !t.changes.is_empty() {
            last[PHYSICAL] = self.logs[PHYSICAL].append(t.stream, Some(txn), last[PHYSICAL], &clr);
        }
        self.logs[XOR].append(t.stream, Some(txn), last[XOR], &End(5));
        self.logs[PHYSICAL].append(t.stream, Some(txn), last[PHYSICAL], &End(5));
        // Physical undo needs the abort durable before the locks go: a later writer's change
        // in another stream must never be followed by this transaction's undo at restart.
        // XOR undo commutes with the later change, so differential logging need not wait.
        self.logs[PHYSICAL].flush(t.stream);
        self.history.remove(&txn);
        self.unlock(txn);
    }

    fn release(&mut self, txn: TxnId) {
        self.txns.remove(&txn);
        self.unlock(txn);
    }

    fn unlock(&mut self, txn: TxnId) {
        for o in &mut self.owner {
            if *o == Some(txn) {
                *o = None;
            }
        }
    }

    fn checkpoint_step(&mut self) {
        match self.running {
            None => {
                let k = self.checkpoint + 1;
                for (which, log) in self.logs.iter_mut().enumerate() {
                    for s in 0..log.streams.len() {
                        let mut active: Vec<(TxnId, Lsn)> = self
                            .txns
                            .iter()
                            .filter(|(_, t)| t.stream == s && t.last[which] != Lsn::ZERO)
                            .map(|(id, t)| (*id, t.last[which]))
                            .collect();
                        active.sort();
                        let mark = CheckpointBegin {
                            checkpoint: k,
                            active,
                        };
                        log.begins[s] = log.append(s, None, Lsn::ZERO, &mark);
                    }
                }
                self.running = Some((k, 0));
            }
            Some((k, page)) if page < self.pages => {
                // Algorithm 2, step 2, under the page's latch.
                let b = (k % 2) as usize;
                self.backup_id[page] = k % 2 == 1;
                if self.dirty[b][page] {
                    self.backups[b][page] = self.mem[page].clone();
                    self.dirty[b][page] = false;
                }
                self.running = Some((k, page + 1));
            }
            Some((k, _)) => {
                for log in &mut self.logs {
                    for s in 0..log.streams.len() {
                        let end = log.append(s, None, Lsn::ZERO, &CheckpointEnd { checkpoint: k });
                        log.flush(s);
                        log.anchor[s] = Window {
                            begin: log.begins[s],
                            end,
                        };
                    }
                }
                self.checkpoint = k;
                self.running = None;
            }
        }
    }

    /// The image a restart must rebuild from `log` cut at `cuts`.
    fn expected(&self, which: usize, cuts: &[usize]) -> Vec<Vec<u8>> {
        let mut committed = HashSet::new();
        for (s, cut) in cuts.iter().enumerate() {
            for r in &self.logs[which].streams[s][..*cut] {
                let commits = match &r.body {
                    RecordBody::Commit => true,
                    RecordBody::Family { flags, .. } => flags & xor::FLAG_COMMITS != 0,
                    _ => false,
                };
                if commits {
                    committed.insert(r.txn.unwrap());
                }
            }
        }
        let mut image = self.initial.clone();
        for txn in committed {
            for (page, offset, before, after) in &self.history[&txn] {
                let mut delta = Vec::new();
                xor::push_delta(before, after, &mut delta);
                xor::xor_into(&mut image[*page][*offset..*offset + delta.len()], &delta);
            }
        }
        image
    }
}

fn lookup(records: &[Record], lsn: Lsn) -> Result<Record> {
    records
        .iter()
        .find(|r| r.lsn == lsn)
        .cloned()
        .ok_or_else(|| Error::InvalidArgument(format!("no record at {lsn}")))
}

fn run_seed(seed: u64) {
    let mut model = Model::new(seed);
    let steps = model.rng.random_range(10..400);
    for _ in 0..steps {
        model.step();
    }
    let k = model.checkpoint;
    let checkpoint_id = k % 2 == 1;
    let backup = model.backups[(k % 2) as usize].clone();
    let path = Path::new("stream");
    for which in [XOR, PHYSICAL] {
        let log = &model.logs[which];
        let cuts: Vec<usize> = (0..log.streams.len())
            .map(|s| {
                model
                    .rng
                    .random_range(log.durable[s]..=log.streams[s].len())
            })
            .collect();
        let expected = model.expected(which, &cuts);
        let cut_streams: Vec<&[Record]> = cuts
            .iter()
            .enumerate()
            .map(|(s, cut)| &log.streams[s][..*cut])
            .collect();
        let readers: Vec<Box<dyn Fn(Lsn) -> Result<Record> + Sync>> = cut_streams
            .iter()
            .map(|records| {
                let records: &[Record] = records;
                Box::new(move |lsn| lookup(records, lsn))
                    as Box<dyn Fn(Lsn) -> Result<Record> + Sync>
            })
            .collect();
        let tails: Vec<StreamTail<'_>> = cut_streams
            .iter()
            .enumerate()
            .map(|(s, records)| {
                let window = log.anchor[s];
                let from = records
                    .iter()
                    .position(|r| r.lsn >= window.begin)
                    .unwrap_or(records.len());
                StreamTail {
                    path,
                    records: &records[from..],
                    window,
                    read: readers[s].as_ref(),
                }
            })
            .collect();
        let context = format!("seed {seed}, checkpoint {k}, cuts {cuts:?}");
        if which == XOR {
            for (name, restart) in [("DL1P", XorRestart::OnePass), ("DL2P", XorRestart::TwoPass)] {
                let image = MemoryImage::from_pages(backup.clone());
                for tail in &tails {
                    match restart {
                        XorRestart::OnePass => one_pass(tail, checkpoint_id, &image),
                        XorRestart::TwoPass => two_pass(tail, checkpoint_id, &image),
                    }
                    .unwrap_or_else(|e| panic!("{name}, {context}: {e}"));
                }
                assert_eq!(image.into_pages(), expected, "{name}, {context}");
            }
            let image = MemoryImage::from_pages(backup.clone());
            let mut backward = Replay::default();
            let mut forward = Replay::default();
            for tail in &tails {
                backward.add(
                    &one_pass(
                        tail,
                        checkpoint_id,
                        &MemoryImage::from_pages(backup.clone()),
                    )
                    .unwrap(),
                );
                let mut pass = OnePassForward::new(tail.path, tail.window, checkpoint_id, &image);
                for record in tail.records {
                    pass.push(record.clone())
                        .unwrap_or_else(|e| panic!("DL1P forward, {context}: {e}"));
                }
                forward.add(
                    &pass
                        .finish(tail.read)
                        .unwrap_or_else(|e| panic!("DL1P forward, {context}: {e}")),
                );
                // Every page a change of the window names is counted, decided or not.
                let named_end = tail
                    .records
                    .iter()
                    .filter_map(|record| match &record.body {
                        RecordBody::Family {
                            kind: lodestore_difflog::kinds::XOR_CHANGES,
                            flags,
                            body,
                        } => xor::ranges(*flags, body)
                            .map(|range| range.unwrap().page.0 + 1)
                            .max(),
                        _ => None,
                    })
                    .max()
                    .unwrap_or(0);
                assert_eq!(pass.pages_end(), named_end, "DL1P forward pages, {context}");
            }
            assert_eq!(image.into_pages(), expected, "DL1P forward, {context}");
            assert_eq!(
                (
                    forward.ranges_redone,
                    forward.ranges_undone,
                    forward.committed,
                    forward.rolled_back
                ),
                (
                    backward.ranges_redone,
                    backward.ranges_undone,
                    backward.committed,
                    backward.rolled_back
                ),
                "DL1P forward and backward decide alike, {context}"
            );
            let image = MemoryImage::from_pages(backup.clone());
            replay_streams(XorRestart::OnePass, &tails, checkpoint_id, &image, 3).unwrap();
            assert_eq!(image.into_pages(), expected, "DL1P on threads, {context}");
            let image = MemoryImage::zeroed(model.pages, PAGE_SIZE);
            let read = |p: usize, buf: &mut [u8]| {
                buf.copy_from_slice(&backup[p]);
                Ok(())
            };
            restore_level4(
                XorRestart::OnePass,
                &image,
                &read,
                2,
                &tails,
                checkpoint_id,
                2,
            )
            .unwrap();
            assert_eq!(image.into_pages(), expected, "DL1P level 4, {context}");
        } else {
            let image = MemoryImage::from_pages(backup.clone());
            let batch = physical_two_pass(&tails, &image)
                .unwrap_or_else(|e| panic!("PL2P, {context}: {e}"));
            assert_eq!(image.into_pages(), expected, "PL2P, {context}");

            // Pipelined: each stream fed from a thread of its own through a small channel,
            // pass 1 merging as the records arrive.
            let image = MemoryImage::from_pages(backup.clone());
            let (records, pass_one) = std::thread::scope(|scope| {
                let mut receivers = Vec::new();
                for tail in &tails {
                    let (send, arriving) = std::sync::mpsc::sync_channel(2);
                    receivers.push((tail.path, tail.window, arriving));
                    let records = tail.records;
                    scope.spawn(move || {
                        for record in records {
                            send.send(record.clone()).unwrap();
                        }
                    });
                }
                physical_redo_merging(receivers, &image)
                    .unwrap_or_else(|e| panic!("PL2P merging, {context}: {e}"))
            });
            let merged_tails: Vec<StreamTail<'_>> = tails
                .iter()
                .zip(&records)
                .map(|(tail, records)| StreamTail {
                    path: tail.path,
                    records,
                    window: tail.window,
                    read: tail.read,
                })
                .collect();
            let pipelined = physical_undo_after_merge(&merged_tails, &image, pass_one)
                .unwrap_or_else(|e| panic!("PL2P pipelined, {context}: {e}"));
            assert_eq!(image.into_pages(), expected, "PL2P pipelined, {context}");
            assert_eq!(
                pipelined, batch,
                "PL2P pipelined and batch alike, {context}"
            );
        }
    }
}

#[test]
fn every_restart_rebuilds_exactly_the_committed_changes() {
    if let Ok(seed) = std::env::var("LODESTORE_DL_MODEL_SEED") {
        run_seed(seed.parse().expect("a seed is a number"));
        return;
    }
    let seeds: u64 = std::env::var("LODESTORE_DL_MODEL_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000);
    for seed in 0..seeds {
        run_seed(seed);
    }
}
