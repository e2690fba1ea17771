//! One file per subcommand. A new subcommand gets its file here, its line in
//! `USAGE`, the module comment and `main`'s dispatch in main.rs, and its line in
//! the README's list.

pub mod bench_compare;
pub mod ci;
pub mod crash;
pub mod fuzz;
pub mod loom;
pub mod miri;
pub mod msrv;
pub mod proptest;
pub mod raft_bench;
pub mod raft_kill;
pub mod release_check;
pub mod store_examples;
pub mod test;
