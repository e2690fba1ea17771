//! The store's small text files (`config/topics`, `config/consumer_offsets`): a
//! header line naming the format and its version, then one record a line;
//! always replaced whole, atomically and durably. A sealed file
//! ([`render_sealed`], [`parse_sealed`]) ends with `crc32c <hex>` of every byte
//! before that line: a file cut at a line's end, or with a digit changed, is
//! damaged, not a shorter file.

use std::path::Path;

use store_io::Storage;

use crate::error::{io_err, StoreError};

/// The records of the file at `path`: its first line must be `header` (else it
/// is not a `what` file of this version), and `parse` turns every other line
/// into a record (`None`: the line is damaged, an error naming it).
pub(crate) fn parse<T>(
    path: &Path,
    bytes: Vec<u8>,
    header: &str,
    what: &str,
    mut parse: impl FnMut(&str) -> Option<T>,
) -> Result<Vec<T>, StoreError> {
    let bad = |reason: String| StoreError::BadFile { path: path.to_path_buf(), reason };
    let text = String::from_utf8(bytes).map_err(|_| bad("not UTF-8".into()))?;
    let mut lines = text.lines();
    if lines.next() != Some(header) {
        return Err(bad(format!("unknown header (not a {what} file of this version)")));
    }
    lines.enumerate().map(|(n, line)| parse(line).ok_or_else(|| bad(format!("line {}: {line:?}", n + 2)))).collect()
}

/// The records of a sealed file (see [`render_sealed`]): its last line must
/// be the CRC of every byte before it, then as [`parse`].
pub(crate) fn parse_sealed<T>(
    path: &Path,
    bytes: Vec<u8>,
    header: &str,
    what: &str,
    parse_line: impl FnMut(&str) -> Option<T>,
) -> Result<Vec<T>, StoreError> {
    let bad = |reason: &str| StoreError::BadFile { path: path.to_path_buf(), reason: reason.to_string() };
    let body_end = match bytes.strip_suffix(b"\n") {
        Some(rest) => rest.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1),
        None => return Err(bad("cut short: no checksum line at its end")),
    };
    let (body, seal) = bytes.split_at(body_end);
    let recorded = std::str::from_utf8(seal)
        .ok()
        .and_then(|line| line.trim_end().strip_prefix("crc32c "))
        .and_then(|hex| u32::from_str_radix(hex, 16).ok())
        .ok_or_else(|| bad("cut short: no checksum line at its end"))?;
    if crc32c::crc32c(body) != recorded {
        return Err(bad("checksum mismatch: damaged"));
    }
    parse(path, body.to_vec(), header, what, parse_line)
}

/// The text of a sealed file: [`render`], then the line `crc32c <hex>` of
/// every byte before it.
pub(crate) fn render_sealed(header: &str, lines: impl IntoIterator<Item = String>) -> String {
    let mut text = render(header, lines);
    let crc = crc32c::crc32c(text.as_bytes());
    text.push_str(&format!("crc32c {crc:08x}\n"));
    text
}

/// The text of a file: `header`, then `lines`.
pub(crate) fn render(header: &str, lines: impl IntoIterator<Item = String>) -> String {
    let mut text = format!("{header}\n");
    for line in lines {
        text.push_str(&line);
        text.push('\n');
    }
    text
}

/// Replaces the file at `path` with `text` (a crash leaves the old file or the
/// new one), creating its directory if needed.
pub(crate) fn write(storage: &dyn Storage, path: &Path, text: &str) -> Result<(), StoreError> {
    let dir = path.parent().unwrap_or(path);
    storage.create_dir_all(dir).map_err(io_err(dir))?;
    storage.replace_small(path, text.as_bytes()).map_err(io_err(path))
}
