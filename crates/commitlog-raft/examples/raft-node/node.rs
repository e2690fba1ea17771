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

pub(crate) async fn serve(id: NodeId, addr: String, dir: PathBuf, memory: bool, snapshots: bool) -> Result<(), Error> {
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
    serve_on(listener, raft, sm, Limits::DEFAULT).await
}

/// Serves RPCs from `listener` until the process ends, within `limits`: a
/// connection past `max_connections` is closed as it comes, a malformed frame
/// gets a `Refused` reply (the next frame is read as usual), an oversized one a
/// `Refused` reply and the connection closed (its body is never read), and a
/// connection that is silent past the idle time, or slow to send a frame or
/// take a reply, is closed. Nothing a connection sends ends the node.
pub(crate) async fn serve_on(
    listener: TcpListener,
    raft: Raft<TypeConfig>,
    sm: Arc<StateMachine>,
    limits: Limits,
) -> Result<(), Error> {
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
        let (raft, sm) = (raft.clone(), Arc::clone(&sm));
        tokio::spawn(async move {
            let _permit = permit;
            let _ = stream.set_nodelay(true);
            serve_connection(stream, &raft, &sm, &limits).await;
        });
    }
}

async fn serve_connection<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    raft: &Raft<TypeConfig>,
    sm: &StateMachine,
    limits: &Limits,
) {
    loop {
        let (reply, go_on) = match read_frame::<Rpc, _>(&mut stream, limits).await {
            Ok(rpc) => (handle(raft, sm, rpc).await, true),
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

pub(crate) async fn handle(raft: &Raft<TypeConfig>, sm: &StateMachine, rpc: Rpc) -> Reply {
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
