//! `cargo xtask scale`, `index-lookup` and `latency`: the message store's
//! measuring examples, each one of its examples run with one figure given.

use crate::process::cargo;

/// `scale [--queues N]`: the message store with `queues` queues.
pub fn scale(queues: u64) -> Result<(), String> {
    message_store_example("scale", &["--queues", &queues.to_string()])
}

/// `index-lookup [--keys N]`: `query_by_key` latency over `keys` keys.
pub fn index_lookup(keys: u64) -> Result<(), String> {
    message_store_example("index_lookup", &["--keys", &keys.to_string()])
}

/// `latency [--rate R]`: put-to-consumer lag at `rate` messages/s, and ack and
/// end-to-end latency under sync flush.
pub fn latency(rate: u64) -> Result<(), String> {
    message_store_example("latency", &["--rate", &rate.to_string()])
}

/// Runs one of the message store's measuring examples (release build, real disk).
fn message_store_example(name: &str, args: &[&str]) -> Result<(), String> {
    let mut all = vec!["run", "--release", "--quiet", "-p", "message-store", "--example", name, "--"];
    all.extend_from_slice(args);
    cargo(&all, &[])
}
