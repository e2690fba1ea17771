//! A replicated key-value node on openraft with the commit log as its log store,
//! talking to its peers over loopback TCP (length-prefixed JSON frames), plus the
//! drivers that run a 3-node cluster of real processes:
//!
//! ```text
//! raft-node serve --id 1 --addr 127.0.0.1:7001 --dir /tmp/n1 [--memory] [--no-snapshots]
//! raft-node init --addr 127.0.0.1:7001 --peers 1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003
//! raft-node put --addr 127.0.0.1:7001 --key K --value V  # follows the leader; prints the entry's index
//! raft-node kill-test [--kills 20] [--interval-ms 800]   # SIGKILL the leader again and again
//! raft-node bench [--store commitlog|memory] [--seconds 5] [--clients 32]
//! ```
//!
//! `kill-test` starts three `serve` processes, initializes the cluster, writes
//! from several clients (a write counts once `client_write` returned: committed
//! and applied on the leader), kills the leader with SIGKILL and restarts it on
//! the same directory, again and again, then reads every key from the last
//! leader and prints `N leader kills, M entries committed, K committed entries
//! lost`, with the last leader's snapshot and purge points and how many
//! snapshots restarted nodes installed (exit code 1 unless K is 0, or if enough
//! entries were committed for a purge and none happened). Nodes snapshot their
//! state machine every 1,000 entries into `<dir>/sm` and openraft purges the
//! log to 500 entries below it, so the store's purge, and its purge past the
//! last entry when a restarted node installs a snapshot, run under the kills
//! too. `bench` measures committed writes per
//! second of a cluster with this store or with an in-memory log store (the
//! ceiling: no durability at all).

#[path = "../tests/kv/mod.rs"]
mod kv;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use commitlog_raft::{RaftLogStore, RaftStoreConfig};
use kv::{NodeId, Request, StateMachine, TypeConfig};
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::{BasicNode, Config, Raft, SnapshotPolicy};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

type Error = Box<dyn std::error::Error + Send + Sync>;

/// A request on the wire.
#[derive(Serialize, Deserialize, Debug)]
enum Rpc {
    Append(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    Snapshot(InstallSnapshotRequest<TypeConfig>),
    /// A client write.
    Write(Request),
    /// Who this node thinks leads.
    Leader,
    /// Every key, after a linearizable read barrier (the leader only).
    Dump,
    /// Initialize the cluster with these members (once, on one node).
    Init(BTreeMap<NodeId, BasicNode>),
    /// The address of a member, as the membership says.
    Address(NodeId),
    /// The index of the last snapshot and of the last purged entry.
    Compaction,
}

/// A reply on the wire.
#[derive(Serialize, Deserialize, Debug)]
enum Reply {
    Append(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    Snapshot(Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>),
    /// The committed entry's index, or who leads (`Err(Some(id))`), or nobody known.
    Write(Result<u64, Option<NodeId>>),
    /// Who this node thinks leads, and whether it is the leader itself.
    Leader(Option<NodeId>, bool),
    Dump(Result<BTreeMap<String, String>, Option<NodeId>>),
    Init(Result<(), String>),
    Address(Option<String>),
    /// The last snapshot's and the last purged entry's index.
    Compaction(Option<u64>, Option<u64>),
}

async fn write_frame(stream: &mut TcpStream, value: &impl Serialize) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    let len = u32::try_from(bytes.len()).map_err(std::io::Error::other)?;
    stream.write_all(&len.to_le_bytes()).await?;
    stream.write_all(&bytes).await
}

async fn read_frame<T: for<'de> Deserialize<'de>>(stream: &mut TcpStream) -> std::io::Result<T> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).await?;
    let mut bytes = vec![0u8; u32::from_le_bytes(len) as usize];
    stream.read_exact(&mut bytes).await?;
    serde_json::from_slice(&bytes).map_err(std::io::Error::other)
}

/// One request, one reply, on a fresh connection (clients) or a kept one (peers).
async fn call(stream: &mut Option<TcpStream>, addr: &str, rpc: &Rpc, timeout: Duration) -> std::io::Result<Reply> {
    let attempt = async {
        if stream.is_none() {
            let s = TcpStream::connect(addr).await?;
            s.set_nodelay(true)?;
            *stream = Some(s);
        }
        let s = stream.as_mut().expect("connected above");
        write_frame(s, rpc).await?;
        read_frame(s).await
    };
    let result = match tokio::time::timeout(timeout, attempt).await {
        Ok(result) => result,
        Err(_) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "rpc timed out")),
    };
    if result.is_err() {
        *stream = None; // reconnect next time
    }
    result
}

async fn call_once(addr: &str, rpc: &Rpc, timeout: Duration) -> std::io::Result<Reply> {
    call(&mut None, addr, rpc, timeout).await
}

// ---- the network openraft uses --------------------------------------------

struct Network;

struct Peer {
    target: NodeId,
    addr: String,
    stream: Option<TcpStream>,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Peer {
        Peer { target, addr: node.addr.clone(), stream: None }
    }
}

impl Peer {
    async fn send<E: std::error::Error>(
        &mut self,
        rpc: Rpc,
        timeout: Duration,
    ) -> Result<Reply, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>> {
        call(&mut self.stream, &self.addr, &rpc, timeout).await.map_err(|e| match e.kind() {
            std::io::ErrorKind::ConnectionRefused => RPCError::Unreachable(Unreachable::new(&e)),
            _ => RPCError::Network(NetworkError::new(&e)),
        })
    }
}

fn unexpected<E: std::error::Error>(reply: Reply) -> RPCError<NodeId, BasicNode, RaftError<NodeId, E>> {
    RPCError::Network(NetworkError::new(&std::io::Error::other(format!("unexpected reply {reply:?}"))))
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        req: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        match self.send(Rpc::Append(req), option.hard_ttl()).await? {
            Reply::Append(Ok(resp)) => Ok(resp),
            Reply::Append(Err(e)) => Err(RPCError::RemoteError(RemoteError::new(self.target, e))),
            other => Err(unexpected(other)),
        }
    }

    async fn install_snapshot(
        &mut self,
        req: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>>
    {
        match self.send(Rpc::Snapshot(req), option.hard_ttl()).await? {
            Reply::Snapshot(Ok(resp)) => Ok(resp),
            Reply::Snapshot(Err(e)) => Err(RPCError::RemoteError(RemoteError::new(self.target, e))),
            other => Err(unexpected(other)),
        }
    }

    async fn vote(
        &mut self,
        req: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        match self.send(Rpc::Vote(req), option.hard_ttl()).await? {
            Reply::Vote(Ok(resp)) => Ok(resp),
            Reply::Vote(Err(e)) => Err(RPCError::RemoteError(RemoteError::new(self.target, e))),
            other => Err(unexpected(other)),
        }
    }
}

// ---- an in-memory log store: the ceiling ----------------------------------

mod mem {
    use std::collections::BTreeMap;
    use std::ops::RangeBounds;
    use std::sync::Arc;

    use openraft::storage::{LogFlushed, RaftLogStorage};
    use openraft::{Entry, LogId, LogState, OptionalSend, RaftLogReader, StorageError, Vote};
    use tokio::sync::Mutex;

    use crate::kv::{NodeId, TypeConfig};

    #[derive(Default)]
    struct Inner {
        log: BTreeMap<u64, Entry<TypeConfig>>,
        purged: Option<LogId<NodeId>>,
        vote: Option<Vote<NodeId>>,
        committed: Option<LogId<NodeId>>,
    }

    /// Keeps entries in memory and reports them durable at once.
    #[derive(Clone, Default)]
    pub struct MemLogStore(Arc<Mutex<Inner>>);

    impl RaftLogReader<TypeConfig> for MemLogStore {
        async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + std::fmt::Debug + OptionalSend>(
            &mut self,
            range: RB,
        ) -> Result<Vec<Entry<TypeConfig>>, StorageError<NodeId>> {
            Ok(self.0.lock().await.log.range(range).map(|(_, e)| e.clone()).collect())
        }
    }

    impl RaftLogStorage<TypeConfig> for MemLogStore {
        type LogReader = Self;

        async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
            let inner = self.0.lock().await;
            let last = inner.log.values().next_back().map(|e| e.log_id).or(inner.purged);
            Ok(LogState { last_purged_log_id: inner.purged, last_log_id: last })
        }
        async fn get_log_reader(&mut self) -> Self {
            self.clone()
        }
        async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError<NodeId>> {
            self.0.lock().await.vote = Some(*vote);
            Ok(())
        }
        async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError<NodeId>> {
            Ok(self.0.lock().await.vote)
        }
        async fn save_committed(&mut self, committed: Option<LogId<NodeId>>) -> Result<(), StorageError<NodeId>> {
            self.0.lock().await.committed = committed;
            Ok(())
        }
        async fn read_committed(&mut self) -> Result<Option<LogId<NodeId>>, StorageError<NodeId>> {
            Ok(self.0.lock().await.committed)
        }
        async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> Result<(), StorageError<NodeId>>
        where
            I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
            I::IntoIter: OptionalSend,
        {
            let mut inner = self.0.lock().await;
            for entry in entries {
                inner.log.insert(entry.log_id.index, entry);
            }
            callback.log_io_completed(Ok(()));
            Ok(())
        }
        async fn truncate(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
            self.0.lock().await.log.split_off(&log_id.index);
            Ok(())
        }
        async fn purge(&mut self, log_id: LogId<NodeId>) -> Result<(), StorageError<NodeId>> {
            let mut inner = self.0.lock().await;
            inner.log = inner.log.split_off(&(log_id.index + 1));
            inner.purged = Some(log_id);
            Ok(())
        }
    }
}

// ---- serve -----------------------------------------------------------------

/// Entries between two snapshots.
const SNAPSHOT_EVERY: u64 = 1000;
/// Entries kept in the log below a snapshot.
const KEEP_BELOW_SNAPSHOT: u64 = 500;

/// The nodes' openraft configuration; `snapshots` off: never snapshot nor purge.
fn raft_config(snapshots: bool) -> Result<Arc<Config>, Error> {
    let config = Config {
        heartbeat_interval: 100,
        election_timeout_min: 400,
        election_timeout_max: 800,
        // A snapshot every 1,000 entries, saved beside the log; openraft then
        // purges the log up to 500 entries below it. A node back from a kill
        // further behind than that gets the snapshot (installed, then the log
        // purged past its last entry).
        snapshot_policy: if snapshots { SnapshotPolicy::LogsSinceLast(SNAPSHOT_EVERY) } else { SnapshotPolicy::Never },
        max_in_snapshot_log_to_keep: KEEP_BELOW_SNAPSHOT,
        snapshot_max_chunk_size: 256 << 10,
        max_payload_entries: 512,
        ..Config::default()
    };
    Ok(Arc::new(config.validate()?))
}

fn parse_peers(text: &str) -> Result<BTreeMap<NodeId, BasicNode>, Error> {
    let mut peers = BTreeMap::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        let (id, addr) = part.split_once('=').ok_or_else(|| format!("peer {part:?} is not ID=ADDR"))?;
        peers.insert(id.parse()?, BasicNode { addr: addr.to_string() });
    }
    Ok(peers)
}

async fn serve(id: NodeId, addr: String, dir: PathBuf, memory: bool, snapshots: bool) -> Result<(), Error> {
    let config = raft_config(snapshots)?;
    // In memory with the in-memory log store (nothing survives a restart);
    // else the snapshots are saved in `<dir>/sm`, beside the store's own files.
    let sm = Arc::new(if memory { StateMachine::default() } else { StateMachine::open(&dir.join("sm"))? });
    let raft = if memory {
        Raft::new(id, config, Network, mem::MemLogStore::default(), Arc::clone(&sm)).await?
    } else {
        let store = RaftLogStore::<TypeConfig>::open(&dir, RaftStoreConfig::default())?;
        Raft::new(id, config, Network, store, Arc::clone(&sm)).await?
    };
    let listener = TcpListener::bind(&addr).await?;
    eprintln!("node {id} serving on {addr}");
    loop {
        let (mut stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        let (raft, sm) = (raft.clone(), Arc::clone(&sm));
        tokio::spawn(async move {
            while let Ok(rpc) = read_frame::<Rpc>(&mut stream).await {
                let reply = handle(&raft, &sm, rpc).await;
                if write_frame(&mut stream, &reply).await.is_err() {
                    break;
                }
            }
        });
    }
}

async fn handle(raft: &Raft<TypeConfig>, sm: &StateMachine, rpc: Rpc) -> Reply {
    match rpc {
        Rpc::Append(req) => Reply::Append(raft.append_entries(req).await),
        Rpc::Vote(req) => Reply::Vote(raft.vote(req).await),
        Rpc::Snapshot(req) => Reply::Snapshot(raft.install_snapshot(req).await),
        Rpc::Write(req) => Reply::Write(match raft.client_write(req).await {
            Ok(resp) => Ok(resp.log_id.index),
            Err(e) => Err(e.forward_to_leader().and_then(|f| f.leader_id)),
        }),
        Rpc::Leader => {
            let metrics = raft.metrics().borrow().clone();
            Reply::Leader(metrics.current_leader, metrics.state == openraft::ServerState::Leader)
        }
        Rpc::Dump => Reply::Dump(match raft.ensure_linearizable().await {
            Ok(_) => Ok(sm.data.read().await.kv.clone()),
            Err(e) => Err(e.forward_to_leader().and_then(|f| f.leader_id)),
        }),
        Rpc::Init(members) => Reply::Init(raft.initialize(members).await.map_err(|e| e.to_string())),
        Rpc::Address(id) => {
            let metrics = raft.metrics().borrow().clone();
            Reply::Address(metrics.membership_config.membership().get_node(&id).map(|n| n.addr.clone()))
        }
        Rpc::Compaction => {
            let metrics = raft.metrics().borrow().clone();
            Reply::Compaction(metrics.snapshot.map(|l| l.index), metrics.purged.map(|l| l.index))
        }
    }
}

// ---- the cluster drivers ---------------------------------------------------

/// Three `serve` processes of this binary on loopback.
struct Cluster {
    exe: PathBuf,
    root: PathBuf,
    addrs: BTreeMap<NodeId, String>,
    children: BTreeMap<NodeId, Child>,
    memory: bool,
    snapshots: bool,
}

fn free_port() -> Result<u16, Error> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl Cluster {
    fn start(root: &Path, memory: bool, snapshots: bool) -> Result<Cluster, Error> {
        let mut addrs = BTreeMap::new();
        for id in 1..=3 {
            addrs.insert(id, format!("127.0.0.1:{}", free_port()?));
        }
        let mut cluster = Cluster {
            exe: std::env::current_exe()?,
            root: root.to_path_buf(),
            addrs,
            children: BTreeMap::new(),
            memory,
            snapshots,
        };
        for id in 1..=3 {
            cluster.spawn(id)?;
        }
        Ok(cluster)
    }

    fn peers(&self) -> String {
        self.addrs.iter().map(|(id, addr)| format!("{id}={addr}")).collect::<Vec<_>>().join(",")
    }

    /// Node `id`'s directory.
    fn dir(&self, id: NodeId) -> PathBuf {
        self.root.join(format!("node-{id}"))
    }

    fn spawn(&mut self, id: NodeId) -> Result<(), Error> {
        let dir = self.dir(id);
        let mut command = Command::new(&self.exe);
        command.args(["serve", "--id", &id.to_string(), "--addr", &self.addrs[&id], "--peers", &self.peers()]);
        command.arg("--dir").arg(&dir);
        if self.memory {
            command.arg("--memory");
        }
        if !self.snapshots {
            command.arg("--no-snapshots");
        }
        command.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
        self.children.insert(id, command.spawn()?);
        Ok(())
    }

    /// SIGKILL: no shutdown, no flush, the process is gone.
    fn kill(&mut self, id: NodeId) -> Result<(), Error> {
        if let Some(mut child) = self.children.remove(&id) {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    async fn wait_listening(&self, deadline: Instant) -> Result<(), Error> {
        for addr in self.addrs.values() {
            while TcpStream::connect(addr.parse::<SocketAddr>()?).await.is_err() {
                if Instant::now() > deadline {
                    return Err(format!("{addr} never listened").into());
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Ok(())
    }

    async fn init(&self) -> Result<(), Error> {
        let members = self.addrs.iter().map(|(id, addr)| (*id, BasicNode { addr: addr.clone() })).collect();
        match call_once(&self.addrs[&1], &Rpc::Init(members), Duration::from_secs(10)).await? {
            Reply::Init(Ok(())) => Ok(()),
            other => Err(format!("initialize: {other:?}").into()),
        }
    }

    /// The leader: a node that says it leads, and that a majority of the
    /// nodes (itself included) name.
    async fn leader(&self, deadline: Instant) -> Result<NodeId, Error> {
        loop {
            let mut named: BTreeMap<NodeId, usize> = BTreeMap::new();
            let mut claims = BTreeSet::new();
            for (&id, addr) in &self.addrs {
                if let Ok(Reply::Leader(leader, me)) = call_once(addr, &Rpc::Leader, Duration::from_millis(300)).await {
                    if let Some(leader) = leader {
                        *named.entry(leader).or_default() += 1;
                    }
                    if me {
                        claims.insert(id);
                    }
                }
            }
            if let Some(&id) = claims.iter().find(|id| named.get(id).copied().unwrap_or(0) >= 2) {
                return Ok(id);
            }
            if Instant::now() > deadline {
                return Err("no leader".into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn stop(&mut self) {
        let ids: Vec<NodeId> = self.children.keys().copied().collect();
        for id in ids {
            let _ = self.kill(id);
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Writes `key` = `value` until some node commits it; returns false if `stop`
/// was set first. Follows the leader hints.
async fn write_until_committed(addrs: &BTreeMap<NodeId, String>, key: String, stop: &AtomicBool) -> bool {
    let mut target = 1;
    let request = Rpc::Write(Request { key: key.clone(), value: key });
    while !stop.load(Ordering::Relaxed) {
        match call_once(&addrs[&target], &request, Duration::from_secs(3)).await {
            Ok(Reply::Write(Ok(_))) => return true,
            Ok(Reply::Write(Err(Some(leader)))) if addrs.contains_key(&leader) => target = leader,
            _ => {
                // A dead node, a timeout, or no leader yet: ask the next one.
                target = target % 3 + 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    false
}

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> Result<T, Error> {
    match args.iter().position(|a| a == name) {
        Some(i) => {
            args.get(i + 1).ok_or(format!("{name} needs a value"))?.parse().map_err(|_| format!("bad {name}").into())
        }
        None => Ok(default),
    }
}

async fn kill_test(args: &[String]) -> Result<bool, Error> {
    let kills: usize = arg(args, "--kills", 20)?;
    let interval = Duration::from_millis(arg(args, "--interval-ms", 800)?);
    let writers: usize = arg(args, "--writers", 4)?;
    let root = tempfile::tempdir()?;
    let mut cluster = Cluster::start(root.path(), false, true)?;
    cluster.wait_listening(Instant::now() + Duration::from_secs(30)).await?;
    cluster.init().await?;
    cluster.leader(Instant::now() + Duration::from_secs(30)).await?;

    let stop = Arc::new(AtomicBool::new(false));
    let next = Arc::new(AtomicU64::new(0));
    let committed: Arc<parking_lot::Mutex<Vec<String>>> = Arc::default();
    let tasks: Vec<_> = (0..writers)
        .map(|_| {
            let (addrs, stop, next, committed) =
                (cluster.addrs.clone(), Arc::clone(&stop), Arc::clone(&next), Arc::clone(&committed));
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("key-{:08}", next.fetch_add(1, Ordering::Relaxed));
                    if write_until_committed(&addrs, key.clone(), &stop).await {
                        committed.lock().push(key);
                    }
                }
            })
        })
        .collect();
    let started = Instant::now();
    for kill in 0..kills {
        tokio::time::sleep(interval).await;
        let leader = cluster.leader(Instant::now() + Duration::from_secs(30)).await?;
        cluster.kill(leader)?;
        eprintln!("kill {}: node {leader} (SIGKILL), {} committed so far", kill + 1, committed.lock().len());
        // A new leader is chosen without it; then it comes back, recovers its
        // log from the files the kill left, and rejoins as a follower.
        let next = cluster.leader(Instant::now() + Duration::from_secs(30)).await?;
        eprintln!("   node {next} leads; node {leader} restarts");
        cluster.spawn(leader)?;
    }
    tokio::time::sleep(interval).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await?;
    }
    cluster.wait_listening(Instant::now() + Duration::from_secs(30)).await?;
    let leader = cluster.leader(Instant::now() + Duration::from_secs(30)).await?;
    let held = loop {
        match call_once(&cluster.addrs[&leader], &Rpc::Dump, Duration::from_secs(10)).await? {
            Reply::Dump(Ok(kv)) => break kv,
            other => {
                eprintln!("dump: {other:?}; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let (snapshot, purged) = match call_once(&cluster.addrs[&leader], &Rpc::Compaction, Duration::from_secs(10)).await?
    {
        Reply::Compaction(snapshot, purged) => (snapshot, purged),
        other => return Err(format!("compaction: {other:?}").into()),
    };
    let committed = committed.lock().clone();
    let lost = committed.iter().filter(|k| held.get(*k) != Some(*k)).count();
    cluster.stop();
    let installed: u64 = cluster.addrs.keys().map(|id| kv::installs(&cluster.dir(*id).join("sm"))).sum();
    let unique: BTreeSet<&String> = committed.iter().collect();
    eprintln!("{:.1?}; the last leader, node {leader}, holds {} keys", started.elapsed(), held.len());
    let show = |i: Option<u64>| i.map_or("none".to_string(), |i| i.to_string());
    println!(
        "{kills} leader kills, {} entries committed, {lost} committed entries lost; the last leader's snapshot at index {}, its log purged up to {}; {installed} snapshots installed on restarted nodes",
        unique.len(),
        show(snapshot),
        show(purged)
    );
    // Enough entries for a snapshot and a purge, and none happened: the test
    // did not run what it claims to.
    let compacted = purged.is_some() || (unique.len() as u64) < 2 * (SNAPSHOT_EVERY + KEEP_BELOW_SNAPSHOT);
    if !compacted {
        eprintln!("no purge on the last leader after {} entries", unique.len());
    }
    Ok(lost == 0 && compacted)
}

async fn bench(args: &[String]) -> Result<(), Error> {
    let memory = match arg(args, "--store", "commitlog".to_string())?.as_str() {
        "commitlog" => false,
        "memory" => true,
        other => return Err(format!("--store {other}: commitlog or memory").into()),
    };
    let seconds: u64 = arg(args, "--seconds", 5)?;
    let clients: usize = arg(args, "--clients", 32)?;
    let root = tempfile::tempdir_in(arg(args, "--dir", std::env::temp_dir())?)?;
    // No snapshots: the state machine's snapshot cost is not the log store's.
    let mut cluster = Cluster::start(root.path(), memory, false)?;
    cluster.wait_listening(Instant::now() + Duration::from_secs(30)).await?;
    cluster.init().await?;
    let leader = cluster.leader(Instant::now() + Duration::from_secs(30)).await?;
    let addr = cluster.addrs[&leader].clone();
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let (addr, done) = (addr.clone(), Arc::clone(&done));
            tokio::spawn(async move {
                let mut stream = None;
                let mut n = 0u64;
                while Instant::now() < deadline {
                    let rpc = Rpc::Write(Request { key: format!("c{c}-{n}"), value: "x".repeat(100) });
                    if let Ok(Reply::Write(Ok(_))) = call(&mut stream, &addr, &rpc, Duration::from_secs(5)).await {
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                    n += 1;
                }
            })
        })
        .collect();
    let started = Instant::now();
    for task in tasks {
        task.await?;
    }
    let rate = done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64();
    cluster.stop();
    println!(
        "{{\"store\": \"{}\", \"clients\": {clients}, \"seconds\": {seconds}, \"committed_per_sec\": {rate:.0}}}",
        if memory { "memory" } else { "commitlog" }
    );
    Ok(())
}

async fn serve_command(args: &[String]) -> Result<bool, Error> {
    let id = arg(args, "--id", 0u64)?;
    let addr = arg(args, "--addr", String::new())?;
    let dir = arg(args, "--dir", PathBuf::new())?;
    let flag = |name: &str| args.iter().any(|a| a == name);
    serve(id, addr, dir, flag("--memory"), !flag("--no-snapshots")).await?;
    Ok(true)
}

/// Makes the nodes of `--peers` a cluster, through the node at `--addr`.
async fn init_command(args: &[String]) -> Result<bool, Error> {
    let addr = arg(args, "--addr", String::new())?;
    let members = parse_peers(&arg(args, "--peers", String::new())?)?;
    match call_once(&addr, &Rpc::Init(members), Duration::from_secs(10)).await? {
        Reply::Init(Ok(())) => Ok(true),
        other => Err(format!("initialize: {other:?}").into()),
    }
}

/// One write, sent to the leader (asking the node at `--addr` where it is).
async fn put_command(args: &[String]) -> Result<bool, Error> {
    let mut addr = arg(args, "--addr", String::new())?;
    let request = Request { key: arg(args, "--key", String::new())?, value: arg(args, "--value", String::new())? };
    for _ in 0..10 {
        match call_once(&addr, &Rpc::Write(request.clone()), Duration::from_secs(5)).await? {
            Reply::Write(Ok(index)) => {
                println!("{index}");
                return Ok(true);
            }
            Reply::Write(Err(Some(leader))) => {
                match call_once(&addr, &Rpc::Address(leader), Duration::from_secs(5)).await? {
                    Reply::Address(Some(leader_addr)) => addr = leader_addr,
                    _ => return Err(format!("node {leader} leads, at an unknown address").into()),
                }
            }
            Reply::Write(Err(None)) => tokio::time::sleep(Duration::from_millis(200)).await, // no leader yet
            other => return Err(format!("write: {other:?}").into()),
        }
    }
    Err("no leader accepted the write".into())
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("serve") => serve_command(&args).await,
        Some("init") => init_command(&args).await,
        Some("put") => put_command(&args).await,
        Some("kill-test") => kill_test(&args).await,
        Some("bench") => bench(&args).await.map(|()| true),
        _ => Err("usage: raft-node serve|init|put|kill-test|bench [options] (see the file's header)".into()),
    };
    match result {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::from(1),
        Err(err) => {
            eprintln!("raft-node: {err}");
            std::process::ExitCode::from(2)
        }
    }
}
