//! A connection's bytes to write: answers go out at once, but for a slow stream's second part,
//! held back for a while; answers keep their order, so one queued behind a held part waits too.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// What a listener answers each request: `first` at once, then `rest` (empty but for a slow
/// stream) `hold` later.
#[derive(Clone, Copy, Debug)]
pub struct Answer {
    pub first: &'static [u8],
    pub rest: &'static [u8],
    pub hold: Duration,
}

#[derive(Debug, Default)]
pub struct Outbox {
    /// Bytes that may be written now.
    pub out: Vec<u8>,
    /// Parts of answers held back, in order, each with the time it may go.
    held: VecDeque<(Instant, &'static [u8])>,
}

impl Outbox {
    /// Queues the answer to one request. Returns when a part it held back falls due.
    pub fn answer(&mut self, answer: Answer, now: Instant) -> Option<Instant> {
        match self.held.back() {
            None => self.out.extend_from_slice(answer.first),
            Some(&(due, _)) => self.held.push_back((due, answer.first)),
        }
        if answer.rest.is_empty() {
            return None;
        }
        let due = self.held.back().map_or(now, |&(due, _)| due) + answer.hold;
        self.held.push_back((due, answer.rest));
        Some(due)
    }

    /// Moves the held parts that are due at `now` to the bytes to write.
    pub fn release(&mut self, now: Instant) {
        while let Some(&(due, part)) = self.held.front() {
            if due > now {
                break;
            }
            self.out.extend_from_slice(part);
            self.held.pop_front();
        }
    }

    /// Nothing left to write, now or later.
    pub fn is_empty(&self) -> bool {
        self.out.is_empty() && self.held.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOLD: Duration = Duration::from_secs(2);
    const SLOW: Answer = Answer {
        first: b"[head]",
        rest: b"[rest]",
        hold: HOLD,
    };

    #[test]
    fn an_answer_without_a_held_part_goes_at_once() {
        let mut o = Outbox::default();
        let fast = Answer { rest: b"", ..SLOW };
        assert_eq!(o.answer(fast, Instant::now()), None);
        assert_eq!(o.out, b"[head]");
        o.out.clear();
        assert!(o.is_empty());
    }

    #[test]
    fn a_held_part_goes_only_once_due_and_a_later_answer_waits_behind_it() {
        let mut o = Outbox::default();
        let t0 = Instant::now();
        assert_eq!(o.answer(SLOW, t0), Some(t0 + HOLD));
        // A second request answered while the first one's rest is held.
        assert_eq!(o.answer(SLOW, t0), Some(t0 + 2 * HOLD));
        assert_eq!(o.out, b"[head]");
        o.release(t0 + HOLD / 2);
        assert_eq!(o.out, b"[head]");
        o.release(t0 + HOLD);
        assert_eq!(o.out, b"[head][rest][head]");
        assert!(!o.is_empty());
        o.release(t0 + 2 * HOLD);
        assert_eq!(o.out, b"[head][rest][head][rest]");
        o.out.clear();
        assert!(o.is_empty());
    }
}
