//! Who is calling (`caller_identity`): a digest of the value that tells one caller from
//! another, by default the client's credential (its `authorization` header, else its
//! `x-api-key`). Only the digest is kept, so the credential itself goes nowhere: not into a
//! minted id, a log line or a hash table.
//!
//! Which value identifies a request's caller is routing's to read
//! (`routing::Request::caller`); this file only holds the digest, so that
//! response ids, routing state and the adapters can name a caller without importing routing.

use sha2::{Digest, Sha256};

/// A caller: the first 16 bytes of SHA-256 of its identifying value (an absent value is the
/// empty one, so callers without one are one caller).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Caller(pub [u8; 16]);

impl Caller {
    /// The caller a value identifies.
    pub fn of(value: &[u8]) -> Caller {
        let digest = Sha256::digest(value);
        let mut out = [0; 16];
        for (o, d) in out.iter_mut().zip(digest) {
            *o = d;
        }
        Caller(out)
    }
}
