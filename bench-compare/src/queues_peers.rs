//! Workload (d) on raft-engine (one region per queue, every region on one
//! append stream), on fjall (an LSM keyed by queue and offset, as RocketMQ 5's
//! RocksDB consume queue) and on a reference model of a Kafka-style layout
//! (one append file per queue).

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use crate::queues::{drive, poll_until, resources, DLine, Flush, QueueSystem, Target};
use crate::scratch;

/// raft-engine with a region per queue.
pub const RAFT_ENGINE_REGIONS: QueueSystem =
    QueueSystem { name: "raft-engine 0.4.2, a region per queue", ours: false, run: raft_engine };

/// fjall 3, one keyspace keyed by queue and offset.
pub const FJALL_KEYED: QueueSystem =
    QueueSystem { name: "fjall 3.1.13, keyed by queue and offset", ours: false, run: fjall_keyed };

/// One append file per queue, built here as a reference model.
pub const FILE_PER_QUEUE: QueueSystem =
    QueueSystem { name: "file per queue (reference model, built here)", ours: false, run: file_per_queue };

// ---- raft-engine --------------------------------------------------------------------

struct Regions {
    engine: raft_engine::Engine,
    next: Vec<AtomicU64>,
    sync: bool,
}

impl Target for Regions {
    fn put(&self, _producer: usize, queue: u32, body: &[u8]) -> Result<u64, String> {
        let offset = self.next[queue as usize].fetch_add(1, Ordering::Relaxed);
        let mut batch = raft_engine::LogBatch::default();
        batch.put(u64::from(queue) + 1, offset.to_be_bytes().to_vec(), body.to_vec()).map_err(|e| e.to_string())?;
        self.engine.write(&mut batch, self.sync).map_err(|e| e.to_string())?;
        Ok(offset)
    }

    fn tails(&self) -> bool {
        true
    }

    /// A consumer polling the region: a message is there once its put
    /// returned; until then it looks again every 20 µs.
    fn tail(&self, queue: u32, offset: u64, max: usize) -> Result<u64, String> {
        let region = u64::from(queue) + 1;
        let get = |o: u64| self.engine.get(region, &o.to_be_bytes());
        poll_until(|| Ok(get(offset).is_some()), || format!("region {region} key {offset}"))?;
        let mut n = 1;
        while n < max as u64 && get(offset + n).is_some() {
            n += 1;
        }
        Ok(n)
    }
}

fn raft_engine(queues: u32, flush: Flush, per_producer: usize) -> Result<DLine, String> {
    let dir = scratch();
    let before = resources();
    let cfg = raft_engine::Config { dir: dir.path().to_string_lossy().into_owned(), ..Default::default() };
    let engine = raft_engine::Engine::open(cfg).map_err(|e| e.to_string())?;
    let regions =
        Regions { engine, next: (0..queues).map(|_| AtomicU64::new(0)).collect(), sync: flush == Flush::Sync };
    drive(&regions, queues, per_producer, before)
}

// ---- fjall -------------------------------------------------------------------------

struct Keyed {
    db: fjall3::Database,
    messages: fjall3::Keyspace,
    next: Vec<AtomicU64>,
    sync: bool,
}

/// A message's key: the queue, then its offset, both big-endian (so a
/// queue's messages are one ordered range).
fn key(queue: u32, offset: u64) -> [u8; 12] {
    let mut key = [0u8; 12];
    key[..4].copy_from_slice(&queue.to_be_bytes());
    key[4..].copy_from_slice(&offset.to_be_bytes());
    key
}

impl Target for Keyed {
    fn put(&self, _producer: usize, queue: u32, body: &[u8]) -> Result<u64, String> {
        let offset = self.next[queue as usize].fetch_add(1, Ordering::Relaxed);
        self.messages.insert(key(queue, offset), body).map_err(|e| e.to_string())?;
        if self.sync {
            self.db.persist(fjall3::PersistMode::SyncData).map_err(|e| e.to_string())?;
        }
        Ok(offset)
    }

    fn tails(&self) -> bool {
        true
    }

    /// A consumer polling the keyspace, as for raft-engine's regions: a
    /// message is there once its put returned; until then it looks again
    /// every 20 µs; then it reads on in key order.
    fn tail(&self, queue: u32, offset: u64, max: usize) -> Result<u64, String> {
        let first = key(queue, offset);
        poll_until(
            || self.messages.contains_key(first).map_err(|e| e.to_string()),
            || format!("queue {queue} offset {offset}"),
        )?;
        let mut n = 0u64;
        for item in self.messages.range(first..key(queue, u64::MAX)).take(max) {
            let (k, _) = item.into_inner().map_err(|e| e.to_string())?;
            if k.as_ref() != key(queue, offset + n) {
                break;
            }
            n += 1;
        }
        Ok(n.max(1))
    }
}

fn fjall_keyed(queues: u32, flush: Flush, per_producer: usize) -> Result<DLine, String> {
    let dir = scratch();
    let before = resources();
    let db = fjall3::Database::builder(dir.path()).open().map_err(|e| e.to_string())?;
    let messages = db.keyspace("messages", fjall3::KeyspaceCreateOptions::default).map_err(|e| e.to_string())?;
    let keyed =
        Keyed { db, messages, next: (0..queues).map(|_| AtomicU64::new(0)).collect(), sync: flush == Flush::Sync };
    drive(&keyed, queues, per_producer, before)
}

// ---- one file per queue -------------------------------------------------------------

/// Files kept open at once: beyond it the oldest opened is closed (after its
/// sync under sync flush, which holds its own handle), as a log-per-partition
/// broker must within `ulimit -n`.
const OPEN_FILES: usize = 4_096;

struct QueueFile {
    file: Option<Arc<File>>,
    len: u64,
    next: u64,
}

/// Group commit over files: a round syncs every file written since the last
/// one, each with its own `fdatasync`, and answers everyone it covered.
#[derive(Default)]
struct Rounds {
    pending: HashMap<u32, Arc<File>>,
    collecting: u64,
    done: u64,
    stop: bool,
    error: Option<String>,
}

struct Files {
    dir: PathBuf,
    queues: Vec<Mutex<QueueFile>>,
    open: Mutex<VecDeque<u32>>,
    sync: Option<(Mutex<Rounds>, Condvar, Condvar)>,
}

impl Files {
    fn handle(&self, queue: u32, slot: &mut QueueFile) -> Result<(Arc<File>, bool), String> {
        if let Some(file) = &slot.file {
            return Ok((Arc::clone(file), false));
        }
        let path = self.dir.join(format!("{queue:05}.log"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let file = Arc::new(file);
        slot.file = Some(Arc::clone(&file));
        Ok((file, true))
    }

    /// Closes the oldest opened files beyond the budget.
    fn evict(&self, opened: u32) {
        let victims: Vec<u32> = {
            let mut open = self.open.lock().expect("open");
            open.push_back(opened);
            let over = open.len().saturating_sub(OPEN_FILES);
            open.drain(..over).collect()
        };
        for v in victims {
            self.queues[v as usize].lock().expect("queue").file = None;
        }
    }

    fn syncer(&self) {
        let Some((rounds, work, answered)) = &self.sync else { return };
        loop {
            let (files, round) = {
                let mut r = rounds.lock().expect("rounds");
                while r.pending.is_empty() && !r.stop {
                    r = work.wait(r).expect("rounds");
                }
                if r.pending.is_empty() && r.stop {
                    return;
                }
                let round = r.collecting;
                r.collecting += 1;
                (std::mem::take(&mut r.pending), round)
            };
            let mut error = None;
            for file in files.values() {
                if let Err(e) = file.sync_data() {
                    error = Some(e.to_string());
                }
            }
            let mut r = rounds.lock().expect("rounds");
            r.done = round + 1;
            if error.is_some() {
                r.error = error;
            }
            answered.notify_all();
        }
    }
}

impl Target for Files {
    fn put(&self, _producer: usize, queue: u32, body: &[u8]) -> Result<u64, String> {
        let (file, offset, opened) = {
            let mut slot = self.queues[queue as usize].lock().expect("queue");
            let (file, opened) = self.handle(queue, &mut slot)?;
            // A record: length, then the body.
            let mut record = Vec::with_capacity(4 + body.len());
            record.extend_from_slice(&(body.len() as u32).to_le_bytes());
            record.extend_from_slice(body);
            file.write_all_at(&record, slot.len).map_err(|e| e.to_string())?;
            slot.len += record.len() as u64;
            slot.next += 1;
            (file, slot.next - 1, opened)
        };
        if opened {
            self.evict(queue);
        }
        if let Some((rounds, work, answered)) = &self.sync {
            let mut r = rounds.lock().expect("rounds");
            r.pending.insert(queue, file);
            let mine = r.collecting + 1;
            work.notify_one();
            while r.done < mine {
                r = answered.wait(r).expect("rounds");
            }
            if let Some(e) = &r.error {
                return Err(e.clone());
            }
        }
        Ok(offset)
    }
}

fn file_per_queue(queues: u32, flush: Flush, per_producer: usize) -> Result<DLine, String> {
    let dir = scratch();
    let before = resources();
    let files = Files {
        dir: dir.path().to_path_buf(),
        queues: (0..queues).map(|_| Mutex::new(QueueFile { file: None, len: 0, next: 0 })).collect(),
        open: Mutex::new(VecDeque::new()),
        sync: (flush == Flush::Sync).then(|| (Mutex::new(Rounds::default()), Condvar::new(), Condvar::new())),
    };
    std::thread::scope(|scope| {
        scope.spawn(|| files.syncer());
        let line = drive(&files, queues, per_producer, before);
        if let Some((rounds, work, _)) = &files.sync {
            rounds.lock().expect("rounds").stop = true;
            work.notify_one();
        }
        line
    })
}
