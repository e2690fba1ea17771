//! Reads from the sealed runs: a queue's entries from an offset, each from
//! the newest run that holds it, found through the queue's list of runs.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::entry::{Entry, QueueMap};
use crate::run::{Run, Span};

/// The runs holding one queue, for reads at old offsets: each run's start
/// and the queue's span there, in log order, and how far the runs were looked
/// at (runs sealed later are looked at on the next read).
#[derive(Debug, Default)]
pub(crate) struct Located {
    spans: Vec<(u64, Span)>,
    scanned_to: u64,
    /// Some span starts below the end of one before it (the queue was cut):
    /// a read then looks for the newest span holding each offset, instead
    /// of a binary search over spans that follow one another.
    cut: bool,
}

/// The most queues whose run lists are kept (a list is rebuilt when needed).
const LOCATED_QUEUES: usize = 65_536;

/// Reads `queue`'s entries from `at` (below `limit`, where a newer row in
/// memory takes over) out of `runs` into `out` (up to `max` in all), finding
/// old offsets through `locator` (each queue's list of runs); returns the
/// offset after the last read (`at` if no run holds it).
pub(crate) fn read_runs(
    locator: &Mutex<QueueMap<Located>>,
    runs: &[Arc<Run>],
    queue: u64,
    mut at: u64,
    limit: u64,
    max: usize,
    out: &mut Vec<Entry>,
) -> u64 {
    // A consumer near the end reads the newest run.
    if let Some((run, span)) = runs.last().and_then(|run| run.span(queue).map(|span| (run, span))) {
        if span.first <= at && at < span.end() {
            let stop = limit.min(span.end());
            while at < stop && out.len() < max {
                out.push(run.entry(span, at));
                at += 1;
            }
            return at;
        }
    }
    // An older offset is found through the queue's list of runs (built
    // once, then extended by the runs sealed since).
    let Some(front) = runs.first() else { return at };
    let mut locator = locator.lock();
    if locator.len() >= LOCATED_QUEUES && !locator.contains_key(&queue) {
        locator.clear();
    }
    let located = locator.entry(queue).or_default();
    // Runs expired since: off the front; runs sealed since: scanned.
    located.spans.retain(|(from, _)| *from >= front.log_from);
    let scanned_to = located.scanned_to.max(front.log_from);
    let new = runs.partition_point(|r| r.log_from < scanned_to);
    for run in &runs[new..] {
        if let Some(span) = run.span(queue) {
            let last_end = located.spans.last().map(|(_, s)| s.end());
            located.cut |= last_end.is_some_and(|end| span.first < end);
            located.spans.push((run.log_from, span));
        }
    }
    located.scanned_to = runs.last().map_or(scanned_to, |r| r.log_to);
    let run_of = |from: u64| runs.binary_search_by_key(&from, |r| r.log_from).ok().map(|i| &runs[i]);
    if !located.cut {
        // Spans follow one another: the first ending past `at` holds it.
        let first = located.spans.partition_point(|(_, span)| span.end() <= at);
        for &(from, span) in &located.spans[first..] {
            let Some(run) = run_of(from) else { break };
            at = at.max(span.first);
            let stop = limit.min(span.end());
            while at < stop && out.len() < max {
                out.push(run.entry(span, at));
                at += 1;
            }
            if out.len() >= max || at >= limit {
                break;
            }
        }
        return at;
    }
    while out.len() < max && at < limit {
        // The newest span holding `at`; a newer one starting past `at`
        // takes over from its start.
        let mut stop = limit;
        let mut held = None;
        for &(from, span) in located.spans.iter().rev() {
            if span.first <= at && at < span.end() {
                held = Some((from, span));
                break;
            }
            if span.first <= at {
                return at; // a newer span cut the queue at or below `at`
            }
            stop = stop.min(span.first);
        }
        let Some((run, span)) = held.and_then(|(from, span)| run_of(from).map(|run| (run, span))) else {
            return at;
        };
        let stop = stop.min(span.end());
        while at < stop && out.len() < max {
            out.push(run.entry(span, at));
            at += 1;
        }
    }
    at
}
