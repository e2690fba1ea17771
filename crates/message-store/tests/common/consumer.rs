//! Helpers of the consumer's tests: a store with a topic `t`, messages
//! `"m{i}"` put round-robin, bodies sorted, a consumer drained, and a future
//! run on this thread. A module of its own (`#[path]`), not of `common`,
//! which the crash suite includes too.

#![allow(dead_code)]

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use commitlog::FlushDiskType;
use futures_core::Stream;
use message_store::{Consumer, ConsumerConfig, Message, MessageStore, StoredMessage, TagFilter};
use store_io::sim::SimStorage;

use crate::common::{config, open};

/// How long a drain waits for a message that does not come.
pub const SHORT: Duration = Duration::from_millis(50);

/// A simulated store (async flush) with topic `t` of `queues` queues.
pub fn store_with(queues: u32) -> (SimStorage, MessageStore) {
    let sim = SimStorage::new();
    let store = open(&sim, config(FlushDiskType::AsyncFlush));
    store.create_topic("t", queues).unwrap();
    (sim, store)
}

/// Puts `count` messages on `topic` round-robin over its `queues` queues,
/// bodies `"m{i}"` from `from`, and dispatches them.
pub fn put(store: &MessageStore, topic: &str, queues: u32, from: u32, count: u32) {
    for i in from..from + count {
        store.put_message(&Message::new(topic, i % queues, format!("m{i}"))).unwrap();
    }
    store.dispatch_now().unwrap();
}

/// The messages' bodies as text, sorted.
pub fn bodies(messages: &[StoredMessage]) -> Vec<String> {
    let mut out: Vec<String> = messages.iter().map(|m| String::from_utf8(m.body.to_vec()).unwrap()).collect();
    out.sort();
    out
}

/// `"m{i}"` for `i` in `range`, sorted as [`bodies`] sorts.
pub fn bodies_of(range: std::ops::Range<u32>) -> Vec<String> {
    let mut out: Vec<String> = range.map(|i| format!("m{i}")).collect();
    out.sort();
    out
}

/// A member of `group` (with `config`) following topic `t`, every tag.
pub fn member(store: &MessageStore, group: &str, config: ConsumerConfig) -> Consumer {
    let mut consumer = store.consumer(group, config).unwrap();
    consumer.subscribe("t", TagFilter::All).unwrap();
    consumer
}

/// Every message the consumer hands out until none comes for [`SHORT`].
pub fn drain(consumer: &mut Consumer) -> Vec<StoredMessage> {
    consumer.messages(SHORT).map(Result::unwrap).collect()
}

/// A future of a stream's next item.
pub fn next<S: Stream + Unpin>(stream: &mut S) -> impl Future<Output = Option<S::Item>> + '_ {
    std::future::poll_fn(move |cx| Pin::new(&mut *stream).poll_next(cx))
}

/// Wakes a thread parked in [`block_on`].
pub struct Unpark(pub std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Runs a future on this thread, parking while it is pending.
pub fn block_on<F: Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park_timeout(Duration::from_secs(10));
    }
}
