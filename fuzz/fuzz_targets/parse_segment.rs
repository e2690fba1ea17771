//! The recovery parser over arbitrary segment bytes: no panic, and every record it
//! accepts checks out (the oracle is here, not in the parser).
#![no_main]

use commitlog::format::{parse, Parsed, HEADER_SIZE};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let start = u64::from_le_bytes(data[..8].try_into().unwrap());
    let bytes = &data[8..];
    let mut pos = 0usize;
    while pos < bytes.len() {
        let offset = start.wrapping_add(pos as u64);
        match parse(&bytes[pos..], offset, true) {
            Parsed::Record { total, .. } => {
                assert!(total >= HEADER_SIZE && pos + total <= bytes.len());
                assert_eq!(&bytes[pos + 12..pos + 20], &offset.to_le_bytes());
                pos += total;
            }
            Parsed::Blank | Parsed::End | Parsed::Invalid(_) => break,
        }
    }
    // The read-only scanner over the same bytes agrees and does not panic.
    let scan = commitlog::inspect::scan_segment(bytes, start, 0, |_, _, _| {});
    assert!(scan.end_offset >= start);
});
