//! `cargo xtask bench-compare [--quick] [--baseline FILE] [--cpu-load N]`: this
//! project and its peers side by side.

use crate::process::cargo;
use crate::USAGE;

/// Builds and runs the comparison runner (its own manifest, so the peers never
/// enter the main build), writing docs/benchmarks.md, its plot docs/benchmarks.svg
/// and the results document docs/benchmarks.json. `--baseline FILE` (a results
/// document of another run or machine, or of `commitlog bench --json`) adds the
/// ratios to it to the report and its bars to the plot.
pub fn run(args: &[String]) -> Result<(), String> {
    let cwd = std::env::current_dir().map_err(|e| e.to_string())?;
    let (mut quick, mut baseline, mut load) = (false, None, None);
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "--quick" => quick = true,
            "--cpu-load" => {
                let loops = rest.next().ok_or("--cpu-load needs a number of busy loops")?;
                loops.parse::<usize>().map_err(|_| format!("--cpu-load {loops}: not a number"))?;
                load = Some(loops.clone());
            }
            "--baseline" => {
                let file = rest.next().ok_or("--baseline needs a file")?;
                // Absolute, whichever directory the runner works in.
                baseline = Some(cwd.join(file).to_str().ok_or("non-UTF-8 path")?.to_string());
            }
            other => return Err(format!("bench-compare: unknown option {other}\n{USAGE}")),
        }
    }
    // A run with busy loops beside writes its own report: the quiet one stays.
    let out = cwd.join(if load.is_some() { "docs/benchmarks-loaded.md" } else { "docs/benchmarks.md" });
    let out = out.to_str().ok_or("non-UTF-8 path")?.to_string();
    let mut run = vec!["run", "--release", "--manifest-path", "bench-compare/Cargo.toml", "--", "--out", &out];
    if quick {
        run.push("--quick");
    }
    if let Some(loops) = &load {
        run.extend(["--cpu-load", loops]);
    }
    if let Some(file) = &baseline {
        run.extend(["--baseline", file]);
    }
    cargo(&run, &[])
}
