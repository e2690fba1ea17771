//! A node: its raft configuration, serving RPCs, applying them.

use super::*;

/// Entries between two snapshots.
pub(crate) const SNAPSHOT_EVERY: u64 = 1000;
/// Entries kept in the log below a snapshot.
pub(crate) const KEEP_BELOW_SNAPSHOT: u64 = 500;

/// The nodes' openraft configuration; `snapshots` off: never snapshot nor purge.
pub(crate) fn raft_config(snapshots: bool) -> Result<Arc<Config>, Error> {
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

pub(crate) fn parse_peers(text: &str) -> Result<BTreeMap<NodeId, BasicNode>, Error> {
    let mut peers = BTreeMap::new();
    for part in text.split(',').filter(|p| !p.is_empty()) {
        let (id, addr) = part.split_once('=').ok_or_else(|| format!("peer {part:?} is not ID=ADDR"))?;
        peers.insert(id.parse()?, BasicNode { addr: addr.to_string() });
    }
    Ok(peers)
}

/// The group a key belongs to: FNV-1a of the key, modulo the groups.
pub(crate) fn group_of(key: &str, groups: u64) -> u64 {
    let hash = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    hash % groups.max(1)
}

/// A node's raft groups: group `g` is `groups[g]`, each with its own state
/// machine, all of them (unless in memory) on one commit log.
pub(crate) struct Node {
    pub(crate) groups: Vec<(Raft<TypeConfig>, Arc<StateMachine>)>,
    /// The engines the groups' logs are on: one (shared), one per group
    /// (separate), or none (memory).
    pub(crate) engines: Vec<RaftLogEngine<TypeConfig>>,
}

impl Node {
    /// Group `group`, or why there is none.
    fn group(&self, group: u64) -> Result<&(Raft<TypeConfig>, Arc<StateMachine>), String> {
        usize::try_from(group)
            .ok()
            .and_then(|g| self.groups.get(g))
            .ok_or_else(|| format!("no group {group} (the node runs {})", self.groups.len()))
    }
}

/// A group's state machine directory: its snapshots.
pub(crate) fn sm_dir(dir: &Path, group: u64) -> PathBuf {
    dir.join(format!("sm-{group}"))
}

/// Where a node keeps its groups' logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stores {
    /// Every group on one commit log (one `RaftLogEngine` in the node's directory).
    Shared,
    /// A commit log per group (`<dir>/log-<group>`): each with its own syncs.
    Separate,
    /// In memory (nothing survives a restart; every append durable at once).
    Memory,
}

impl Stores {
    pub(crate) fn parse(name: &str) -> Result<Stores, Error> {
        match name {
            "commitlog" => Ok(Stores::Shared),
            "separate" => Ok(Stores::Separate),
            "memory" => Ok(Stores::Memory),
            other => Err(format!("store {other:?}: commitlog, separate or memory").into()),
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Stores::Shared => "commitlog",
            Stores::Separate => "separate",
            Stores::Memory => "memory",
        }
    }
}

pub(crate) async fn serve(
    id: NodeId,
    addr: String,
    dir: PathBuf,
    stores: Stores,
    snapshots: bool,
    groups: u64,
) -> Result<(), Error> {
    let config = raft_config(snapshots)?;
    // The snapshots of group g in `<dir>/sm-<g>` (none in memory).
    let engine = match stores {
        Stores::Shared => Some(RaftLogEngine::<TypeConfig>::open(&dir, RaftStoreConfig::default())?),
        Stores::Separate | Stores::Memory => None,
    };
    let mut node = Node { groups: Vec::new(), engines: engine.iter().cloned().collect() };
    for group in 0..groups {
        let memory = stores == Stores::Memory;
        let sm = Arc::new(if memory { StateMachine::default() } else { StateMachine::open(&sm_dir(&dir, group))? });
        let (network, config) = (Network { group }, Arc::clone(&config));
        let raft = match (stores, &engine) {
            (Stores::Shared, Some(engine)) => {
                Raft::new(id, config, network, engine.open_group(group)?, Arc::clone(&sm)).await?
            }
            (Stores::Separate, _) => {
                let store =
                    RaftLogStore::<TypeConfig>::open(dir.join(format!("log-{group}")), RaftStoreConfig::default())?;
                node.engines.push(store.engine());
                Raft::new(id, config, network, store, Arc::clone(&sm)).await?
            }
            _ => Raft::new(id, config, network, mem::MemLogStore::default(), Arc::clone(&sm)).await?,
        };
        node.groups.push((raft, sm));
    }
    let listener = TcpListener::bind(&addr).await?;
    eprintln!("node {id} serving {groups} groups on {addr}");
    // Each peer keeps a connection per group: room for them beside the clients.
    let limits = Limits { max_connections: Limits::DEFAULT.max_connections + 4 * groups as usize, ..Limits::DEFAULT };
    serve_on(listener, Arc::new(node), limits).await
}

/// Serves RPCs from `listener` until the process ends, within `limits`: a
/// connection past `max_connections` is closed as it comes, a malformed frame
/// gets a `Refused` reply (the next frame is read as usual), an oversized one a
/// `Refused` reply and the connection closed (its body is never read), and a
/// connection that is silent past the idle time, or slow to send a frame or
/// take a reply, is closed. Nothing a connection sends ends the node.
pub(crate) async fn serve_on(listener: TcpListener, node: Arc<Node>, limits: Limits) -> Result<(), Error> {
    let permits = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors, say: wait, and serve the others meanwhile.
                eprintln!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            continue; // over the bound: dropped, so closed
        };
        let node = Arc::clone(&node);
        tokio::spawn(async move {
            let _permit = permit;
            let _ = stream.set_nodelay(true);
            serve_connection(BufReader::new(stream), &node, &limits).await;
        });
    }
}

async fn serve_connection<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, node: &Node, limits: &Limits) {
    loop {
        let (reply, go_on) = match read_frame::<Rpc, _>(&mut stream, limits).await {
            Ok(rpc) => (handle(node, rpc).await, true),
            Err(e @ FrameError::Malformed(_)) => (Reply::Refused(e.to_string()), true),
            Err(e @ FrameError::TooLarge(_)) => (Reply::Refused(e.to_string()), false),
            Err(FrameError::Io(_) | FrameError::TimedOut) => return,
        };
        match tokio::time::timeout(limits.frame_time, write_frame(&mut stream, &reply)).await {
            Ok(Ok(())) if go_on => {}
            _ => return,
        }
    }
}

pub(crate) async fn handle(node: &Node, rpc: Rpc) -> Reply {
    handle_group(node, rpc).await.unwrap_or_else(Reply::Refused)
}

/// The reply to `rpc`, or (`Err`) why it is refused.
async fn handle_group(node: &Node, rpc: Rpc) -> Result<Reply, String> {
    Ok(match rpc {
        Rpc::Append(g, req) => Reply::Append(node.group(g)?.0.append_entries(req).await),
        Rpc::Vote(g, req) => Reply::Vote(node.group(g)?.0.vote(req).await),
        Rpc::Snapshot(g, req) => Reply::Snapshot(node.group(g)?.0.install_snapshot(req).await),
        Rpc::Write(g, req) => Reply::Write(match node.group(g)?.0.client_write(req).await {
            Ok(resp) => Ok(resp.log_id.index),
            Err(e) => Err(e.forward_to_leader().and_then(|f| f.leader_id)),
        }),
        Rpc::Leader(g) => {
            let metrics = node.group(g)?.0.metrics().borrow().clone();
            Reply::Leader(metrics.current_leader, metrics.state == openraft::ServerState::Leader)
        }
        Rpc::Dump(g) => {
            let (raft, sm) = node.group(g)?;
            Reply::Dump(match raft.ensure_linearizable().await {
                Ok(_) => Ok(sm.data.read().await.kv.clone()),
                Err(e) => Err(e.forward_to_leader().and_then(|f| f.leader_id)),
            })
        }
        Rpc::Init(members) => {
            let mut result = Ok(());
            for (raft, _) in &node.groups {
                if let Err(e) = raft.initialize(members.clone()).await {
                    result = Err(e.to_string());
                }
            }
            Reply::Init(result)
        }
        Rpc::Address(id) => {
            let metrics = node.group(0)?.0.metrics().borrow().clone();
            Reply::Address(metrics.membership_config.membership().get_node(&id).map(|n| n.addr.clone()))
        }
        Rpc::Compaction(g) => {
            let metrics = node.group(g)?.0.metrics().borrow().clone();
            Reply::Compaction(metrics.snapshot.map(|l| l.index), metrics.purged.map(|l| l.index))
        }
        Rpc::Campaign(g) => Reply::Campaign(node.group(g)?.0.trigger().elect().await.map_err(|e| e.to_string())),
        Rpc::Syncs => {
            Reply::Syncs(node.engines.iter().map(|e| e.commit_log().flush_stats().group_commit.syncing_flushes).sum())
        }
    })
}
