//! Exports the log's metrics to Prometheus: installs
//! `metrics-exporter-prometheus`'s recorder (histograms with buckets, so
//! Grafana can draw quantiles across instances), serves the text format at
//! `http://ADDR/metrics` from a plain thread (no async runtime needed), and
//! keeps four producers appending with sync flush so there is something to see.
//!
//! `cargo run --release -p commitlog --example prometheus -- [--listen 127.0.0.1:9464] [--seconds 60] [--dir DIR]`
//!
//! Then `curl -s localhost:9464/metrics`, or point a Prometheus scrape job at
//! it; docs/operations.md lists the panels worth building from these series.

use std::error::Error;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use commitlog::{CommitLog, CommitLogConfig, FlushDiskType};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Seconds buckets from 10 µs to 10 s: appends take microseconds, syncs
/// milliseconds, and a stalled disk seconds.
const SECONDS_BUCKETS: &[f64] =
    &[10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 1.0, 10.0];
/// Requests answered by one group-commit sync.
const ROUND_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0];

fn main() -> Result<(), Box<dyn Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let option = |name: &str| args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned();
    let listen = option("--listen").unwrap_or_else(|| "127.0.0.1:9464".into());
    let seconds: u64 = option("--seconds").map_or(Ok(60), |s| s.parse())?;
    let tmp = tempfile::tempdir()?;
    let dir = option("--dir").map_or_else(|| tmp.path().to_path_buf(), Into::into);

    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full("commitlog_group_commit_records_per_round".into()), ROUND_BUCKETS)?
        .install_recorder()?;
    // The recorder keeps histogram samples until upkeep folds them in.
    let upkeep = handle.clone();
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_secs(5));
        upkeep.run_upkeep();
    });
    let listener = TcpListener::bind(&listen)?;
    println!("serving http://{}/metrics for {seconds} s (log in {})", listener.local_addr()?, dir.display());
    let scrapes = handle.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            // One scrape at a time is plenty for a scrape every few seconds.
            if let Err(e) = answer(stream, &scrapes) {
                eprintln!("scrape: {e}");
            }
        }
    });

    let config = CommitLogConfig::builder()
        .flush_disk_type(FlushDiskType::SyncFlush)
        // The cleaning service publishes the disk and segment gauges on each run.
        .clean_resource_interval_ms(1_000)
        .build()?;
    let log = CommitLog::open(&dir, config)?;
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let producers: Vec<_> = (0..4)
        .map(|_| {
            let log = log.clone();
            std::thread::spawn(move || -> Result<u64, commitlog::Error> {
                let (body, mut n) = (vec![7u8; 1024], 0);
                while Instant::now() < deadline {
                    log.append(&body)?.durability.wait()?;
                    n += 1;
                }
                Ok(n)
            })
        })
        .collect();
    let mut records = 0;
    for p in producers {
        records += p.join().expect("producer")?;
    }
    log.shutdown()?;
    println!("{records} records appended; final scrape:\n{}", handle.render());
    Ok(())
}

/// Answers one HTTP request: the metrics for `GET /metrics`, 404 otherwise.
fn answer(stream: TcpStream, handle: &PrometheusHandle) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(&stream);
    let mut request = String::new();
    reader.by_ref().take(8 << 10).read_line(&mut request)?;
    // Skip the headers (bounded: a scraper sends a few hundred bytes).
    let mut line = String::new();
    while reader.by_ref().take(8 << 10).read_line(&mut line)? > 2 {
        line.clear();
    }
    let (status, body) = if request.starts_with("GET /metrics ") {
        ("200 OK", handle.render())
    } else {
        ("404 Not Found", "try /metrics\n".to_string())
    };
    write!(
        &stream,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}
