//! Restart under differential logging: the last complete checkpoint's backup loaded into
//! memory, every stream read from that checkpoint's begin mark, the method's replay
//! (`lodestore_difflog::restart`: DL1P or DL2P with one thread per stream, or PL2P), and the
//! pages installed in the pool, every one of them resident from then on.

use super::state::{check_fits, data_pages, is_data_page, Streams};
use super::{dl, dl_mut, read_stream, RecoveryMethodKind};
use crate::recovery::restart::{Replayed, RestartPass};
use crate::recovery::RestartReport;
use crate::server::{Server, State};
use lodestore_core::{Lsn, PageId, Result};
use lodestore_difflog::kinds::{PHYSICAL_CHANGES, PHYSICAL_COMPENSATION, XOR_CHANGES};
use lodestore_difflog::restart::parallel::{replay_streams, XorRestart};
use lodestore_difflog::restart::{physical_two_pass, MemoryImage, StreamTail};
use lodestore_difflog::{physical, xor};
use lodestore_storage::page;
use lodestore_wal::{Record, RecordBody};
use std::collections::BTreeSet;
use std::sync::Arc;

pub(crate) struct DlRestart {
    pub kind: RecoveryMethodKind,
    pub streams: Arc<Streams>,
}

impl RestartPass for DlRestart {
    /// The server's own log holds only its checkpoints under this method.
    fn scanned(&mut self, _record: Record) {}

    fn replay(
        self: Box<Self>,
        server: &Server,
        state: &mut State,
        report: &mut RestartReport,
    ) -> Result<Replayed> {
        let page_size = server.volume.page_size();
        let done = dl(state).done.clone();
        let started = std::time::Instant::now();
        let first_lsn = Lsn(server.log.options().segment_bytes);
        let records: Vec<Vec<Record>> = self
            .streams
            .logs
            .iter()
            .zip(&done.windows)
            .map(|(log, window)| {
                let from = if window.begin == Lsn::ZERO {
                    first_lsn
                } else {
                    window.begin
                };
                read_stream(log, from)
            })
            .collect::<Result<_>>()?;

        report.log_read_us = started.elapsed().as_micros() as u64;
        // What the records name: the pages to load, the highest transaction and serial.
        let mut pages_end = done.page_count.max(server.volume.page_count());
        let mut txn_max = 0;
        let mut serial_max = 0;
        for record in records.iter().flatten() {
            txn_max = txn_max.max(record.txn.map_or(0, |t| t.0));
            if let RecordBody::Family { kind, body, .. } = &record.body {
                match *kind {
                    XOR_CHANGES => {
                        for range in xor::ranges(body).flatten() {
                            pages_end = pages_end.max(range.page.0.saturating_add(1));
                        }
                    }
                    PHYSICAL_CHANGES | PHYSICAL_COMPENSATION => {
                        if let Ok((serial, ranges)) = physical::parse(*kind, body) {
                            serial_max = serial_max.max(serial);
                            for range in ranges {
                                pages_end = pages_end.max(range.page.0.saturating_add(1));
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        check_fits(server, state.pool.capacity(), pages_end)?;
        server.volume.extend_to(pages_end)?;

        // The backup as its checkpoint left it; pages past it as a file extension writes them.
        let loading = std::time::Instant::now();
        let mut pages = Vec::with_capacity(pages_end as usize);
        {
            let dl = dl(state);
            let backup = &dl.backups[done.backup()];
            for p in (0..pages_end).map(PageId) {
                let mut buf = vec![0u8; page_size];
                if is_data_page(p, page_size) {
                    if p.0 < done.page_count {
                        backup.read_page(p, &mut buf)?;
                    } else {
                        server.volume.format_new_page(p, &mut buf);
                    }
                }
                pages.push(buf);
            }
        }
        let image = MemoryImage::from_pages(pages);
        report.backup_load_us = loading.elapsed().as_micros() as u64;
        let replaying = std::time::Instant::now();

        let readers: Vec<Box<dyn Fn(Lsn) -> Result<Record> + Sync + '_>> = self
            .streams
            .logs
            .iter()
            .map(|log| {
                Box::new(move |lsn| log.read(lsn)) as Box<dyn Fn(Lsn) -> Result<Record> + Sync>
            })
            .collect();
        let tails: Vec<StreamTail<'_>> = self
            .streams
            .logs
            .iter()
            .enumerate()
            .map(|(s, log)| StreamTail {
                path: log.dir(),
                records: &records[s],
                window: done.windows[s],
                read: readers[s].as_ref(),
            })
            .collect();
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(tails.len());
        let replay = match self.kind {
            RecoveryMethodKind::Dl2p => replay_streams(
                XorRestart::TwoPass,
                &tails,
                done.backup_id(),
                &image,
                threads,
            )?,
            RecoveryMethodKind::Pl2p => physical_two_pass(&tails, &image)?,
            _ => replay_streams(
                XorRestart::OnePass,
                &tails,
                done.backup_id(),
                &image,
                threads,
            )?,
        };
        report.replay_us = replaying.elapsed().as_micros() as u64;
        report.records_scanned += replay.records;
        report.redo_applied += replay.ranges_redone;
        report.records_undone += replay.ranges_undone;
        report.losers += replay.rolled_back;

        // Every page resident, with a version above any a client may have seen before the
        // crash: each change since the checkpoint took one and logged at least a byte.
        let logged: u64 = self
            .streams
            .logs
            .iter()
            .zip(&done.windows)
            .map(|(log, w)| log.end_lsn().0.saturating_sub(w.begin.0.max(first_lsn.0)))
            .sum();
        let mut version = (0..image.page_count())
            .map(|p| page::lsn(&image.page(p)).0)
            .max()
            .unwrap_or(0)
            + logged
            + 1;
        let touched: BTreeSet<PageId> = data_pages(pages_end, page_size).collect();
        for &p in &touched {
            let mut bytes = image.page(p.0 as usize);
            page::set_lsn(&mut bytes, Lsn(version));
            if state.pool.contains(p) {
                server.put_changed(state, p, &bytes, Lsn(version));
            } else {
                server.install(state, p, &bytes)?;
                state.pool.mark_dirty(p, Lsn(version));
            }
            version += 1;
        }

        let dl = dl_mut(state);
        dl.backup_id = vec![done.backup_id(); pages_end as usize];
        // Both backups lack what the replay changed; the other one may be half written.
        dl.changed = [touched.clone(), touched.clone()];
        dl.backup_pages = [0, 0];
        dl.backup_pages[done.backup()] = done.page_count;
        dl.next_version = version;
        dl.next_serial = serial_max + 1;
        dl.ends_at_checkpoint = self.streams.logs.iter().map(|l| l.end_lsn()).collect();
        Ok(Replayed {
            touched,
            txn_max,
            install_all: false,
        })
    }
}
