//! The benchmark results document (`commitlog-bench/1`): what `commitlog bench
//! --json` prints and `cargo xtask bench-compare` writes to docs/benchmarks.json,
//! the side-by-side ratio table against a baseline document, and the plot
//! (docs/benchmarks.svg) drawn from a document and its baseline.
//!
//! One format for both tools, so two machines or two configurations compare
//! with one command: run with `--json` on one, keep the file, and run with
//! `--baseline FILE` on the other. Rows pair up by workload and system; rows
//! left over pair up by workload when each side has one of that workload (two
//! configurations of the same tool).
//!
//! This file is shared with the comparison runner (`bench-compare`, which
//! includes it by path), so it depends on std and serde only.

use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The value of [`Doc::format`] this version writes and reads.
pub const FORMAT: &str = "commitlog-bench/1";

/// One benchmark run: its rows and where they were measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Doc {
    /// [`FORMAT`]; a file without it, or with another, is refused.
    pub format: String,
    /// Cores, CPU, memory, kernel and the file system of the bench directory.
    pub machine: String,
    /// Seconds since the Unix epoch at the end of the run.
    #[serde(default)]
    pub unix_time: u64,
    /// The rows, in report order.
    pub runs: Vec<Row>,
}

/// One system on one workload.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Row {
    /// The workload's short name (`a`, `sync`, `d-async-1024`, ...).
    pub workload: String,
    /// The workload's title, for the plot.
    #[serde(default)]
    pub title: String,
    /// The system measured.
    pub system: String,
    /// Settings that set this row apart from another of the same system.
    #[serde(default)]
    pub config: String,
    /// True for this project's rows (drawn in colour).
    #[serde(default)]
    pub ours: bool,
    /// Records per second (the median run where there were several).
    pub records_per_sec: f64,
    /// The slowest and fastest run, where there were several.
    #[serde(default)]
    pub min_records_per_sec: Option<f64>,
    /// See [`Row::min_records_per_sec`].
    #[serde(default)]
    pub max_records_per_sec: Option<f64>,
    /// Megabytes per second of record bodies (or of what the row counts).
    #[serde(default)]
    pub mb_per_sec: f64,
    /// The latency of the workload's unit of work (a batch, an acknowledged
    /// record, an append).
    #[serde(default)]
    pub latency: Option<Latency>,
    /// The tool's own figures for this row (counts, flushes, other latencies).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub detail: serde_json::Value,
}

/// Latency percentiles in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Latency {
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Largest.
    pub max_us: f64,
}

impl Latency {
    /// The percentiles of `nanos` (any order); `None` when empty.
    pub fn of(mut nanos: Vec<u64>) -> Option<Latency> {
        if nanos.is_empty() {
            return None;
        }
        nanos.sort_unstable();
        let at = |q: f64| nanos[((nanos.len() as f64 * q) as usize).min(nanos.len() - 1)] as f64 / 1000.0;
        Some(Latency { p50_us: at(0.50), p99_us: at(0.99), p999_us: at(0.999), max_us: at(1.0) })
    }
}

/// Why a baseline document could not be used.
#[derive(Debug)]
pub enum DocError {
    /// The file could not be read.
    Read(std::io::Error),
    /// The file is not JSON of this shape.
    Parse(serde_json::Error),
    /// The document is of another format (or version).
    Format(String),
}

impl std::fmt::Display for DocError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DocError::Read(e) => write!(f, "cannot read it: {e}"),
            DocError::Parse(e) => write!(f, "not a benchmark results document: {e}"),
            DocError::Format(found) => write!(f, "format {found:?}; this version reads {FORMAT:?}"),
        }
    }
}

impl Doc {
    /// A document of `runs` measured on this machine, now.
    pub fn new(bench_dir: &Path, runs: Vec<Row>) -> Doc {
        let unix_time = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        Doc { format: FORMAT.into(), machine: machine(bench_dir), unix_time, runs }
    }

    /// Reads a document written by either tool.
    pub fn read(path: &Path) -> Result<Doc, DocError> {
        let bytes = std::fs::read(path).map_err(DocError::Read)?;
        let doc: Doc = serde_json::from_slice(&bytes).map_err(DocError::Parse)?;
        if doc.format != FORMAT {
            return Err(DocError::Format(doc.format));
        }
        Ok(doc)
    }
}

/// A row of this run and its baseline counterpart, if any.
pub struct Pair<'a> {
    /// This run's row.
    pub this: &'a Row,
    /// The baseline's row of the same workload and system (or the only one of
    /// its workload left on both sides).
    pub baseline: Option<&'a Row>,
}

impl Pair<'_> {
    /// This run's throughput over the baseline's.
    pub fn ratio(&self) -> Option<f64> {
        self.baseline.map(|b| self.this.records_per_sec / b.records_per_sec).filter(|r| r.is_finite())
    }
}

/// Pairs every row of `this` with its counterpart in `baseline`.
pub fn pair<'a>(this: &'a Doc, baseline: &'a Doc) -> Vec<Pair<'a>> {
    let mut taken = vec![false; baseline.runs.len()];
    let mut pairs: Vec<Pair<'a>> = this
        .runs
        .iter()
        .map(|row| {
            let found = baseline.runs.iter().enumerate().position(|(i, b)| {
                !taken[i] && b.workload == row.workload && b.system == row.system && b.config == row.config
            });
            if let Some(i) = found {
                taken[i] = true;
            }
            Pair { this: row, baseline: found.map(|i| &baseline.runs[i]) }
        })
        .collect();
    // Two configurations of one tool: the one row of a workload left on each side.
    for p in 0..pairs.len() {
        if pairs[p].baseline.is_some() {
            continue;
        }
        let workload = &pairs[p].this.workload;
        let unpaired_here = pairs.iter().filter(|q| q.baseline.is_none() && &q.this.workload == workload).count();
        let there: Vec<usize> =
            (0..baseline.runs.len()).filter(|&i| !taken[i] && &baseline.runs[i].workload == workload).collect();
        if unpaired_here == 1 && there.len() == 1 {
            taken[there[0]] = true;
            pairs[p].baseline = Some(&baseline.runs[there[0]]);
        }
    }
    pairs
}

fn describe(row: &Row) -> String {
    if row.config.is_empty() {
        row.system.clone()
    } else {
        format!("{} ({})", row.system, row.config)
    }
}

/// The side-by-side table (Markdown) of `this` against `baseline`: each row's
/// throughput, the baseline's, their ratio, and the p99 latencies.
pub fn ratio_table(this: &Doc, baseline: &Doc) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "This run: {}\n\nBaseline: {}\n", this.machine, baseline.machine);
    out.push_str(
        "| workload | system | records/s | baseline records/s | this / baseline | p99 (µs) | baseline p99 (µs) |\n\
         |---|---|---|---|---|---|---|\n",
    );
    let p99 = |row: Option<&Row>| row.and_then(|r| r.latency).map_or("n/a".to_string(), |l| format!("{:.1}", l.p99_us));
    for p in pair(this, baseline) {
        let system = match p.baseline {
            Some(b) if describe(b) != describe(p.this) => format!("{} vs {}", describe(p.this), describe(b)),
            _ => describe(p.this),
        };
        let _ = writeln!(
            out,
            "| {} | {system} | {:.0} | {} | {} | {} | {} |",
            p.this.workload,
            p.this.records_per_sec,
            p.baseline.map_or("n/a".into(), |b| format!("{:.0}", b.records_per_sec)),
            p.ratio().map_or("n/a".into(), |r| format!("{r:.2}x")),
            p99(Some(p.this)),
            p99(p.baseline),
        );
    }
    out
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// A bar chart per workload (in the document's order): each row's throughput
/// (a whisker from the slowest to the fastest run where there were several),
/// its p99.9 latency beside it, and with a baseline, the baseline's throughput
/// as an outlined bar under it and the ratio.
pub fn svg(this: &Doc, baseline: Option<&Doc>) -> String {
    let (width, bar_h, gap, label_w, bar_w) = (960.0, 18.0, 6.0, 330.0, 400.0);
    let pairs = match baseline {
        Some(b) => pair(this, b),
        None => this.runs.iter().map(|r| Pair { this: r, baseline: None }).collect(),
    };
    let mut workloads: Vec<&str> = Vec::new();
    for r in &this.runs {
        if !workloads.contains(&r.workload.as_str()) {
            workloads.push(&r.workload);
        }
    }
    let mut y = 30.0;
    let mut body = String::new();
    for workload in workloads {
        let rows: Vec<&Pair<'_>> = pairs.iter().filter(|p| p.this.workload == workload).collect();
        let title = if rows[0].this.title.is_empty() { workload } else { &rows[0].this.title };
        let _ = writeln!(body, r#"<text x="10" y="{y}" font-size="15" font-weight="bold">{}</text>"#, escape(title));
        y += 12.0;
        let max = rows
            .iter()
            .flat_map(|p| {
                [p.this.max_records_per_sec.unwrap_or(p.this.records_per_sec)]
                    .into_iter()
                    .chain(p.baseline.map(|b| b.max_records_per_sec.unwrap_or(b.records_per_sec)))
            })
            .fold(0.0, f64::max)
            .max(1.0);
        for p in rows {
            y += bar_h + gap;
            let r = p.this;
            let _ = writeln!(
                body,
                r#"<text x="{}" y="{}" font-size="12" text-anchor="end">{}</text>"#,
                label_w - 8.0,
                y - 5.0,
                escape(&describe(r))
            );
            let len = bar_w * r.records_per_sec / max;
            let color = if r.ours { "steelblue" } else { "silver" };
            let _ = writeln!(
                body,
                r#"<rect x="{label_w}" y="{}" width="{len:.1}" height="{bar_h}" fill="{color}"/>"#,
                y - bar_h
            );
            if let (Some(lo), Some(hi)) = (r.min_records_per_sec, r.max_records_per_sec) {
                let (lo, hi) = (label_w + bar_w * lo / max, label_w + bar_w * hi / max);
                let mid = y - bar_h / 2.0;
                let _ = writeln!(body, r#"<line x1="{lo:.1}" y1="{mid}" x2="{hi:.1}" y2="{mid}" stroke="black"/>"#);
            }
            let mut text = format!("{:.0} rec/s", r.records_per_sec);
            if let Some(l) = r.latency {
                let _ = write!(text, ", p99.9 {:.0} µs", l.p999_us);
            }
            if let Some(b) = p.baseline {
                y += 8.0;
                let len = bar_w * b.records_per_sec / max;
                let _ = writeln!(
                    body,
                    r#"<rect x="{label_w}" y="{}" width="{len:.1}" height="6" fill="none" stroke="black" stroke-width="1"/>"#,
                    y - 6.0
                );
                let _ = write!(text, ", {} baseline", p.ratio().map_or("n/a".into(), |r| format!("{r:.2}x")));
            }
            let _ = writeln!(
                body,
                r#"<text x="{:.1}" y="{}" font-size="11">{}</text>"#,
                label_w + bar_w + 10.0,
                y - 5.0,
                escape(&text)
            );
        }
        y += 30.0;
    }
    let legend = if baseline.is_some() {
        "Bars: throughput (whisker: slowest to fastest run); outlined bar under it: the baseline's; blue: this project."
    } else {
        "Bars: throughput (whisker: slowest to fastest run); blue: this project. Text: rate and p99.9 latency of the unit."
    };
    format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y}" font-family="sans-serif">
<rect width="100%" height="100%" fill="white"/>
{body}<text x="10" y="{}" font-size="11" fill="dimgray">{legend}</text>
</svg>
"#,
        y - 10.0
    )
}

/// Cores, CPU model, memory, kernel, and the file system holding `dir`.
pub fn machine(dir: &Path) -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| s.lines().next().and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok()))
        .map_or(0, |kib| kib / 1024 / 1024);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string();
    format!("{cores} x {cpu}, {mem_gib} GiB RAM, Linux {kernel}, bench directory on {}", fs_type(dir))
}

fn fs_type(path: &Path) -> String {
    let abs = std::fs::canonicalize(path).unwrap_or_default();
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() > 2 && abs.starts_with(f[1])).then(|| (f[1].len(), format!("{} ({})", f[2], f[0])))
        })
        .max()
        .map(|(_, s)| s)
        .unwrap_or_else(|| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(workload: &str, system: &str, config: &str, rate: f64) -> Row {
        Row {
            workload: workload.into(),
            title: String::new(),
            system: system.into(),
            config: config.into(),
            ours: system == "ours",
            records_per_sec: rate,
            min_records_per_sec: None,
            max_records_per_sec: None,
            mb_per_sec: 0.0,
            latency: Some(Latency { p50_us: 1.0, p99_us: rate / 100.0, p999_us: 3.0, max_us: 4.0 }),
            detail: serde_json::Value::Null,
        }
    }

    fn doc(runs: Vec<Row>) -> Doc {
        Doc { format: FORMAT.into(), machine: "m".into(), unix_time: 0, runs }
    }

    #[test]
    fn rows_pair_by_system_then_by_the_one_row_of_a_workload() {
        let this = doc(vec![
            row("a", "ours", "", 200.0),
            row("a", "peer", "", 50.0),
            row("sync", "ours", "64 MiB segments", 30.0),
            row("c", "ours", "", 10.0),
        ]);
        let base = doc(vec![
            row("a", "peer", "", 100.0),
            row("a", "ours", "", 100.0),
            row("sync", "ours", "1 GiB segments", 60.0),
        ]);
        let pairs = pair(&this, &base);
        let ratios: Vec<Option<f64>> = pairs.iter().map(Pair::ratio).collect();
        assert_eq!(ratios, [Some(2.0), Some(0.5), Some(0.5), None]);
        let table = ratio_table(&this, &base);
        assert!(table.contains("| a | ours | 200 | 100 | 2.00x | 2.0 | 1.0 |"), "{table}");
        assert!(table.contains("ours (64 MiB segments) vs ours (1 GiB segments)"), "{table}");
        assert!(table.contains("| c | ours | 10 | n/a | n/a |"), "{table}");
    }

    #[test]
    fn two_rows_of_a_workload_left_over_do_not_pair_by_guess() {
        let this = doc(vec![row("a", "x", "", 1.0), row("a", "y", "", 1.0)]);
        let base = doc(vec![row("a", "z", "", 1.0), row("a", "w", "", 1.0)]);
        assert!(pair(&this, &base).iter().all(|p| p.baseline.is_none()));
    }

    #[test]
    fn documents_round_trip_and_other_formats_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.json");
        let d = doc(vec![row("a", "ours", "", 5.0)]);
        std::fs::write(&path, serde_json::to_vec(&d).unwrap()).unwrap();
        let back = Doc::read(&path).unwrap();
        assert_eq!(back.runs[0].records_per_sec, 5.0);
        assert_eq!(back.runs[0].latency, d.runs[0].latency);
        std::fs::write(&path, br#"{"format": "other/9", "machine": "m", "runs": []}"#).unwrap();
        assert!(matches!(Doc::read(&path), Err(DocError::Format(f)) if f == "other/9"));
        std::fs::write(&path, b"[1, 2]").unwrap();
        assert!(matches!(Doc::read(&path), Err(DocError::Parse(_))));
    }

    #[test]
    fn the_plot_draws_every_row_and_the_baseline() {
        let this = doc(vec![row("a", "ours", "", 200.0), row("a", "peer", "", 50.0)]);
        let base = doc(vec![row("a", "ours", "", 100.0)]);
        let alone = svg(&this, None);
        assert_eq!(alone.matches("<rect x=").count(), 2, "{alone}");
        let with = svg(&this, Some(&base));
        assert_eq!(with.matches("<rect x=").count(), 3, "{with}");
        assert!(with.contains("2.00x baseline"), "{with}");
        assert!(with.contains("steelblue") && with.contains("silver"));
    }
}
