//! A 3-node cluster of real `serve` processes on loopback, for the drivers.

use super::*;

/// Three `serve` processes of this binary on loopback, each serving `groups` raft groups.
pub(crate) struct Cluster {
    pub(crate) groups: u64,
    exe: PathBuf,
    root: PathBuf,
    pub(crate) addrs: BTreeMap<NodeId, String>,
    children: BTreeMap<NodeId, Child>,
    stores: Stores,
    snapshots: bool,
}

pub(crate) fn free_port() -> Result<u16, Error> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl Cluster {
    pub(crate) fn start(root: &Path, groups: u64, stores: Stores, snapshots: bool) -> Result<Cluster, Error> {
        let mut addrs = BTreeMap::new();
        for id in 1..=3 {
            addrs.insert(id, format!("127.0.0.1:{}", free_port()?));
        }
        let mut cluster = Cluster {
            groups,
            exe: std::env::current_exe()?,
            root: root.to_path_buf(),
            addrs,
            children: BTreeMap::new(),
            stores,
            snapshots,
        };
        for id in 1..=3 {
            cluster.spawn(id)?;
        }
        Ok(cluster)
    }

    pub(crate) fn peers(&self) -> String {
        self.addrs.iter().map(|(id, addr)| format!("{id}={addr}")).collect::<Vec<_>>().join(",")
    }

    /// Node `id`'s directory.
    pub(crate) fn dir(&self, id: NodeId) -> PathBuf {
        self.root.join(format!("node-{id}"))
    }

    pub(crate) fn spawn(&mut self, id: NodeId) -> Result<(), Error> {
        let dir = self.dir(id);
        let mut command = Command::new(&self.exe);
        command.args(["serve", "--id", &id.to_string(), "--addr", &self.addrs[&id], "--peers", &self.peers()]);
        command.arg("--dir").arg(&dir).args(["--groups", &self.groups.to_string()]);
        command.args(["--store", self.stores.name()]);
        if !self.snapshots {
            command.arg("--no-snapshots");
        }
        command.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
        self.children.insert(id, command.spawn()?);
        Ok(())
    }

    /// SIGKILL: no shutdown, no flush, the process is gone.
    pub(crate) fn kill(&mut self, id: NodeId) -> Result<(), Error> {
        if let Some(mut child) = self.children.remove(&id) {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    pub(crate) async fn wait_listening(&self, deadline: Instant) -> Result<(), Error> {
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

    pub(crate) async fn init(&self) -> Result<(), Error> {
        let members = self.addrs.iter().map(|(id, addr)| (*id, BasicNode { addr: addr.clone() })).collect();
        match call_once(&self.addrs[&1], &Rpc::Init(members), Duration::from_secs(10)).await? {
            Reply::Init(Ok(())) => Ok(()),
            other => Err(format!("initialize: {other:?}").into()),
        }
    }

    /// The leader of every group, as [`leader`](Self::leader) finds it.
    pub(crate) async fn leaders(&self, deadline: Instant) -> Result<BTreeMap<u64, NodeId>, Error> {
        let mut leaders = BTreeMap::new();
        for group in 0..self.groups {
            leaders.insert(group, self.leader(group, deadline).await?);
        }
        Ok(leaders)
    }

    /// The group's leader: a node that says it leads, and that a majority of
    /// the nodes (itself included) name.
    pub(crate) async fn leader(&self, group: u64, deadline: Instant) -> Result<NodeId, Error> {
        loop {
            let mut named: BTreeMap<NodeId, usize> = BTreeMap::new();
            let mut claims = BTreeSet::new();
            for (&id, addr) in &self.addrs {
                if let Ok(Reply::Leader(leader, me)) =
                    call_once(addr, &Rpc::Leader(group), Duration::from_millis(300)).await
                {
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
                return Err(format!("group {group} has no leader").into());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Moves the groups' leadership round the nodes, group g to the node
    /// `g mod 3 + 1`, as a multi-raft deployment balances its leaders: each
    /// such node campaigns for the group until it leads it (or the deadline).
    pub(crate) async fn spread_leaders(&self, deadline: Instant) -> Result<BTreeMap<u64, NodeId>, Error> {
        let ids: Vec<NodeId> = self.addrs.keys().copied().collect();
        for group in 0..self.groups {
            let wanted = ids[group as usize % ids.len()];
            while self.leader(group, deadline).await? != wanted {
                if Instant::now() > deadline {
                    return Err(format!("node {wanted} never took group {group}").into());
                }
                match call_once(&self.addrs[&wanted], &Rpc::Campaign(group), Duration::from_secs(5)).await? {
                    Reply::Campaign(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                    other => return Err(format!("campaign for group {group}: {other:?}").into()),
                }
            }
        }
        self.leaders(deadline).await
    }

    /// Every node's log syncs so far ([`Rpc::Syncs`]).
    pub(crate) async fn syncs(&self) -> Result<BTreeMap<NodeId, u64>, Error> {
        let mut syncs = BTreeMap::new();
        for (&id, addr) in &self.addrs {
            match call_once(addr, &Rpc::Syncs, Duration::from_secs(10)).await? {
                Reply::Syncs(n) => syncs.insert(id, n),
                other => return Err(format!("syncs of node {id}: {other:?}").into()),
            };
        }
        Ok(syncs)
    }

    pub(crate) fn stop(&mut self) {
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

/// Writes `key` = `key` to `group` until some node commits it; returns false
/// if `stop` was set first. Follows the leader hints.
pub(crate) async fn write_until_committed(
    addrs: &BTreeMap<NodeId, String>,
    group: u64,
    key: String,
    stop: &AtomicBool,
) -> bool {
    let mut target = 1;
    let request = Rpc::Write(group, Request { key: key.clone(), value: key });
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
