//! The Responses API's conversation state: a conversation lives on the provider account that
//! created it (TrueFoundry virtual models, "Responses API conversations"; Zuplo model load
//! balancing, "Stored responses").

pub mod continuation;
pub mod id;
pub mod rewrite;
pub mod stored;

use id::{Keys, Turn, MARK_PREFIX};
use rewrite::Minter;

/// Mints the ids and marks of one answer: a turn of a virtual model served by a target.
pub struct TurnMinter<'a> {
    /// The config's keys.
    pub keys: &'a Keys,
    /// The turn.
    pub turn: Turn<'a>,
}

impl Minter for TurnMinter<'_> {
    fn response_id(&mut self, provider_id: &str, out: &mut Vec<u8>) {
        let minted = id::mint(self.keys, &self.turn, provider_id);
        out.extend_from_slice(minted.as_bytes());
    }

    fn encrypted_content(&mut self, value: &str, out: &mut Vec<u8>) {
        // A value already marked (echoed back by the provider) keeps its one mark.
        if value.starts_with(MARK_PREFIX) {
            out.extend_from_slice(value.as_bytes());
        } else {
            let marked = id::mark(self.keys, &self.turn, value);
            out.extend_from_slice(marked.as_bytes());
        }
    }
}

/// The whole of an answer that arrived at once (a call-out's), rewritten.
pub fn rewrite_whole(body: &[u8], minter: &mut TurnMinter<'_>) -> Vec<u8> {
    let mut rewriter = rewrite::AnswerRewriter::new();
    let mut out = Vec::with_capacity(body.len() + 128);
    rewriter.feed(body, minter, &mut out);
    rewriter.finish(&mut out);
    out
}
