//! Sealing: the active run's part below a log offset written as one run file,
//! synced and mapped; and the queue table written as of the last run's end.

use std::sync::Arc;

use mapped_file::Storage;

use crate::active::{merge, seal_point, split_below};
use crate::entry::Extent;
use crate::error::IndexError;
use crate::index::{QueueIndex, State};
use crate::run::{self, Run};
use crate::table::{self, table_path};

impl QueueIndex {
    /// Seals the active run's entries of records below `log_to` as the run
    /// of `[its start, log_to)`: written, synced, and mapped for reads before
    /// this returns. Entries at or past `log_to` stay in the active run (the
    /// owner may go on dispatching while it seals what is durable). No entry
    /// below `log_to` may end past it (`log_to` lies between records). Nothing
    /// to seal (`log_to` at the active run's start) writes nothing. The owner
    /// seals only a durable, fully dispatched range; after it, dispatch goes
    /// on from `log_to` at the latest. The seal stops short of `log_to`, at
    /// the first entry a [`truncate`](Self::truncate) by a record at or past
    /// `log_to` dropped (the run must hold what its range held before that
    /// record): [`sealed_to`](Self::sealed_to) says where it ended.
    pub fn seal(&self, storage: &dyn Storage, log_to: u64) -> Result<(), IndexError> {
        let _one = self.sealer.lock();
        // The sealed entries are handed to the seal under the lock, and
        // written without it: appends go on into the active run, and reads
        // find the sealed entries where the seal keeps them until the run is
        // mapped.
        let (sealing, log_to) = {
            let mut state = self.state.write();
            let log_to = seal_point(&state.active, log_to);
            let sealing = split_below(&mut state.active, log_to)?;
            let Some(sealing) = sealing else { return Ok(()) };
            let sealing = Arc::new(sealing);
            state.sealing = Some(Arc::clone(&sealing));
            (sealing, log_to)
        };
        // A range without entries is written too (an empty run): the runs
        // stay contiguous (a gap reads as a lost run at open), and an open
        // after a power cut replays nothing a returned seal covered.
        let mut queues: Vec<run::Row<'_>> = sealing
            .queues
            .iter()
            .map(|(&queue, (first, entries))| run::Row {
                queue,
                first: *first,
                entries,
                restart: sealing.cuts.get(&queue).is_some_and(|cut| cut.restart),
            })
            .collect();
        queues.sort_unstable_by_key(|row| row.queue);
        let flags = if sealing.cuts.is_empty() { 0 } else { run::CUTS };
        let written = Run::write(storage, &self.dir, &run::encode(sealing.from, log_to, flags, &queues));
        drop(queues);
        let mut state = self.state.write();
        state.sealing = None;
        let run = match written {
            Ok(run) => Arc::new(run),
            Err(err) => {
                // Not sealed: the entries go back in front of what came since.
                let sealing = Arc::unwrap_or_clone(sealing);
                let later = std::mem::take(&mut state.active);
                state.active = merge(sealing, later);
                return Err(err);
            }
        };
        state.rows_since_table += run.queue_count();
        state.runs.push(run);
        if state.rows_since_table >= state.extents.len().max(self.config.table_every_rows) {
            self.write_table(storage, &mut state)?;
        }
        Ok(())
    }

    /// Writes every queue's extent as of the last run's end (without what
    /// the active run added: an open dispatches that again).
    pub(crate) fn write_table(&self, storage: &dyn Storage, state: &mut State) -> Result<(), IndexError> {
        let path = table_path(&self.dir);
        let bytes = if state.active.queues.is_empty() {
            table::encode(state.active.from, &state.extents)
        } else {
            // A queue's extent at the active run's start: its row starts at
            // its end then, unless a cut started it (saved when it was made).
            let mut extents = state.extents.clone();
            for (queue, (first, _)) in &state.active.queues {
                if let Some(extent) = extents.get_mut(queue) {
                    match state.active.before.get(queue) {
                        Some(before) => *extent = *before,
                        None => *extent = Extent { min: extent.min.min(*first), end: *first },
                    }
                }
            }
            table::encode(state.active.from, &extents)
        };
        storage.replace_small(&path, &bytes).map_err(|source| IndexError::Io { path, source })?;
        state.rows_since_table = 0;
        state.table_point = state.active.from;
        Ok(())
    }
}
