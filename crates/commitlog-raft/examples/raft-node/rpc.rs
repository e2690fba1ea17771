//! The wire: RPCs and replies as length-prefixed JSON frames over TCP.

use super::*;

/// A request on the wire; the first field of most is the raft group it is for.
#[derive(Serialize, Deserialize, Debug)]
pub(crate) enum Rpc {
    Append(u64, AppendEntriesRequest<TypeConfig>),
    Vote(u64, VoteRequest<NodeId>),
    Snapshot(u64, InstallSnapshotRequest<TypeConfig>),
    /// A client write (to the group its key hashes to: `group_of`).
    Write(u64, Request),
    /// Who this node thinks leads the group.
    Leader(u64),
    /// Every key of the group, after a linearizable read barrier (its leader only).
    Dump(u64),
    /// Initialize every group with these members (once, on one node).
    Init(BTreeMap<NodeId, BasicNode>),
    /// The address of a member, as the membership says.
    Address(NodeId),
    /// The index of the group's last snapshot and of its last purged entry.
    Compaction(u64),
    /// How many times the node's logs have synced so far (group-commit
    /// flushes that made bytes durable, summed over its commit logs; 0 in
    /// memory).
    Syncs,
    /// Start an election for the group on this node (it becomes its leader
    /// if its log is as fresh as a majority's).
    Campaign(u64),
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
    /// The node's log syncs so far.
    Syncs(u64),
    /// Whether the election could be started.
    Campaign(Result<(), String>),
    /// The request was refused: malformed, larger than the node accepts, or for
    /// a group the node does not run.
    Refused(String),
}

/// What a node tolerates from a connection. Nothing on the wire is
/// authenticated, so these bound what any peer that can reach the port can make
/// a node hold: memory per frame, time per frame and per idle connection, and
/// connections at once.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    /// Largest frame accepted, in bytes; a longer one is refused before a byte
    /// of it is read (a snapshot chunk is 256 KiB, an append at most 512
    /// entries of client values).
    pub max_frame: usize,
    /// Longest a frame may take to arrive once its first byte has, and a reply
    /// to be taken.
    pub frame_time: Duration,
    /// Longest a connection may wait between frames (peers send heartbeats
    /// every 100 ms).
    pub idle_time: Duration,
    /// Connections served at once; more are closed as they come.
    pub max_connections: usize,
}

impl Limits {
    pub(crate) const DEFAULT: Limits = Limits {
        max_frame: 16 << 20,
        frame_time: Duration::from_secs(10),
        idle_time: Duration::from_secs(60),
        max_connections: 64,
    };
}

/// Why a frame could not be read.
#[derive(Debug)]
pub(crate) enum FrameError {
    /// The connection failed or closed.
    Io(std::io::Error),
    /// Nothing arrived within the idle time, or the frame not within its time.
    TimedOut,
    /// The length prefix claims more than the limit: refused unread.
    TooLarge(u64),
    /// A whole frame that is not a request (the stream is still in step).
    Malformed(serde_json::Error),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Io(e) => write!(f, "{e}"),
            FrameError::TimedOut => write!(f, "timed out"),
            FrameError::TooLarge(n) => write!(f, "a frame of {n} bytes exceeds the limit"),
            FrameError::Malformed(e) => write!(f, "malformed frame: {e}"),
        }
    }
}

/// Writes one frame, its length prefix and body in one write (one segment on a
/// `TCP_NODELAY` connection, not two).
pub(crate) async fn write_frame<S: AsyncWrite + Unpin>(stream: &mut S, value: &impl Serialize) -> std::io::Result<()> {
    let mut frame = vec![0u8; 4];
    serde_json::to_writer(&mut frame, value).map_err(std::io::Error::other)?;
    let len = u32::try_from(frame.len() - 4).map_err(std::io::Error::other)?;
    frame[..4].copy_from_slice(&len.to_le_bytes());
    stream.write_all(&frame).await
}

/// A connection as both ends use it: reads buffered (a frame's prefix and body
/// usually arrive in one read), writes straight through.
pub(crate) type Connection = BufReader<TcpStream>;

/// Reads one frame within `limits`: the length prefix within the idle time, the
/// rest within the frame time, and never allocates more than the limit.
pub(crate) async fn read_frame<T: for<'de> Deserialize<'de>, S: AsyncRead + Unpin>(
    stream: &mut S,
    limits: &Limits,
) -> Result<T, FrameError> {
    let mut len = [0u8; 4];
    let first = tokio::time::timeout(limits.idle_time, stream.read_exact(&mut len[..1])).await;
    first.map_err(|_| FrameError::TimedOut)?.map_err(FrameError::Io)?;
    let rest = async {
        stream.read_exact(&mut len[1..]).await?;
        let n = u32::from_le_bytes(len);
        if n as usize > limits.max_frame {
            return Ok(Err(FrameError::TooLarge(u64::from(n))));
        }
        let mut bytes = vec![0u8; n as usize];
        stream.read_exact(&mut bytes).await?;
        Ok(serde_json::from_slice(&bytes).map_err(FrameError::Malformed))
    };
    match tokio::time::timeout(limits.frame_time, rest).await {
        Err(_) => Err(FrameError::TimedOut),
        Ok(Err(e)) => Err(FrameError::Io(e)),
        Ok(Ok(parsed)) => parsed,
    }
}

/// One request, one reply, on a fresh connection (clients) or a kept one (peers).
pub(crate) async fn call(
    stream: &mut Option<Connection>,
    addr: &str,
    rpc: &Rpc,
    timeout: Duration,
) -> std::io::Result<Reply> {
    let attempt = async {
        if stream.is_none() {
            let s = TcpStream::connect(addr).await?;
            s.set_nodelay(true)?;
            *stream = Some(BufReader::new(s));
        }
        let s = stream.as_mut().expect("connected above");
        write_frame(s, rpc).await?;
        match read_frame(s, &Limits::DEFAULT).await {
            Ok(Reply::Refused(why)) => Err(std::io::Error::other(format!("refused: {why}"))),
            Ok(reply) => Ok(reply),
            Err(FrameError::Io(e)) => Err(e),
            Err(e) => Err(std::io::Error::other(e.to_string())),
        }
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
