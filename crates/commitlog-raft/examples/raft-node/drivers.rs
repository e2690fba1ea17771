//! The drivers CI runs: `kill-test` (SIGKILL the leader again and again, count committed
//! entries lost) and `bench` (committed writes per second).

use super::*;

pub(crate) fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> Result<T, Error> {
    match args.iter().position(|a| a == name) {
        Some(i) => {
            args.get(i + 1).ok_or(format!("{name} needs a value"))?.parse().map_err(|_| format!("bad {name}").into())
        }
        None => Ok(default),
    }
}

pub(crate) async fn kill_test(args: &[String]) -> Result<bool, Error> {
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

pub(crate) async fn bench(args: &[String]) -> Result<(), Error> {
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
