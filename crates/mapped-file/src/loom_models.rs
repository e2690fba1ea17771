//! Loom models of the segment memory's position protocol (`cargo xtask loom`):
//! the appender, the committer (with a write buffer), readers holding zero-copy
//! views, and a reset (truncation), each on its own thread, over heap memory.
//!
//! Loom runs the threads on real memory one step at a time through every
//! interleaving of their locks and atomics, so a position published before its
//! bytes are in place shows up as a reader seeing wrong bytes, and a reset that
//! lets bytes change under a live view shows up as a view whose bytes changed.

use std::io;
use std::sync::Arc;

use loom::thread;
use transient_pool::{LockMemory, PoolConfig, TransientStorePool};

use crate::region::{Filled, Region, ResetRefused};
use crate::SegmentIo;
use store_io::SegmentMemory;

const LEN: usize = 64;

#[derive(Debug)]
struct NoIo;

impl SegmentIo for NoIo {
    fn sync_range(&self, _: &SegmentMemory, _: usize, _: usize) -> io::Result<()> {
        Ok(())
    }
    fn remove(&self) -> io::Result<()> {
        Ok(())
    }
}

fn region() -> Arc<Region> {
    Arc::new(Region::new(SegmentMemory::heap(vec![0; LEN]).expect("heap memory"), Box::new(NoIo)))
}

/// The byte every append writes at position `i`: never zero, so an unwritten
/// byte (zero) is told apart from a written one.
fn pattern(i: usize) -> u8 {
    (i % 250) as u8 + 1
}

fn append(region: &Region, bytes: usize) {
    let (_, filled) = region
        .append(usize::MAX, |pos, tail: &mut [u8]| {
            for (i, b) in tail[..bytes].iter_mut().enumerate() {
                *b = pattern(pos + i);
            }
            Filled::Wrote { bytes, value: () }
        })
        .unwrap_or_else(|_| panic!("fits"));
    assert!(matches!(filled, Filled::Wrote { .. }));
}

/// Everything a reader can see is complete: a view up to the read position it
/// loaded holds exactly the pattern.
fn assert_reader_sees_whole_appends(region: &Arc<Region>) {
    let committed = region.committed();
    let view = region.view(0, committed).expect("below the read position");
    for (i, &b) in view.as_ref().iter().enumerate() {
        assert_eq!(b, pattern(i), "reader saw byte {i} before it was written");
    }
}

#[test]
fn loom_appends_are_published_only_once_written() {
    loom::model(|| {
        let region = region();
        let appender = {
            let region = Arc::clone(&region);
            thread::spawn(move || {
                append(&region, 8);
                append(&region, 8);
            })
        };
        assert_reader_sees_whole_appends(&region);
        assert_reader_sees_whole_appends(&region);
        appender.join().unwrap();
        assert_eq!((region.wrote(), region.committed()), (16, 16));
        assert_reader_sees_whole_appends(&region);
    });
}

#[test]
fn loom_commits_publish_only_copied_bytes() {
    loom::model(|| {
        let mut config = PoolConfig::new(1, LEN);
        config.lock_memory = LockMemory::Never;
        let pool = TransientStorePool::new(config).expect("pool");
        let region = region();
        region.attach(pool.try_borrow().expect("buffer")).expect("attach");
        // Appends go to the buffer; commits copy them into the memory, racing the
        // next append and the reader.
        let writer = {
            let region = Arc::clone(&region);
            thread::spawn(move || {
                append(&region, 8);
                region.commit().expect("heap memory cannot fail a write");
                append(&region, 8);
                region.commit().expect("heap memory cannot fail a write");
            })
        };
        assert_reader_sees_whole_appends(&region);
        assert_reader_sees_whole_appends(&region);
        writer.join().unwrap();
        assert_eq!(
            region.commit().expect("heap memory cannot fail a write").1,
            16,
            "everything appended is committed at the end"
        );
        assert_reader_sees_whole_appends(&region);
    });
}

#[test]
fn loom_a_reset_never_changes_bytes_under_a_live_view() {
    loom::model(|| {
        let region = region();
        append(&region, 16);
        let reader = {
            let region = Arc::clone(&region);
            thread::spawn(move || {
                // Either the whole view, stable while held, or none (cut already).
                if let Some(view) = region.view(0, 16) {
                    let first: Vec<u8> = view.as_ref().to_vec();
                    thread::yield_now();
                    assert_eq!(view.as_ref(), &first[..], "bytes changed under a view");
                    assert!(first.iter().enumerate().all(|(i, &b)| b == pattern(i)));
                }
            })
        };
        let cut = region.reset(4, true);
        reader.join().unwrap();
        match cut {
            Ok(erased) => {
                assert_eq!(erased, 12, "the cut bytes were erased");
                assert_eq!((region.wrote(), region.committed()), (4, 4));
                assert!(region.view(0, 16).is_none(), "nothing past the cut is readable");
                assert_reader_sees_whole_appends(&region);
            }
            Err(ResetRefused::ViewsOutstanding(_)) => {
                assert_eq!(region.committed(), 16, "a refused reset moves nothing");
            }
            Err(ResetRefused::OutOfBounds) => unreachable!("4 is in bounds"),
            Err(ResetRefused::Write(_)) => unreachable!("heap memory cannot fail a write"),
        }
    });
}
