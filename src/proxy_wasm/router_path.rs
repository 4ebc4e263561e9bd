//! The router path's two extra passes of this `.wasm` ([`crate::core::router_path`]), and the
//! memory they share with the Switchboard filter.
//!
//! Envoy gives every Wasm filter with the same `vm_config` one VM per worker thread, and a
//! request's upstream attempts run on its worker: the Switchboard filter leaves the request's
//! attempts in this thread's [`FLIGHTS`] under its `x-request-id`, and each attempt's upstream
//! pass finds them there.

use super::host;
use crate::core::plugin::Plugin;
use crate::core::router_path::{AttemptWatch, BodyVerdict, RouterFlight, ROUTE_HEADER};
use hashbrown::HashMap;
use proxy_wasm::traits::{Context, HttpContext};
use proxy_wasm::types::Action;
use std::cell::RefCell;
use std::rc::{Rc, Weak};

/// The request's key, which Envoy's connection manager sets (`generate_request_id`) and sends
/// upstream with every attempt.
const REQUEST_ID: &str = "x-request-id";

type Shared = (Rc<Plugin>, Weak<RefCell<RouterFlight>>);

thread_local! {
    /// Router-path requests in flight on this worker. The Switchboard filter's flight holds
    /// the attempts; an entry whose flight is gone is swept on a later insert.
    static FLIGHTS: RefCell<HashMap<Box<str>, Shared>> = RefCell::new(HashMap::new());
}

/// Shares `flight` under the request's id (one is set if Envoy did not); false if another
/// request in flight on this worker has that id.
pub fn share(plugin: Rc<Plugin>, flight: &Rc<RefCell<RouterFlight>>, context_id: u32) -> bool {
    let key = match host::request_header(REQUEST_ID) {
        Some(id) if !id.is_empty() => id,
        _ => {
            let id = format!("switchboard-{context_id:x}-{:x}", host::now_ns());
            host::set_request_header(REQUEST_ID, &id);
            id
        }
    };
    FLIGHTS.with(|f| {
        let mut map = f.borrow_mut();
        // A client can send its own x-request-id, and Envoy keeps one from inside the mesh: a
        // request whose id is taken by one in flight takes the call-out path, so that no
        // attempt is ever built from another request.
        if map
            .get(key.as_str())
            .is_some_and(|(_, w)| w.strong_count() > 0)
        {
            return false;
        }
        if map.len() >= 64 && map.len().is_power_of_two() {
            map.retain(|_, (_, w)| w.strong_count() > 0);
        }
        map.insert(key.into(), (plugin, Rc::downgrade(flight)));
        true
    })
}

fn find(key: &str) -> Option<(Rc<Plugin>, Rc<RefCell<RouterFlight>>)> {
    FLIGHTS.with(|f| {
        let map = f.borrow();
        let (plugin, weak) = map.get(key)?;
        Some((Rc::clone(plugin), weak.upgrade()?))
    })
}

/// The upstream pass: one per attempt, in a router-path cluster.
#[derive(Default)]
pub struct Upstream {
    flight: Option<(Rc<Plugin>, Rc<RefCell<RouterFlight>>)>,
    number: u32,
    /// The attempt's body, to put in place of the one the router replays.
    body: Option<Vec<u8>>,
    /// A good streamed answer held until its first content event.
    watch: Option<AttemptWatch>,
}

impl Context for Upstream {}

impl HttpContext for Upstream {
    fn on_http_request_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        let Some((plugin, flight)) = host::request_header(REQUEST_ID).and_then(|k| find(&k)) else {
            // Not a router-path request of this VM (a cluster copied by hand, or a VM that is
            // not the Switchboard filter's): it leaves as it came.
            log::warn!("router path: an attempt with no Switchboard request in this VM");
            return Action::Continue;
        };
        self.number = host::request_header("x-envoy-attempt-count")
            .and_then(|n| n.parse().ok())
            .unwrap_or(1);
        let begun = flight
            .borrow_mut()
            .begin(&plugin.config, self.number, host::now_ms());
        let Some(request) = begun else {
            log::warn!("router path: attempt {} is not in the plan", self.number);
            return Action::Continue;
        };
        for name in &request.remove {
            host::remove_request_header(name);
        }
        for (name, value) in &request.set {
            host::set_request_header(name, value);
        }
        if !end_of_stream {
            self.body = request.body;
        }
        self.flight = Some((plugin, flight));
        Action::Continue
    }

    fn on_http_request_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        if self.body.is_none() {
            return Action::Continue;
        }
        if !end_of_stream {
            return Action::Pause; // the whole body is replaced once it is all here
        }
        if let Some(body) = self.body.take() {
            host::replace_request_body(body_size, &body);
        }
        Action::Continue
    }

    fn on_http_response_headers(&mut self, _num_headers: usize, end_of_stream: bool) -> Action {
        let Some((plugin, flight)) = &self.flight else {
            return Action::Continue;
        };
        let status = host::response_status();
        self.watch =
            flight
                .borrow_mut()
                .on_status(&plugin.config, self.number, status, end_of_stream);
        if self.watch.is_some() {
            Action::Pause
        } else {
            Action::Continue
        }
    }

    fn on_http_response_body(&mut self, body_size: usize, end_of_stream: bool) -> Action {
        let (Some((plugin, flight)), Some(watch)) = (&self.flight, self.watch.as_mut()) else {
            return Action::Continue;
        };
        let body = host::response_body(body_size);
        let verdict = flight
            .borrow_mut()
            .on_body(&plugin.config, watch, &body, end_of_stream);
        match verdict {
            BodyVerdict::Hold => return Action::Pause,
            BodyVerdict::Pass => {}
            // The router has not seen this answer: as a 503 it retries it.
            BodyVerdict::Fail => host::set_response_header(":status", "503"),
        }
        self.watch = None;
        Action::Continue
    }
}

/// The pass after `header_to_metadata`: on a router-path request it writes the route header
/// again, and Envoy's Wasm filter clears the route cache on a request header write, so the
/// route (and the first attempt's cluster) is picked with the attempts' metadata in place.
pub struct Reroute;

impl Context for Reroute {}

impl HttpContext for Reroute {
    fn on_http_request_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        if let Some(value) = host::request_header(ROUTE_HEADER) {
            host::set_request_header(ROUTE_HEADER, &value);
        }
        Action::Continue
    }
}
