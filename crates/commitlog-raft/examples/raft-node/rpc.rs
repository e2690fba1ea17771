//! The wire: RPCs and replies as length-prefixed JSON frames over TCP.

use super::*;

/// A request on the wire.
#[derive(Serialize, Deserialize, Debug)]
pub(crate) enum Rpc {
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
pub(crate) enum Reply {
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

pub(crate) async fn write_frame(stream: &mut TcpStream, value: &impl Serialize) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    let len = u32::try_from(bytes.len()).map_err(std::io::Error::other)?;
    stream.write_all(&len.to_le_bytes()).await?;
    stream.write_all(&bytes).await
}

pub(crate) async fn read_frame<T: for<'de> Deserialize<'de>>(stream: &mut TcpStream) -> std::io::Result<T> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).await?;
    let mut bytes = vec![0u8; u32::from_le_bytes(len) as usize];
    stream.read_exact(&mut bytes).await?;
    serde_json::from_slice(&bytes).map_err(std::io::Error::other)
}

/// One request, one reply, on a fresh connection (clients) or a kept one (peers).
pub(crate) async fn call(
    stream: &mut Option<TcpStream>,
    addr: &str,
    rpc: &Rpc,
    timeout: Duration,
) -> std::io::Result<Reply> {
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

pub(crate) async fn call_once(addr: &str, rpc: &Rpc, timeout: Duration) -> std::io::Result<Reply> {
    call(&mut None, addr, rpc, timeout).await
}
