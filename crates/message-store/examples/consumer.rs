//! A consumer group, blocking and under tokio: producers put orders on a topic
//! of 8 queues; two members of the group `billing` share the queues, each in
//! its own thread, reading with the blocking iterator and committing after
//! each batch they processed; then two members of the group `audit`, each a
//! tokio task, read the same orders as streams while tasks put more and await
//! their durability. Each group sees every order once (no member leaves, so
//! no queue moves), and a restarted member resumes from the commits.
//!
//! `cargo run --release -p message-store --example consumer`

use std::pin::Pin;
use std::time::Duration;

use futures_core::Stream;
use message_store::{
    CommitLogConfig, ConsumerConfig, FlushDiskType, Message, MessageStore, MessageStoreConfig, StoreError, TagFilter,
};

const ORDERS: u32 = 4_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let log = CommitLogConfig::builder().flush_disk_type(FlushDiskType::SyncFlush).build()?;
    let store = MessageStore::open(dir.path(), MessageStoreConfig::builder().log(log).build()?)?;
    store.create_topic("orders", 8)?;

    // Producers: four threads, each waiting for its orders to be durable.
    let producers: Vec<_> = (0..4u32)
        .map(|p| {
            let store = store.clone();
            std::thread::spawn(move || -> Result<(), StoreError> {
                for i in (p..ORDERS).step_by(4) {
                    let put = store.put_message(&Message::new("orders", i % 8, format!("order {i}")))?;
                    put.durability.wait()?;
                }
                Ok(())
            })
        })
        .collect();
    for producer in producers {
        producer.join().expect("producer")?;
    }

    // Blocking: two members share the 8 queues, 4 each. Every member joins
    // before any reads, so the queues are shared once.
    let members: Vec<_> = (0..2)
        .map(|_| {
            let mut member = store.consumer("billing", ConsumerConfig::default().max_batch(64))?;
            member.subscribe("orders", TagFilter::All)?;
            Ok(member)
        })
        .collect::<Result<_, StoreError>>()?;
    let readers: Vec<_> = members
        .into_iter()
        .map(|mut member| {
            std::thread::spawn(move || -> Result<(usize, message_store::Consumer), StoreError> {
                let mut read = 0;
                loop {
                    let batch = member.poll(Duration::from_millis(200))?;
                    if batch.is_empty() {
                        return Ok((read, member)); // caught up
                    }
                    read += batch.len(); // ... process the batch ...
                    member.commit()?; // at least once: commit what was processed
                }
            })
        })
        .collect();
    let mut billed = 0;
    let mut stopped = Vec::new();
    for reader in readers {
        let (read, member) = reader.join().expect("reader")?;
        billed += read;
        stopped.push(member);
    }
    drop(stopped);
    println!("billing: {billed} orders read by 2 members (blocking)");
    assert_eq!(billed, ORDERS as usize);

    // Async: two members of another group as tokio tasks, while tasks put
    // more orders and await their durability; nothing blocks a runtime thread
    // waiting for a message or for a commit's sync.
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_time().build()?;
    let audited = runtime.block_on(async {
        let members: Vec<_> = (0..2)
            .map(|_| {
                let mut member = store.consumer("audit", ConsumerConfig::default())?;
                member.subscribe("orders", TagFilter::All)?;
                Ok(member)
            })
            .collect::<Result<_, StoreError>>()?;
        let puts: Vec<_> = (ORDERS..ORDERS + 1_000)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    let put = store.put_message(&Message::new("orders", i % 8, format!("order {i}")))?;
                    put.durability.await?;
                    Ok::<(), StoreError>(())
                })
            })
            .collect();
        let tasks: Vec<_> = members
            .into_iter()
            .map(|mut member| {
                tokio::spawn(async move {
                    let mut read = 0;
                    // Ends when no order comes for 200 ms.
                    while let Ok(Some(order)) =
                        tokio::time::timeout(Duration::from_millis(200), next(&mut member)).await
                    {
                        order?;
                        read += 1;
                    }
                    member.commit_async().await?; // the sync awaited, not blocked on
                    Ok::<_, StoreError>((read, member))
                })
            })
            .collect();
        for put in puts {
            put.await.expect("put task")?;
        }
        let mut read = 0;
        let mut stopped = Vec::new();
        for task in tasks {
            let (n, member) = task.await.expect("member task")?;
            read += n;
            stopped.push(member);
        }
        drop(stopped);
        Ok::<_, StoreError>(read)
    })?;
    println!("audit: {audited} orders read by 2 members (tokio streams)");

    // A restarted member of billing resumes from its group's commits: only
    // the orders put since.
    let mut restarted = store.consumer("billing", ConsumerConfig::default())?;
    restarted.subscribe("orders", TagFilter::All)?;
    let since = restarted.messages(Duration::from_millis(200)).count();
    println!("billing after a restart: {since} new orders");
    assert_eq!(since, 1_000);
    restarted.close()?;
    store.shutdown()?;
    Ok(())
}

/// The next item of a stream (what `futures::StreamExt::next` does).
async fn next<S: Stream + Unpin>(stream: &mut S) -> Option<S::Item> {
    std::future::poll_fn(|cx| Pin::new(&mut *stream).poll_next(cx)).await
}
