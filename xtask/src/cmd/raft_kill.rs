//! `cargo xtask raft-kill [--kills N] [--groups G]`: a 3-node cluster of real
//! processes, its leaders killed, committed entries counted.

use std::env;
use std::path::Path;
use std::process::Command;

use crate::process::{cargo, run_timed};
use crate::USAGE;

/// `[--kills N] [--groups G]`, in any order.
pub fn parse_args(args: &[String]) -> Result<(u64, u64), String> {
    let (mut kills, mut groups) = (20, 8);
    let mut rest = args.iter();
    while let Some(name) = rest.next() {
        let slot = match name.as_str() {
            "--kills" => &mut kills,
            "--groups" => &mut groups,
            other => return Err(format!("unknown option {other}\n{USAGE}")),
        };
        let value = rest.next().ok_or(format!("{name} needs a number"))?;
        *slot = value.parse().map_err(|_| format!("{name} takes a number, not {value}"))?;
    }
    Ok((kills, groups))
}

/// The leader-kill test on real processes, `groups` raft groups on each node's
/// one log, the node leading the most groups killed each time; fails unless no
/// committed entry was lost and every group went on committing. The example is
/// built as `cargo test --workspace` builds it (the test profile, the
/// workspace's features), so in `ci` nothing is compiled again, and the test
/// profile's optimisation keeps the cluster quick.
pub fn run(kills: u64, groups: u64) -> Result<(), String> {
    cargo(&["build", "-q", "--workspace", "--profile", "test", "--examples"], &[])?;
    let target = env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    let exe = Path::new(&target).join("debug/examples/raft-node");
    let (kills, groups) = (kills.to_string(), groups.to_string());
    let args = ["kill-test", "--kills", &kills, "--groups", &groups];
    let out = run_timed(Command::new(&exe), "raft-node", &args, &[], true)?;
    let line = out.lines().rev().find(|l| l.contains("leader kills")).ok_or("raft-kill printed no result line")?;
    if line.contains(", 0 committed entries lost") && line.contains("every group committed after the last kill: true") {
        Ok(())
    } else {
        Err(format!("raft-kill: {line}"))
    }
}
