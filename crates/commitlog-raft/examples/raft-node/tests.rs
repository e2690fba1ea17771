//! A node under hostile connections: random bytes, oversized length prefixes,
//! malformed and truncated frames, stalled senders, more connections than it
//! serves. Each gets a `Refused` reply or a closed connection, never an
//! allocation of what a prefix claims, and the node answers a well-formed
//! request afterwards.

use super::*;

/// A node on an ephemeral loopback port with the in-memory log store and
/// `limits`; returns its address.
async fn node(limits: Limits) -> String {
    let config = raft_config(false).unwrap();
    let sm = Arc::new(StateMachine::default());
    let raft = Raft::new(1, config, Network { group: 0 }, mem::MemLogStore::default(), Arc::clone(&sm)).await.unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(serve_on(listener, Arc::new(Node { groups: vec![(raft, sm)], engines: Vec::new() }), limits));
    addr
}

const TEST_LIMITS: Limits = Limits {
    max_frame: 64 << 10,
    frame_time: Duration::from_millis(300),
    idle_time: Duration::from_millis(600),
    max_connections: 8,
};

/// The node still answers a well-formed request on a new connection.
async fn answers(addr: &str) {
    match call_once(addr, &Rpc::Leader(0), Duration::from_secs(5)).await {
        Ok(Reply::Leader(..)) => {}
        other => panic!("the node stopped answering: {other:?}"),
    }
}

/// The reply to `bytes` sent raw on a new connection, or `None` if the node
/// closed it without one.
async fn raw(addr: &str, bytes: &[u8]) -> Option<Reply> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    read_frame::<Reply, _>(&mut s, &Limits::DEFAULT).await.ok()
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut f = (body.len() as u32).to_le_bytes().to_vec();
    f.extend_from_slice(body);
    f
}

/// A small deterministic generator (xorshift64*): the same frames every run.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[tokio::test]
async fn oversized_and_malformed_frames_are_refused_and_the_node_keeps_serving() {
    let addr = node(TEST_LIMITS).await;
    // A prefix claiming 4 GiB: refused before a byte of the body is read.
    match raw(&addr, &u32::MAX.to_le_bytes()).await {
        Some(Reply::Refused(why)) => assert!(why.contains("4294967295 bytes exceeds"), "{why}"),
        other => panic!("an oversized frame: {other:?}"),
    }
    // A whole frame that is not a request: refused, and the connection goes on.
    let mut s = TcpStream::connect(&addr).await.unwrap();
    s.write_all(&frame(b"{\"Write\": 42")).await.unwrap();
    assert!(matches!(read_frame::<Reply, _>(&mut s, &Limits::DEFAULT).await, Ok(Reply::Refused(_))));
    write_frame(&mut s, &Rpc::Leader(0)).await.unwrap();
    assert!(matches!(read_frame::<Reply, _>(&mut s, &Limits::DEFAULT).await, Ok(Reply::Leader(..))));
    // Valid JSON of the wrong shape, an empty frame, a frame cut short.
    for bytes in [frame(b"[1, 2, 3]"), frame(b""), frame(b"\"Leader\"")[..5].to_vec()] {
        let reply = raw(&addr, &bytes).await;
        assert!(matches!(reply, None | Some(Reply::Refused(_)) | Some(Reply::Leader(..))), "{reply:?}");
    }
    answers(&addr).await;
}

#[tokio::test]
async fn random_frames_never_end_the_node() {
    let addr = node(TEST_LIMITS).await;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let valid = serde_json::to_vec(&Rpc::Address(7)).unwrap();
    for i in 0..300 {
        let bytes = match i % 3 {
            // Random bytes, prefix included.
            0 => (0..rng.next() % 64).map(|_| rng.next() as u8).collect(),
            // A well-formed prefix over random bytes.
            1 => frame(&(0..rng.next() % 256).map(|_| rng.next() as u8).collect::<Vec<_>>()),
            // A valid request with a few bytes changed.
            _ => {
                let mut body = valid.clone();
                for _ in 0..1 + rng.next() % 3 {
                    let at = (rng.next() % body.len() as u64) as usize;
                    body[at] = rng.next() as u8;
                }
                frame(&body)
            }
        };
        // Whatever comes back (a refusal, an answer, a closed connection), the
        // node must survive it.
        let _ = tokio::time::timeout(Duration::from_secs(5), raw(&addr, &bytes)).await;
    }
    answers(&addr).await;
}

#[tokio::test]
async fn stalled_and_surplus_connections_are_closed() {
    let addr = node(TEST_LIMITS).await;
    // Half a length prefix, then nothing: closed after the frame time.
    let mut stalled = TcpStream::connect(&addr).await.unwrap();
    stalled.write_all(&[1, 0]).await.unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 16];
    let n = tokio::time::timeout(Duration::from_secs(5), stalled.read(&mut buf)).await.expect("closed in time");
    assert_eq!(n.unwrap_or(0), 0, "closed, no reply");
    assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
    // Silent connections beyond the bound are closed at once; the ones within
    // it after the idle time; then the node takes new ones again.
    let mut idle = Vec::new();
    for _ in 0..TEST_LIMITS.max_connections + 4 {
        idle.push(TcpStream::connect(&addr).await.unwrap());
    }
    let mut closed_at_once = 0;
    for s in &mut idle {
        if let Ok(read) = tokio::time::timeout(Duration::from_millis(200), s.read(&mut buf)).await {
            assert_eq!(read.unwrap_or(0), 0);
            closed_at_once += 1;
        }
    }
    assert!(closed_at_once >= 4, "only {closed_at_once} of the surplus closed");
    tokio::time::sleep(TEST_LIMITS.idle_time * 2).await;
    answers(&addr).await;
}

#[test]
fn serving_beyond_loopback_needs_a_flag() {
    assert!(check_bind_address("127.0.0.1:7001", false).is_ok());
    assert!(check_bind_address("[::1]:7001", false).is_ok());
    let refused = check_bind_address("0.0.0.0:7001", false).unwrap_err().to_string();
    assert!(refused.contains("not authenticated") && refused.contains("--allow-remote"), "{refused}");
    assert!(check_bind_address("0.0.0.0:7001", true).is_ok());
    assert!(check_bind_address("localhost:7001", false).is_err(), "IP:PORT only");
}

#[tokio::test]
async fn a_request_for_a_group_the_node_does_not_run_is_refused() {
    let addr = node(TEST_LIMITS).await;
    let request = Rpc::Write(3, Request { key: "k".into(), value: "v".into() });
    match call_once(&addr, &request, Duration::from_secs(5)).await {
        Err(e) => assert!(e.to_string().contains("no group 3"), "{e}"),
        Ok(reply) => panic!("a write to a missing group: {reply:?}"),
    }
    answers(&addr).await;
}

#[test]
fn keys_hash_to_every_group() {
    let mut seen = BTreeSet::new();
    for k in 0..1000 {
        let g = group_of(&format!("key-{k:08}"), 8);
        assert!(g < 8);
        seen.insert(g);
    }
    assert_eq!(seen.len(), 8);
    assert_eq!(group_of("anything", 1), 0);
}
