//! Following the log as it grows: a reader from an offset that yields each
//! record once it is durable (or written, as the caller chooses), woken by the
//! log itself, blocking or as an async `Stream`.

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::record::Slot;
use crate::{CommitLog, Error, Record};

/// How far a [`Tail`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TailLimit {
    /// Records durable on disk (the flushed offset): nothing delivered can be
    /// taken back by a crash.
    Durable,
    /// Records written (readable), durable or not: sooner, but under async
    /// flush a crash can take back what was delivered.
    Written,
}

/// A reader that follows the log from an offset ([`CommitLog::tail`]).
///
/// Each record is delivered once, in log order, once it is within the
/// [`TailLimit`]; roll-overs are crossed. If the cleaning service deletes the
/// records the tail stands at before it reads them, it fails with
/// [`Error::FellBehind`] (never a wrong record); it ends (`None`) once the log
/// shuts down and it has delivered everything it could read.
///
/// Blocking: as an [`Iterator`] (`next` waits as long as it takes) and
/// [`next_timeout`](Self::next_timeout).
/// Async: `Tail` is a `futures_core::Stream` of `Result<Record, Error>`, woken
/// by the log (no polling), on any runtime.
#[derive(Debug)]
pub struct Tail {
    log: CommitLog,
    next: u64,
    limit: TailLimit,
}

impl CommitLog {
    /// A [`Tail`] from `offset` (a record start; [`min_offset`](Self::min_offset)
    /// for the whole log, [`max_offset`](Self::max_offset) for what comes next).
    pub fn tail(&self, offset: u64, limit: TailLimit) -> Tail {
        Tail { log: self.clone(), next: offset, limit }
    }
}

impl Tail {
    /// The offset of the next record this tail delivers.
    pub fn position(&self) -> u64 {
        self.next
    }

    /// The next record if one is there now; `Ok(None)` if not (yet).
    pub fn try_next(&mut self) -> Result<Option<Record>, Error> {
        loop {
            let min = self.log.min_offset();
            if self.next < min {
                return Err(Error::FellBehind { offset: self.next, min });
            }
            let limit = match self.limit {
                TailLimit::Durable => self.log.flushed_offset(),
                TailLimit::Written => self.log.max_offset(),
            };
            if self.next >= limit {
                return Ok(None);
            }
            match self.log.slot_within(self.next, limit) {
                Ok(Slot::Record(record)) => {
                    self.next = record.next_offset();
                    return Ok(Some(record));
                }
                // The log goes on at the next segment.
                Ok(Slot::Blank) => match self.log.after_blank(self.next) {
                    Some(next) => self.next = next,
                    None => return Ok(None),
                },
                Ok(Slot::End) | Err(Error::NotYetDurable { .. }) => return Ok(None),
                // Deleted between the look at the front and the read.
                Err(_) if self.next < self.log.min_offset() => {
                    return Err(Error::FellBehind { offset: self.next, min: self.log.min_offset() })
                }
                Err(Error::Shutdown) => return Ok(None),
                Err(err) => return Err(err),
            }
        }
    }

    /// The next record, waiting at most `timeout`: `Ok(None)` when none came
    /// (or the log shut down: see [`is_closed`](Self::is_closed)). Waiting as
    /// long as it takes is the [`Iterator`]: `for record in log.tail(..)`.
    pub fn next_timeout(&mut self, timeout: Duration) -> Result<Option<Record>, Error> {
        // No deadline past what an `Instant` can hold: wait as long as it takes.
        let deadline = Instant::now().checked_add(timeout);
        let passed = |deadline: Option<Instant>| deadline.is_some_and(|d| Instant::now() >= d);
        let signal = std::sync::Arc::clone(&self.log.inner.tails);
        loop {
            if let Some(record) = self.try_next()? {
                return Ok(Some(record));
            }
            let mut state = signal.state.lock();
            signal.interest.fetch_add(1, Ordering::SeqCst);
            // Looked at again once counted: a record written before the count
            // is seen here, one written after it bumps the signal.
            let seen = state.seq;
            let found = self.try_next();
            let result = match found {
                Ok(None) if !signal.closed.load(Ordering::SeqCst) => {
                    while state.seq == seen && !signal.closed.load(Ordering::SeqCst) {
                        match deadline {
                            Some(d) => {
                                if signal.cond.wait_until(&mut state, d).timed_out() {
                                    break;
                                }
                            }
                            None => signal.cond.wait(&mut state),
                        }
                    }
                    None
                }
                other => Some(other),
            };
            signal.interest.fetch_sub(1, Ordering::SeqCst);
            drop(state);
            match result {
                Some(found) => return found,
                None if passed(deadline) || signal.closed.load(Ordering::SeqCst) => return self.try_next(),
                None => {}
            }
        }
    }

    /// True once the log has shut down: the tail delivers what is left, then ends.
    pub fn is_closed(&self) -> bool {
        self.log.inner.tails.closed.load(Ordering::SeqCst)
    }
}

/// Blocking: each record as it comes, waiting as long as it takes; `None`
/// once the log has shut down (after everything readable was delivered).
impl Iterator for Tail {
    type Item = Result<Record, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.next_timeout(Duration::from_secs(3600)) {
                Ok(Some(record)) => return Some(Ok(record)),
                Err(err) => return Some(Err(err)),
                Ok(None) if self.is_closed() => return None,
                Ok(None) => {}
            }
        }
    }
}

impl futures_core::Stream for Tail {
    type Item = Result<Record, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        match this.try_next() {
            Ok(Some(record)) => return Poll::Ready(Some(Ok(record))),
            Err(err) => return Poll::Ready(Some(Err(err))),
            Ok(None) => {}
        }
        let signal = std::sync::Arc::clone(&this.log.inner.tails);
        let mut state = signal.state.lock();
        // A waker of this task may still be listed (polled again before a
        // signal): keep one, counted once.
        if !state.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            state.wakers.push(cx.waker().clone());
            signal.interest.fetch_add(1, Ordering::SeqCst);
        }
        // Looked at again once registered (see `next_timeout`).
        let found = this.try_next();
        let closed = signal.closed.load(Ordering::SeqCst);
        drop(state);
        match found {
            Ok(Some(record)) => Poll::Ready(Some(Ok(record))),
            Err(err) => Poll::Ready(Some(Err(err))),
            Ok(None) if closed => Poll::Ready(None),
            Ok(None) => Poll::Pending,
        }
    }
}
