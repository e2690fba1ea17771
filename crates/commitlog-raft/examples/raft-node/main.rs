//! A sharded, replicated key-value node on openraft with the commit log as its
//! log store: keys hash to G raft groups (`group_of`), each a 3-node group, and
//! all the groups of a node keep their logs on one `RaftLogEngine` in its
//! directory, so their appends share the log's syncs. Nodes talk over loopback
//! TCP (length-prefixed JSON frames); the drivers run a 3-node cluster of real
//! processes:
//!
//! ```text
//! raft-node serve --id 1 --addr 127.0.0.1:7001 --dir /tmp/n1 [--groups 1] [--store commitlog|separate|memory] [--no-snapshots] [--allow-remote]
//! raft-node init --addr 127.0.0.1:7001 --peers 1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003
//! raft-node put --addr 127.0.0.1:7001 --key K --value V [--groups 1]  # follows the group's leader; prints the index
//! raft-node kill-test [--groups 1] [--kills 20] [--interval-ms 800]   # SIGKILL the node leading most groups
//! raft-node bench [--store commitlog|separate|memory] [--groups 1] [--seconds 5] [--clients 32] [--spread-leaders]
//! ```
//!
//! The RPCs carry no authentication: anyone who can reach a node's port can
//! write, read every key, start elections, or initialize and reconfigure the
//! cluster. `serve` therefore refuses an address that is not loopback unless
//! `--allow-remote` says the network is trusted. What any connection can make
//! a node hold is bounded (`rpc::Limits`): frames of at most 16 MiB (a larger
//! length prefix is refused before its body is read), 10 s to send a frame or
//! take a reply, 60 s of silence, 64 connections at once; a malformed or
//! oversized request gets a `Refused` reply and never ends the node (`tests.rs`
//! throws random and hostile frames at one).
//!
//! `kill-test` starts three `serve` processes, initializes every group, writes
//! from several clients (a write counts once `client_write` returned: committed
//! and applied on its group's leader), kills the node that leads the most groups
//! with SIGKILL, waits until every group has a leader, and restarts it on the
//! same directory, again and again; then reads every key of each group from its
//! leader and prints `N leader kills, M entries committed, K committed entries
//! lost`, with the snapshot and purge points and how many snapshots restarted
//! nodes installed (exit code 1 unless K is 0, if a group committed nothing
//! after the last kill, or if enough entries were committed for a purge and
//! none happened). Each group snapshots its state machine every 1,000 entries
//! into `<dir>/sm-<group>` and openraft purges its log to 500 entries below
//! it, so the engine's per-group purge and reclaim, and a purge past the last
//! entry when a restarted node installs a snapshot, run under the kills too.
//! `bench` measures committed writes per second of a cluster of G groups with
//! every group on one commit log (`commitlog`), with a commit log per group
//! (`separate`: the layout where groups share no syncs), or with an in-memory
//! log store (`memory`: the ceiling, no durability at all), and each node's
//! log syncs per committed entry (its `Syncs` RPC before and after). Every
//! group's leader is then the node the cluster was initialized through (it
//! campaigns first); `--spread-leaders` has group g's leadership moved to node
//! `g mod 3 + 1` first (a `Campaign` RPC), as a multi-raft deployment balances
//! its leaders.
//!
//! One job per file: `main.rs` the commands, `node.rs` a node (its raft
//! configuration, serving and applying RPCs), `rpc.rs` the wire, `network.rs`
//! openraft's network over it, `mem.rs` the in-memory log store of the bench's
//! ceiling, `cluster.rs` a cluster of real processes, `drivers.rs` `kill-test`
//! and `bench`. The state machine is the one openraft's storage suite runs
//! with (`tests/kv`).

mod cluster;
mod drivers;
#[path = "../../tests/kv/mod.rs"]
mod kv;
mod mem;
mod network;
mod node;
mod rpc;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use commitlog_raft::{RaftLogEngine, RaftLogStore, RaftStoreConfig};
use kv::{NodeId, Request, StateMachine, TypeConfig};
use openraft::error::{InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse, VoteRequest,
    VoteResponse,
};
use openraft::{BasicNode, Config, Raft, SnapshotPolicy};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use cluster::*;
use drivers::*;
use network::*;
use node::*;
use rpc::*;

type Error = Box<dyn std::error::Error + Send + Sync>;

async fn serve_command(args: &[String]) -> Result<bool, Error> {
    let id = arg(args, "--id", 0u64)?;
    let addr = arg(args, "--addr", String::new())?;
    let dir = arg(args, "--dir", PathBuf::new())?;
    let flag = |name: &str| args.iter().any(|a| a == name);
    let groups = arg(args, "--groups", 1u64)?;
    if groups == 0 {
        return Err("--groups must be at least 1".into());
    }
    check_bind_address(&addr, flag("--allow-remote"))?;
    let stores = Stores::parse(&arg(args, "--store", "commitlog".to_string())?)?;
    serve(id, addr, dir, stores, !flag("--no-snapshots"), groups).await?;
    Ok(true)
}

/// The RPCs are not authenticated: anyone who can reach the port can write or
/// reconfigure the cluster. So a node serves on a loopback address unless
/// `--allow-remote` says its network is trusted.
fn check_bind_address(addr: &str, allow_remote: bool) -> Result<(), Error> {
    let parsed: SocketAddr = addr.parse().map_err(|_| format!("--addr {addr:?} is not IP:PORT"))?;
    if parsed.ip().is_loopback() || allow_remote {
        Ok(())
    } else {
        Err(format!(
            "refusing to serve on {addr}: the RPCs are not authenticated, so anyone who can reach it could write \
             or reconfigure the cluster; serve on a loopback address, or pass --allow-remote on a trusted network"
        )
        .into())
    }
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

/// One write, sent to the leader of its key's group (asking the node at
/// `--addr` where it is); `--groups` must be what the nodes serve.
async fn put_command(args: &[String]) -> Result<bool, Error> {
    let mut addr = arg(args, "--addr", String::new())?;
    let request = Request { key: arg(args, "--key", String::new())?, value: arg(args, "--value", String::new())? };
    let group = group_of(&request.key, arg(args, "--groups", 1u64)?);
    for _ in 0..10 {
        match call_once(&addr, &Rpc::Write(group, request.clone()), Duration::from_secs(5)).await? {
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
