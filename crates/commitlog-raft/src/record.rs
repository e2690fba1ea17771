//! What a record of the shared commit log holds: a fixed header naming its
//! raft group and index, then (for entries) the entry, JSON-encoded.
//!
//! ```text
//! byte 0       kind: 1 entry, 2 truncation, 3 rewritten entry, 4 vote,
//!              5 purged id, 6 group created, 7 group dropped
//! bytes 1..9   the group's id, u64 little-endian
//! bytes 9..17  the raft index, u64 little-endian (for a truncation: the first
//!              index it removes; for a creation or a drop: the group's key in
//!              the queue index; 0 for a vote or a purged id)
//! bytes 17..   the entry (kinds 1 and 3), the vote or the purged log id (kinds
//!              4 and 5), as JSON; nothing (kinds 2, 6 and 7)
//! ```
//!
//! The header lets recovery route every record to its group without decoding
//! an entry.

use crate::error::RaftStoreError;

/// Bytes of the header.
pub(crate) const HEADER: usize = 17;

/// What a record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// An appended entry: at recovery it replaces whatever the group holds from
    /// its index on (a new leader's entry after a conflict), as raft does.
    Entry,
    /// A truncation: the group's entries from the index on are gone.
    Truncation,
    /// An entry copied forward by the purge so that an old segment can go
    /// (the group's index moves to the copy; nothing after it is removed).
    Rewritten,
    /// The group's vote.
    Vote,
    /// The group's last purged log id.
    Purged,
    /// The group was created, with the key in the header's index field.
    Created,
    /// The group was dropped (the key of the one dropped in the index field).
    Dropped,
}

impl Kind {
    fn byte(self) -> u8 {
        match self {
            Kind::Entry => 1,
            Kind::Truncation => 2,
            Kind::Rewritten => 3,
            Kind::Vote => 4,
            Kind::Purged => 5,
            Kind::Created => 6,
            Kind::Dropped => 7,
        }
    }

    fn from_byte(byte: u8) -> Option<Kind> {
        match byte {
            1 => Some(Kind::Entry),
            2 => Some(Kind::Truncation),
            3 => Some(Kind::Rewritten),
            4 => Some(Kind::Vote),
            5 => Some(Kind::Purged),
            6 => Some(Kind::Created),
            7 => Some(Kind::Dropped),
            _ => None,
        }
    }
}

/// A record's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) kind: Kind,
    pub(crate) group: u64,
    pub(crate) index: u64,
}

impl Header {
    /// The header's bytes followed by `payload`.
    pub(crate) fn encode(self, payload: &[u8]) -> Vec<u8> {
        let mut body = Vec::with_capacity(HEADER + payload.len());
        body.push(self.kind.byte());
        body.extend_from_slice(&self.group.to_le_bytes());
        body.extend_from_slice(&self.index.to_le_bytes());
        body.extend_from_slice(payload);
        body
    }

    /// The header of a record's body and what follows it, or `None` if the body
    /// does not start with one (too short, or an unknown kind: a log written by
    /// something else, such as a single-group store of an earlier version whose
    /// records are bare JSON).
    pub(crate) fn decode(body: &[u8]) -> Option<(Header, &[u8])> {
        let kind = Kind::from_byte(*body.first()?)?;
        let group = u64::from_le_bytes(body.get(1..9)?.try_into().ok()?);
        let index = u64::from_le_bytes(body.get(9..HEADER)?.try_into().ok()?);
        Some((Header { kind, group, index }, &body[HEADER..]))
    }

    /// As [`decode`](Self::decode), a body without a header being a
    /// [`RaftStoreError::Format`] error naming the record at `offset`.
    pub(crate) fn parse(body: &[u8], offset: u64) -> Result<(Header, &[u8]), RaftStoreError> {
        Header::decode(body).ok_or(RaftStoreError::Format { offset, reason: "no group record header" })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_reads_back_and_foreign_bodies_are_not_taken_for_one() {
        for kind in
            [Kind::Entry, Kind::Truncation, Kind::Rewritten, Kind::Vote, Kind::Purged, Kind::Created, Kind::Dropped]
        {
            let header = Header { kind, group: u64::MAX - 3, index: 1 << 40 };
            let body = header.encode(b"{\"x\":1}");
            assert_eq!(Header::decode(&body), Some((header, &b"{\"x\":1}"[..])));
            assert_eq!(Header::decode(&body[..HEADER - 1]), None, "short");
        }
        assert_eq!(Header::decode(b"{\"log_id\":{}}"), None, "a bare JSON entry");
        assert_eq!(Header::decode(b""), None);
    }
}
