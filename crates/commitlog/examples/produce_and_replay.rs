//! Opens a commit log, appends records from several threads with sync flush
//! (group commit), shuts down, reopens and replays them.
//!
//! `cargo run -p commitlog --example produce_and_replay [DIR]`

use std::error::Error;

use commitlog::{CommitLog, CommitLogConfig, FlushDiskType};

fn main() -> Result<(), Box<dyn Error>> {
    let tmp = tempfile::tempdir()?;
    let dir = std::env::args().nth(1).map(std::path::PathBuf::from).unwrap_or_else(|| tmp.path().to_path_buf());
    let config = CommitLogConfig::builder()
        .mapped_file_size_commit_log(4 << 20)
        .max_message_size(64 << 10)
        .flush_disk_type(FlushDiskType::SyncFlush)
        .build()?;

    let log = CommitLog::open(&dir, config.clone())?;
    println!("opened {} (recovery: {:?})", dir.display(), log.recovery_report());
    let producers: Vec<_> = (0..4)
        .map(|p| {
            let log = log.clone();
            std::thread::spawn(move || -> Result<(), commitlog::Error> {
                for i in 0..1000 {
                    let put = log.append(format!("producer {p} record {i}").as_bytes())?;
                    // Returns once the record is durable; many producers share one sync.
                    put.durability.wait()?;
                }
                Ok(())
            })
        })
        .collect();
    for p in producers {
        p.join().expect("producer panicked")?;
    }
    let stats = log.flush_stats().group_commit;
    println!(
        "4000 records acknowledged with {} flushes ({:.1} records per flush)",
        stats.flushes,
        stats.acknowledged as f64 / stats.flushes.max(1) as f64
    );
    log.shutdown()?;

    let log = CommitLog::open(&dir, config)?;
    let mut count = 0;
    for record in log.iter_from(log.min_offset()) {
        let record = record?;
        if count < 3 {
            println!("{}\t{}", record.offset, String::from_utf8_lossy(&record.body));
        }
        count += 1;
    }
    println!("replayed {count} records; clean shutdown: {}", log.recovery_report().clean_shutdown);
    log.shutdown()?;
    Ok(())
}
