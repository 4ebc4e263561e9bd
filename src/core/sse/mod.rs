//! TEMP STUB (replaced by the helper's module)
use crate::core::endpoint::Endpoint;
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    ChatCompletions,
    Responses,
    Messages,
}
impl Dialect {
    pub fn of(e: Endpoint) -> Option<Dialect> {
        match e {
            Endpoint::ChatCompletions => Some(Dialect::ChatCompletions),
            Endpoint::Responses => Some(Dialect::Responses),
            Endpoint::Messages => Some(Dialect::Messages),
            _ => None,
        }
    }
}
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProviderError {
    pub message: String,
    pub kind: String,
    pub code: Option<String>,
}
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Other,
    Content,
    Final,
    Error(ProviderError),
    Malformed,
}
#[derive(Debug, Clone)]
pub struct Watcher {
    d: Dialect,
}
impl Watcher {
    pub fn new(d: Dialect) -> Watcher {
        Watcher { d }
    }
    pub fn next(&mut self, _chunk: &[u8], _from: usize) -> Option<(Event, usize)> {
        let _ = self.d;
        None
    }
    pub fn finish(&mut self) -> Option<Event> {
        None
    }
    pub fn events(&self) -> u32 {
        0
    }
    pub fn bytes(&self) -> u64 {
        0
    }
    pub fn saw_content(&self) -> bool {
        false
    }
    pub fn saw_final(&self) -> bool {
        true
    }
}
pub fn terminal_event(_d: Dialect, _m: &str, _c: &str) -> Vec<u8> {
    Vec::new()
}
