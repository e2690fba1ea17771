//! `cargo xtask proptest --cases N [--seed S]`: the property tests with N cases.

use crate::process::cargo;
use crate::USAGE;

/// The property tests (`prop_*`) with `--cases N` cases (and `--seed S`), in an
/// optimised build.
pub fn run(args: &[String]) -> Result<(), String> {
    let mut cases = None;
    let mut seed = None;
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "--cases" => cases = iter.next().cloned(),
            "--seed" => seed = iter.next().cloned(),
            other => return Err(format!("unknown proptest option {other}\n{USAGE}")),
        }
    }
    let cases = cases.ok_or("proptest needs --cases N")?;
    cases.parse::<u32>().map_err(|_| format!("--cases takes a number, not {cases}"))?;
    let mut envs = vec![("PROPTEST_CASES", cases.as_str())];
    if let Some(seed) = &seed {
        seed.parse::<u64>().map_err(|_| format!("--seed takes a number, not {seed}"))?;
        envs.push(("PROPTEST_RNG_SEED", seed.as_str()));
    }
    cargo(&["test", "--workspace", "--release", "--", "prop_"], &envs)
}
