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
    let groups: u64 = arg(args, "--groups", 1)?;
    let writers: usize = arg(args, "--writers", 4.max(groups as usize))?;
    let root = tempfile::tempdir()?;
    let mut cluster = Cluster::start(root.path(), groups, Stores::Shared, true)?;
    cluster.wait_listening(Instant::now() + Duration::from_secs(30)).await?;
    cluster.init().await?;
    cluster.leaders(Instant::now() + Duration::from_secs(30)).await?;

    let stop = Arc::new(AtomicBool::new(false));
    let next = Arc::new(AtomicU64::new(0));
    // Committed keys, by group.
    let committed: Arc<parking_lot::Mutex<BTreeMap<u64, Vec<String>>>> = Arc::default();
    let tasks: Vec<_> = (0..writers)
        .map(|_| {
            let (addrs, stop, next, committed) =
                (cluster.addrs.clone(), Arc::clone(&stop), Arc::clone(&next), Arc::clone(&committed));
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("key-{:08}", next.fetch_add(1, Ordering::Relaxed));
                    let group = group_of(&key, groups);
                    if write_until_committed(&addrs, group, key.clone(), &stop).await {
                        committed.lock().entry(group).or_default().push(key);
                    }
                }
            })
        })
        .collect();
    let started = Instant::now();
    let counts = |committed: &BTreeMap<u64, Vec<String>>| -> BTreeMap<u64, usize> {
        committed.iter().map(|(g, keys)| (*g, keys.len())).collect()
    };
    let mut at_last_kill = BTreeMap::new();
    for kill in 0..kills {
        tokio::time::sleep(interval).await;
        // The node leading the most groups.
        let leaders = cluster.leaders(Instant::now() + Duration::from_secs(30)).await?;
        let mut led: BTreeMap<NodeId, usize> = BTreeMap::new();
        for leader in leaders.values() {
            *led.entry(*leader).or_default() += 1;
        }
        let (&victim, &most) = led.iter().max_by_key(|(_, n)| **n).ok_or("no leaders")?;
        cluster.kill(victim)?;
        at_last_kill = counts(&committed.lock());
        let total: usize = at_last_kill.values().sum();
        eprintln!(
            "kill {}: node {victim} (SIGKILL), leader of {most} of {groups} groups; {total} committed so far",
            kill + 1
        );
        // Every group elects a leader without it; then it comes back, recovers
        // its groups' logs from the files the kill left, and rejoins.
        let leaders = cluster.leaders(Instant::now() + Duration::from_secs(30)).await?;
        let on: BTreeSet<NodeId> = leaders.values().copied().collect();
        eprintln!("   every group elected (leaders on nodes {on:?}); node {victim} restarts");
        cluster.spawn(victim)?;
    }
    tokio::time::sleep(interval).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await?;
    }
    cluster.wait_listening(Instant::now() + Duration::from_secs(30)).await?;
    let committed = committed.lock().clone();
    let (mut lost, mut unique, mut compacted, mut stalled) = (0usize, 0usize, true, Vec::new());
    let mut points = Vec::new();
    for group in 0..groups {
        let leader = cluster.leader(group, Instant::now() + Duration::from_secs(30)).await?;
        let addr = &cluster.addrs[&leader];
        let held = loop {
            match call_once(addr, &Rpc::Dump(group), Duration::from_secs(10)).await? {
                Reply::Dump(Ok(kv)) => break kv,
                other => {
                    eprintln!("dump of group {group}: {other:?}; retrying");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        };
        let (snapshot, purged) = match call_once(addr, &Rpc::Compaction(group), Duration::from_secs(10)).await? {
            Reply::Compaction(snapshot, purged) => (snapshot, purged),
            other => return Err(format!("compaction of group {group}: {other:?}").into()),
        };
        let keys = committed.get(&group).cloned().unwrap_or_default();
        lost += keys.iter().filter(|k| held.get(*k) != Some(*k)).count();
        let group_unique = keys.iter().collect::<BTreeSet<_>>().len();
        unique += group_unique;
        // Enough entries for a snapshot and a purge, and none happened: the
        // test did not run what it claims to.
        if purged.is_none() && group_unique as u64 >= 2 * (SNAPSHOT_EVERY + KEEP_BELOW_SNAPSHOT) {
            eprintln!("no purge in group {group} after {group_unique} entries");
            compacted = false;
        }
        if kills > 0 && keys.len() <= at_last_kill.get(&group).copied().unwrap_or(0) {
            stalled.push(group);
        }
        points.push((snapshot, purged));
    }
    cluster.stop();
    let installed: u64 = cluster
        .addrs
        .keys()
        .flat_map(|id| (0..groups).map(move |g| (*id, g)))
        .map(|(id, g)| kv::installs(&sm_dir(&cluster.dir(id), g)))
        .sum();
    if !stalled.is_empty() {
        eprintln!("groups {stalled:?} committed nothing after the last kill");
    }
    let snapshots = points.iter().filter(|(s, _)| s.is_some()).count();
    let purges = points.iter().filter(|(_, p)| p.is_some()).count();
    let show = |i: Option<u64>| i.map_or("none".to_string(), |i| i.to_string());
    eprintln!("{:.1?}", started.elapsed());
    println!(
        "{kills} leader kills ({groups} groups), {unique} entries committed, {lost} committed entries lost; \
         {snapshots} groups snapshotted, {purges} purged (group 0: snapshot at index {}, log purged up to {}); \
         {installed} snapshots installed on restarted nodes; every group committed after the last kill: {}",
        show(points[0].0),
        show(points[0].1),
        stalled.is_empty()
    );
    Ok(lost == 0 && compacted && stalled.is_empty())
}

pub(crate) async fn bench(args: &[String]) -> Result<(), Error> {
    let stores = Stores::parse(&arg(args, "--store", "commitlog".to_string())?)?;
    let seconds: u64 = arg(args, "--seconds", 5)?;
    let clients: usize = arg(args, "--clients", 32)?;
    let groups: u64 = arg(args, "--groups", 1)?;
    let root = tempfile::tempdir_in(arg(args, "--dir", std::env::temp_dir())?)?;
    // No snapshots: the state machine's snapshot cost is not the log store's.
    let mut cluster = Cluster::start(root.path(), groups, stores, false)?;
    cluster.wait_listening(Instant::now() + Duration::from_secs(30)).await?;
    cluster.init().await?;
    // openraft elects the node the cluster was initialized through for every
    // group (it campaigns first); `--spread-leaders` moves them round the nodes.
    let leaders = if args.iter().any(|a| a == "--spread-leaders") {
        cluster.spread_leaders(Instant::now() + Duration::from_secs(60)).await?
    } else {
        cluster.leaders(Instant::now() + Duration::from_secs(30)).await?
    };
    let syncs_before = cluster.syncs().await?;
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    // Client c writes to group c mod G, at its leader.
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let group = c as u64 % groups;
            let (addr, done) = (cluster.addrs[&leaders[&group]].clone(), Arc::clone(&done));
            tokio::spawn(async move {
                let mut stream = None;
                let mut n = 0u64;
                while Instant::now() < deadline {
                    let rpc = Rpc::Write(group, Request { key: format!("c{c}-{n}"), value: "x".repeat(100) });
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
    let committed = done.load(Ordering::Relaxed);
    let rate = committed as f64 / started.elapsed().as_secs_f64();
    // Each node's syncs over the run, per committed entry: the leader's of
    // group 0, and the busiest node's (a node may lead some groups and follow
    // others, and one sync of its log serves both).
    let syncs_after = cluster.syncs().await?;
    let per_entry = |id: &NodeId| (syncs_after[id] - syncs_before[id]) as f64 / committed.max(1) as f64;
    let busiest = cluster.addrs.keys().map(per_entry).fold(0.0, f64::max);
    let leader = per_entry(&leaders[&0]);
    let leading_nodes = leaders.values().collect::<BTreeSet<_>>().len();
    cluster.stop();
    println!(
        "{{\"store\": \"{}\", \"groups\": {groups}, \"clients\": {clients}, \"seconds\": {seconds}, \
         \"committed_per_sec\": {rate:.0}, \"group0_leader_syncs_per_entry\": {leader:.3}, \
         \"max_node_syncs_per_entry\": {busiest:.3}, \"leading_nodes\": {leading_nodes}}}",
        stores.name()
    );
    Ok(())
}
