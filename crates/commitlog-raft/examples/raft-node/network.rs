//! openraft's network over the RPCs of `rpc.rs`: one connection per peer and group.

use super::*;

/// The network of one raft group: its RPCs name the group.
pub(crate) struct Network {
    pub(crate) group: u64,
}

pub(crate) struct Peer {
    group: u64,
    target: NodeId,
    addr: String,
    stream: Option<Connection>,
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = Peer;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Peer {
        Peer { group: self.group, target, addr: node.addr.clone(), stream: None }
    }
}

impl Peer {
    pub(crate) async fn send<E: std::error::Error>(
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

pub(crate) fn unexpected<E: std::error::Error>(reply: Reply) -> RPCError<NodeId, BasicNode, RaftError<NodeId, E>> {
    RPCError::Network(NetworkError::new(&std::io::Error::other(format!("unexpected reply {reply:?}"))))
}

impl RaftNetwork<TypeConfig> for Peer {
    async fn append_entries(
        &mut self,
        req: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        match self.send(Rpc::Append(self.group, req), option.hard_ttl()).await? {
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
        match self.send(Rpc::Snapshot(self.group, req), option.hard_ttl()).await? {
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
        match self.send(Rpc::Vote(self.group, req), option.hard_ttl()).await? {
            Reply::Vote(Ok(resp)) => Ok(resp),
            Reply::Vote(Err(e)) => Err(RPCError::RemoteError(RemoteError::new(self.target, e))),
            other => Err(unexpected(other)),
        }
    }
}
