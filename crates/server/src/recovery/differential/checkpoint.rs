//! Differential logging's files (attached when the method becomes the store's) and its fuzzy
//! ping-pong checkpoints (Algorithm 2).
//!
//! A checkpoint `k` writes backup `k % 2`. It begins with a mark in every stream listing the
//! stream's active transactions; then, a few pages per step under the server's state (the
//! page latch of the paper), it sets each page's BackupID to `k`'s parity and copies the page
//! into the backup if it changed since that backup last received it; transactions run between
//! steps. The end marks follow, every stream is flushed, the backup synced, and only then does
//! the anchor name checkpoint `k`. Steps are taken by committers (a bounded number of pages
//! each, so a campaign replays exactly) and by a background worker.

use super::state::{
    check_fits, data_pages, is_data_page, stream_dir, DlState, Running, Streams,
    DIFFERENTIAL_DIR_NAME,
};
use super::{dl, dl_mut, RecoveryMethodKind};
use crate::server::{Server, State};
use lodestore_core::{Error, Lsn, PageId, Result};
use lodestore_difflog::anchor::{anchor_path, Anchor, Checkpointed, STREAMS_MAX};
use lodestore_difflog::backup::Backup;
use lodestore_difflog::marks::{CheckpointBegin, CheckpointEnd};
use lodestore_difflog::restart::Window;
use lodestore_storage::page;
use lodestore_wal::record::RecordFormat;
use lodestore_wal::{Log, LogOptions};
use std::collections::BTreeSet;
use std::sync::Arc;

/// Pages copied into both backups per write when a store first takes the method.
const INITIAL_COPY_PAGES: usize = 256;

/// Opens the family's files, or creates them when the store has just taken the method (or
/// one whose streams hold other records): both backups then start as the store is now.
pub(crate) fn attach(
    kind: RecoveryMethodKind,
    server: &Server,
    state: &mut State,
) -> Result<(Arc<Streams>, DlState)> {
    let fs = server.fs.clone();
    let dir = server.dir.join(DIFFERENTIAL_DIR_NAME);
    let page_size = server.volume.page_size();
    let volume_id = server.volume.volume_id();
    // Streams frame their records compactly: a small transaction's record is mostly its
    // changes, and the fixed part is paid by every transaction (ARCHITECTURE, "Records").
    let log_options = LogOptions {
        record_format: RecordFormat::Compact,
        ..server.log.options().clone()
    };
    let recorded = RecoveryMethodKind::from_code(server.volume.superblock().recovery_method);
    let fresh = !recorded.same_log(kind) || !fs.exists(&anchor_path(&dir));
    let count = server.volume.page_count();
    check_fits(server, state.pool.capacity(), count)?;
    let open_backups = || -> Result<[Backup; 2]> {
        Ok([
            Backup::open(fs.as_ref(), &dir, 0, page_size, volume_id)?,
            Backup::open(fs.as_ref(), &dir, 1, page_size, volume_id)?,
        ])
    };
    let mut recovered = None;
    let (logs, backups, anchor, done) = if fresh {
        let streams = server.options().log_streams;
        if !(1..=STREAMS_MAX).contains(&streams) {
            return Err(Error::InvalidArgument(format!(
                "{streams} log streams: from 1 to {STREAMS_MAX}"
            )));
        }
        if fs.is_dir(&dir) {
            fs.remove_dir_all(&dir)?;
        }
        fs.create_dir_all(&dir)?;
        let logs = (0..streams)
            .map(|s| Log::create(fs.clone(), &stream_dir(&dir, s), log_options.clone()))
            .collect::<Result<Vec<_>>>()?;
        let backups = open_backups()?;
        let pages: Vec<PageId> = data_pages(count, page_size).collect();
        for chunk in pages.chunks(INITIAL_COPY_PAGES) {
            let mut copies = Vec::with_capacity(chunk.len());
            for &p in chunk {
                server.cache_page(state, p)?;
                copies.push(state.pool.get(p).expect("page just cached").to_vec());
            }
            let mut refs: Vec<&mut [u8]> = copies.iter_mut().map(|c| &mut c[..]).collect();
            backups[0].write_pages(&mut refs)?;
            backups[1].write_pages(&mut refs)?;
        }
        backups[0].sync()?;
        backups[1].sync()?;
        let done = Checkpointed {
            checkpoint: 0,
            page_count: count,
            windows: vec![Window::default(); streams],
        };
        let anchor = Anchor::create(fs.as_ref(), &dir, &done)?;
        (logs, backups, anchor, done)
    } else {
        let (anchor, done) = Anchor::open(fs.as_ref(), &dir)?;
        let backups = open_backups()?;
        let (logs, rebuilt) = super::restart::open_and_replay(
            kind,
            server,
            state.pool.capacity(),
            super::restart::StreamsAt {
                dir: &dir,
                options: &log_options,
                done: &done,
            },
            &backups[done.backup()],
        )?;
        recovered = Some(rebuilt);
        if logs.len() != server.options().log_streams {
            tracing::debug!(
                store = logs.len(),
                asked = server.options().log_streams,
                "the store keeps its number of log streams"
            );
        }
        (logs, backups, anchor, done)
    };
    let streams = Arc::new(Streams { logs });
    let stream_count = streams.logs.len();
    let ends = streams.logs.iter().map(Log::end_lsn).collect();
    // Versions must exceed every LSN or version a page carries now.
    let max_lsn = data_pages(count, page_size)
        .filter_map(|p| state.pool.get(p).map(|image| page::lsn(image).0))
        .max()
        .unwrap_or(0);
    let dl = DlState {
        streams: streams.clone(),
        txns: Default::default(),
        writers: vec![0; stream_count],
        backup_id: vec![done.backup_id(); count as usize],
        changed: [BTreeSet::new(), BTreeSet::new()],
        backup_pages: if fresh { [count, count] } else { [0, 0] },
        backups,
        anchor,
        done,
        running: None,
        ends_at_checkpoint: ends,
        next_version: max_lsn + 1,
        next_serial: 1,
        recovered,
    };
    Ok((streams, dl))
}

/// Is a checkpoint due: have the streams grown by the checkpoint interval since the last one
/// began?
fn due(server: &Server, dl: &DlState) -> bool {
    let grown: u64 = dl
        .streams
        .logs
        .iter()
        .zip(&dl.ends_at_checkpoint)
        .map(|(log, at)| log.end_lsn().0.saturating_sub(at.0))
        .sum();
    grown >= server.options().checkpoint_log_bytes
}

/// Begins a checkpoint if one is due, and takes a step of the one running (at most
/// `pages_max` page copies). Returns whether a checkpoint is still running.
pub(crate) fn progress(server: &Server, state: &mut State, pages_max: usize) -> Result<bool> {
    if dl(state).running.is_none() {
        if !due(server, dl(state)) {
            return Ok(false);
        }
        begin(state)?;
    }
    step(server, state, pages_max)?;
    Ok(dl(state).running.is_some())
}

/// Finishes the checkpoint running, if any, then takes a whole one: afterwards the anchor's
/// backup holds every change made so far.
pub(crate) fn complete(server: &Server, state: &mut State) -> Result<()> {
    while dl(state).running.is_some() {
        step(server, state, usize::MAX)?;
    }
    begin(state)?;
    while dl(state).running.is_some() {
        step(server, state, usize::MAX)?;
    }
    Ok(())
}

/// One turn of the background checkpointer.
pub(crate) fn worker_turn(server: &Server) -> Result<bool> {
    let mut state = server.usable_state()?;
    progress(server, &mut state, super::CHECKPOINT_STEP_PAGES)
}

/// Algorithm 2, step 1: begin marks in every stream, each listing the stream's active
/// transactions and their last records.
fn begin(state: &mut State) -> Result<()> {
    let dl = dl_mut(state);
    debug_assert!(dl.running.is_none());
    // From now on any page may go into the backup: every change must be in a stream first.
    dl.append_all_pending()?;
    let streams = dl.streams.clone();
    let checkpoint = dl.done.checkpoint + 1;
    let mut begins = Vec::with_capacity(streams.logs.len());
    let mut keep_from = Vec::with_capacity(streams.logs.len());
    for (s, log) in streams.logs.iter().enumerate() {
        let on_stream = dl.txns.iter().filter(|(_, t)| t.stream == s);
        let active = on_stream.clone().map(|(id, t)| (*id, t.last)).collect();
        let oldest = on_stream.map(|(_, t)| t.first).min();
        let lsn = log.append(None, Lsn::ZERO, &CheckpointBegin { checkpoint, active })?;
        begins.push(lsn);
        keep_from.push(oldest.map_or(lsn, |o| o.min(lsn)));
        dl.ends_at_checkpoint[s] = log.end_lsn();
    }
    dl.running = Some(Running {
        checkpoint,
        next: 0,
        begins,
        keep_from,
    });
    Ok(())
}

/// Algorithm 2, step 2, for up to `pages_max` copies: each page visited takes the
/// checkpoint's BackupID, and a page the target backup lacks is copied into it.
fn step(server: &Server, state: &mut State, pages_max: usize) -> Result<()> {
    let page_size = server.volume.page_size();
    let count = server.volume.page_count();
    let (checkpoint, mut next) = {
        let running = dl(state).running.as_ref().expect("a checkpoint is running");
        (running.checkpoint, running.next)
    };
    let target = (checkpoint % 2) as usize;
    let backup_id = checkpoint % 2 == 1;
    {
        let dl = dl_mut(state);
        let fill = dl.done.backup_id();
        if dl.backup_id.len() < count as usize {
            dl.backup_id.resize(count as usize, fill);
        }
    }
    let mut copies: Vec<Vec<u8>> = Vec::new();
    let visits_max = pages_max.saturating_mul(64);
    let mut visited = 0;
    while next < count && copies.len() < pages_max && visited < visits_max {
        let p = PageId(next);
        next += 1;
        visited += 1;
        if !is_data_page(p, page_size) {
            continue;
        }
        let dl = dl_mut(state);
        dl.backup_id[p.0 as usize] = backup_id;
        let lacking = dl.changed[target].remove(&p) | (p.0 >= dl.backup_pages[target]);
        if lacking {
            server.cache_page(state, p)?;
            copies.push(state.pool.get(p).expect("page just cached").to_vec());
        }
    }
    let dl = dl_mut(state);
    dl.running.as_mut().expect("running").next = next;
    let mut refs: Vec<&mut [u8]> = copies.iter_mut().map(|c| &mut c[..]).collect();
    dl.backups[target].write_pages(&mut refs)?;
    if next >= count {
        finish(state, count)?;
    }
    Ok(())
}

/// Algorithm 2, step 3: end marks, every stream durable, the backup synced, then the anchor.
fn finish(state: &mut State, count: u32) -> Result<()> {
    let dl = dl_mut(state);
    let running = dl.running.take().expect("a checkpoint is running");
    let target = (running.checkpoint % 2) as usize;
    let streams = dl.streams.clone();
    let mut windows = Vec::with_capacity(streams.logs.len());
    for (s, log) in streams.logs.iter().enumerate() {
        let end = log.append(
            None,
            Lsn::ZERO,
            &CheckpointEnd {
                checkpoint: running.checkpoint,
            },
        )?;
        windows.push(Window {
            begin: running.begins[s],
            end,
        });
    }
    streams.flush_all()?;
    dl.backups[target].sync()?;
    let done = Checkpointed {
        checkpoint: running.checkpoint,
        page_count: count,
        windows,
    };
    dl.anchor.record(&done)?;
    dl.backup_pages[target] = count;
    dl.done = done;
    for (log, keep) in streams.logs.iter().zip(&running.keep_from) {
        log.recycle_before(*keep)?;
    }
    tracing::debug!(checkpoint = running.checkpoint, "differential checkpoint");
    Ok(())
}
