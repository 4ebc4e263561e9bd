//! What a Responses API provider remembers: stored responses with their
//! input items, every stored item by id (for `item_reference` and replayed
//! reasoning items), and conversations. In memory and bounded: beyond the
//! limit the oldest response (or conversation) is forgotten first.

use serde_json::Value;
use std::collections::{HashMap, VecDeque};
use std::time::Instant;

/// How many responses (and, separately, conversations) are kept.
pub const MAX_STORED: usize = 10_000;

/// One stored response.
#[derive(Clone, Debug, PartialEq)]
pub struct Stored {
    /// The response object as `GET /v1/responses/{id}` returns it now.
    pub response: Value,
    /// The request's input items, each with an `id`.
    pub input: Vec<Value>,
    /// A background response still being "generated".
    pub pending: Option<Pending>,
}

/// The finished form of a background response and when it is due.
#[derive(Clone, Debug, PartialEq)]
pub struct Pending {
    pub due: Instant,
    pub done: Value,
}

/// The outcome of `POST /v1/responses/{id}/cancel`.
#[derive(Clone, Debug, PartialEq)]
pub enum Cancel {
    Unknown,
    NotBackground,
    /// The response as it is now: cancelled, or already finished (cancelling
    /// a finished response changes nothing).
    Done(Value),
}

/// An indexed item and how many stored responses hold it.
#[derive(Debug)]
struct Indexed {
    item: Value,
    holders: usize,
}

#[derive(Debug)]
pub struct Store {
    responses: HashMap<String, Stored>,
    order: VecDeque<String>,
    items: HashMap<String, Indexed>,
    conversations: HashMap<String, Value>,
    conversation_order: VecDeque<String>,
    limit: usize,
}

impl Default for Store {
    fn default() -> Self {
        Self::with_limit(MAX_STORED)
    }
}

impl Store {
    pub fn with_limit(limit: usize) -> Self {
        Self {
            responses: HashMap::new(),
            order: VecDeque::new(),
            items: HashMap::new(),
            conversations: HashMap::new(),
            conversation_order: VecDeque::new(),
            limit: limit.max(1),
        }
    }

    pub fn len(&self) -> usize {
        self.responses.len()
    }

    /// Keeps `stored` under its `response.id`, dropping the oldest beyond the limit.
    pub fn insert(&mut self, stored: Stored) {
        let Some(id) = stored.response.get("id").and_then(Value::as_str) else {
            return;
        };
        let id = id.to_owned();
        self.remove(&id);
        for item in held_items(&stored) {
            index(&mut self.items, item);
        }
        self.responses.insert(id.clone(), stored);
        self.order.push_back(id);
        while self.responses.len() > self.limit {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            self.forget(&oldest);
        }
    }

    /// The stored response, a due background response finished first.
    pub fn get(&mut self, id: &str, now: Instant) -> Option<&Stored> {
        self.settle(id, now);
        self.responses.get(id)
    }

    /// Forgets the response and the items only it held.
    pub fn remove(&mut self, id: &str) -> Option<Stored> {
        let stored = self.forget(id)?;
        self.order.retain(|kept| kept != id);
        Some(stored)
    }

    /// Cancels a background response that is still pending.
    pub fn cancel(&mut self, id: &str, now: Instant) -> Cancel {
        self.settle(id, now);
        let Some(stored) = self.responses.get_mut(id) else {
            return Cancel::Unknown;
        };
        if stored.response.get("background") != Some(&Value::Bool(true)) {
            return Cancel::NotBackground;
        }
        if stored.pending.take().is_some() {
            stored.response["status"] = Value::from("cancelled");
        }
        Cancel::Done(stored.response.clone())
    }

    /// An item of any stored response (input or output), by id.
    pub fn item(&self, id: &str) -> Option<&Value> {
        self.items.get(id).map(|indexed| &indexed.item)
    }

    /// Keeps a conversation object under its `id`.
    pub fn add_conversation(&mut self, conversation: Value) {
        let Some(id) = conversation.get("id").and_then(Value::as_str) else {
            return;
        };
        let id = id.to_owned();
        if self
            .conversations
            .insert(id.clone(), conversation)
            .is_none()
        {
            self.conversation_order.push_back(id);
        }
        while self.conversations.len() > self.limit {
            let Some(oldest) = self.conversation_order.pop_front() else {
                break;
            };
            self.conversations.remove(&oldest);
        }
    }

    pub fn conversation(&self, id: &str) -> Option<&Value> {
        self.conversations.get(id)
    }

    pub fn remove_conversation(&mut self, id: &str) -> Option<Value> {
        let conversation = self.conversations.remove(id)?;
        self.conversation_order.retain(|kept| kept != id);
        Some(conversation)
    }

    /// Removes from the map and the item index (not from `order`).
    fn forget(&mut self, id: &str) -> Option<Stored> {
        let stored = self.responses.remove(id)?;
        for item in held_items(&stored) {
            unindex(&mut self.items, item);
        }
        Some(stored)
    }

    /// Finishes a background response whose time has come.
    fn settle(&mut self, id: &str, now: Instant) {
        let Some(stored) = self.responses.get_mut(id) else {
            return;
        };
        if let Some(pending) = stored.pending.take_if(|p| p.due <= now) {
            stored.response = pending.done;
            for item in output_items(&stored.response) {
                index(&mut self.items, item);
            }
        }
    }
}

fn output_items(response: &Value) -> impl Iterator<Item = &Value> {
    response
        .get("output")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// The items a stored response makes referable: its input, and its output
/// once it exists.
fn held_items(stored: &Stored) -> impl Iterator<Item = &Value> {
    stored.input.iter().chain(output_items(&stored.response))
}

fn item_id(item: &Value) -> Option<&str> {
    item.get("id").and_then(Value::as_str)
}

fn index(items: &mut HashMap<String, Indexed>, item: &Value) {
    let Some(id) = item_id(item) else {
        return;
    };
    items
        .entry(id.to_owned())
        .and_modify(|indexed| indexed.holders += 1)
        .or_insert_with(|| Indexed {
            item: item.clone(),
            holders: 1,
        });
}

fn unindex(items: &mut HashMap<String, Indexed>, item: &Value) {
    let Some(id) = item_id(item) else {
        return;
    };
    if let Some(indexed) = items.get_mut(id) {
        indexed.holders -= 1;
        if indexed.holders == 0 {
            items.remove(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    fn stored(id: &str, input: &[&str], output: &[&str]) -> Stored {
        let items = |ids: &[&str]| ids.iter().map(|i| json!({"id": i})).collect::<Vec<_>>();
        Stored {
            response: json!({"id": id, "background": false, "status": "completed", "output": items(output)}),
            input: items(input),
            pending: None,
        }
    }

    #[test]
    fn bounded_oldest_first_with_items() {
        let now = Instant::now();
        let mut s = Store::with_limit(2);
        s.insert(stored("r1", &["m1"], &["o1"]));
        s.insert(stored("r2", &["m2"], &["o2"]));
        assert!(s.item("m1").is_some() && s.item("o2").is_some());
        s.insert(stored("r3", &["m3"], &[]));
        assert_eq!(s.len(), 2);
        assert!(s.get("r1", now).is_none(), "the oldest is dropped");
        assert!(s.item("m1").is_none() && s.item("o1").is_none());
        assert!(s.get("r2", now).is_some() && s.get("r3", now).is_some());

        // A deleted response leaves no stale slot in the order.
        assert!(s.remove("r2").is_some());
        assert!(s.remove("r2").is_none());
        s.insert(stored("r4", &[], &[]));
        assert!(
            s.get("r3", now).is_some(),
            "r3 is still among the newest two"
        );
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn shared_items_live_while_any_holder_does() {
        let mut s = Store::default();
        s.insert(stored("r1", &["m1"], &["o1"]));
        // r2 replays r1's output item (an item_reference resolved to it).
        s.insert(stored("r2", &["o1"], &[]));
        s.remove("r1");
        assert!(s.item("o1").is_some(), "r2 still holds it");
        assert!(s.item("m1").is_none());
        s.remove("r2");
        assert!(s.item("o1").is_none());
    }

    #[test]
    fn background_settles_and_cancels() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(5);
        let pending = |id: &str| Stored {
            response: json!({"id": id, "background": true, "status": "in_progress", "output": []}),
            input: vec![],
            pending: Some(Pending {
                due: t0 + Duration::from_secs(1),
                done: json!({"id": id, "background": true, "status": "completed", "output": [{"id": format!("o-{id}")}]}),
            }),
        };
        let mut s = Store::default();
        s.insert(pending("bg1"));
        s.insert(pending("bg2"));
        assert_eq!(s.get("bg1", t0).unwrap().response["status"], "in_progress");
        assert!(s.item("o-bg1").is_none());
        assert_eq!(s.get("bg1", later).unwrap().response["status"], "completed");
        assert!(s.item("o-bg1").is_some());

        let Cancel::Done(cancelled) = s.cancel("bg2", t0) else {
            panic!("expected a cancel");
        };
        assert_eq!(cancelled["status"], "cancelled");
        assert_eq!(s.get("bg2", later).unwrap().response["status"], "cancelled");
        let Cancel::Done(finished) = s.cancel("bg1", later) else {
            panic!("expected the finished response");
        };
        assert_eq!(finished["status"], "completed");

        s.insert(stored("fg", &[], &[]));
        assert_eq!(s.cancel("fg", t0), Cancel::NotBackground);
        assert_eq!(s.cancel("nope", t0), Cancel::Unknown);
    }

    #[test]
    fn conversations_bounded() {
        let mut s = Store::with_limit(1);
        s.add_conversation(json!({"id": "c1"}));
        s.add_conversation(json!({"id": "c2"}));
        assert!(s.conversation("c1").is_none());
        assert!(s.conversation("c2").is_some());
        assert!(s.remove_conversation("c2").is_some());
        assert!(s.conversation("c2").is_none());
    }
}
