//! A simulated Envoy worker for the flight machine's tests: a fake clock, mock providers with
//! the e2e mock's faults (failing status, Retry-After, stall, dropped connection, cut stream,
//! slow tokens), Envoy's router and call-outs, the health store and routing state. Each
//! request goes the filter's way: decide, start the machine, feed it events in time order and
//! apply its effects as the proxy-wasm adapter does.

use super::*;
use crate::core::decision::decide;
use crate::core::endpoint::Endpoint;
use crate::core::headers::Headers;
use crate::core::health::record::HealthRecord;
use crate::core::health::store::{self, MemoryStore};
use crate::core::health::view::HealthView;
use crate::core::routing::{LocalState, RoutingState};
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

/// How a mock provider answers (the e2e mock provider's knobs).
#[derive(Debug, Clone, Default)]
pub struct Behaviour {
    pub fail_status: Option<u16>,
    pub retry_after: Option<&'static str>,
    pub stall_ms: u64,
    /// Drops the connection before answering.
    pub drop_before_response: bool,
    /// Cuts a streamed answer after half its tokens.
    pub cut_mid_stream: bool,
    pub error_body_on_200: bool,
    pub ttft_ms: u64,
    pub token_delay_ms: u64,
    /// Output tokens (the mock's default is 3 here).
    pub tokens: Option<u64>,
    /// A non-streamed answer's headers go at once, its body (in two parts) when it is done.
    pub headers_first: bool,
}

/// A request a provider received.
#[derive(Debug, Clone)]
pub struct Received {
    /// Through the router (the first attempt) or a call-out.
    pub routed: bool,
    pub body: serde_json::Value,
}

#[derive(Debug, Default)]
struct Provider {
    behaviour: Behaviour,
    received: Vec<Received>,
}

/// What the client got.
#[derive(Debug, Clone, Default)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The stream was cut before its end.
    pub cut: bool,
    /// The client gave up waiting.
    pub timed_out: bool,
    pub elapsed_ms: u64,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn resolved(&self) -> &str {
        self.header("x-switchboard-resolved-model").unwrap_or("")
    }

    pub fn attempts(&self) -> &str {
        self.header("x-switchboard-attempts").unwrap_or("1")
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_default()
    }
}

/// One event of the request in flight.
#[derive(Debug)]
enum Ev {
    RouterHeaders {
        status: u16,
        details: &'static str,
        headers: Vec<(String, String)>,
    },
    RouterChunk {
        bytes: Vec<u8>,
        end: bool,
    },
    RouterReset,
    CallDone {
        call: CallId,
        answer: Option<CallAnswer>,
    },
    Timer {
        token: u64,
    },
}

/// Lazily read facts, as the adapter gives them.
struct Facts<'a> {
    now: u64,
    details: &'static str,
    headers: &'a [(String, String)],
    chunk: Vec<u8>,
    /// What the machine asked for, to check it asks only when needed.
    asked: Vec<&'static str>,
}

impl AnswerFacts for Facts<'_> {
    fn now_ms(&mut self) -> u64 {
        self.asked.push("now");
        self.now
    }
    fn code_details(&mut self) -> Option<String> {
        self.asked.push("details");
        Some(self.details.to_string())
    }
    fn headers(&mut self) -> Headers {
        self.asked.push("headers");
        Headers::from_pairs(self.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }
    fn chunk(&mut self) -> Vec<u8> {
        self.asked.push("chunk");
        std::mem::take(&mut self.chunk)
    }
    fn ends_with_headers(&mut self) -> bool {
        self.asked.push("ends");
        false
    }
}

/// The simulated worker.
pub struct Sim {
    pub config: Rc<Config>,
    pub now: u64,
    store: MemoryStore,
    pub state: LocalState,
    view: HealthView,
    providers: HashMap<String, Provider>,
    /// Clusters with nothing listening (the router gets a connection failure).
    refused: Vec<String>,
    rng: fastrand::Rng,
    /// Every attempt made, with its kind, across requests.
    pub attempts: Vec<(String, AttemptKind)>,
    /// Host facts the machine read, across requests.
    pub asked: Vec<&'static str>,
}

/// The request in flight.
struct Flight {
    machine: Machine,
    events: BTreeMap<(u64, u64), Ev>,
    next: u64,
    /// The router's answer head, as the filter edits it before it goes on.
    head: Option<(u16, Vec<(String, String)>)>,
    answer: Option<Answer>,
    done: bool,
    /// The router's body Envoy buffered while the filter held the answer.
    held: Vec<u8>,
}

impl Flight {
    fn at(&mut self, when: u64, ev: Ev) {
        self.next += 1;
        self.events.insert((when, self.next), ev);
    }
}

impl Sim {
    pub fn new(config_json: &str) -> Sim {
        Sim {
            config: Rc::new(Config::parse(config_json.as_bytes()).unwrap()),
            now: 1_000_000,
            store: MemoryStore::default(),
            state: LocalState::default(),
            view: HealthView::default(),
            providers: HashMap::new(),
            refused: Vec::new(),
            rng: fastrand::Rng::with_seed(7),
            attempts: Vec::new(),
            asked: Vec::new(),
        }
    }

    /// A provider behind `cluster`.
    pub fn provider(&mut self, cluster: &str, behaviour: Behaviour) {
        let p = self.providers.entry(cluster.to_string()).or_default();
        p.behaviour = behaviour;
    }

    /// A cluster Envoy knows but where nothing listens.
    pub fn refused(&mut self, cluster: &str) {
        self.refused.push(cluster.to_string());
    }

    pub fn configure(&mut self, cluster: &str, f: impl FnOnce(&mut Behaviour)) {
        f(&mut self.providers.get_mut(cluster).unwrap().behaviour);
    }

    pub fn received(&self, cluster: &str) -> &[Received] {
        self.providers
            .get(cluster)
            .map_or(&[], |p| p.received.as_slice())
    }

    pub fn clear(&mut self, cluster: &str) {
        self.providers.get_mut(cluster).unwrap().received.clear();
    }

    pub fn sleep(&mut self, ms: u64) {
        self.now += ms;
    }

    pub fn record_of(&self, name: &str) -> HealthRecord {
        store::load(&self.store, &store::key(name))
    }

    /// A chat completion to `vm`.
    pub fn chat(&mut self, model: &str, stream: bool) -> Answer {
        let body = serde_json::json!({"model": model, "stream": stream,
            "messages": [{"role": "user", "content": "hello"}]});
        self.send(Endpoint::ChatCompletions, &body.to_string(), None)
    }

    /// Sends one request; the client gives up after `client_timeout_ms` if set.
    pub fn send(
        &mut self,
        endpoint: Endpoint,
        body: &str,
        client_timeout_ms: Option<u64>,
    ) -> Answer {
        let start = self.now;
        let path = endpoint.display_path();
        let headers = Headers::from_pairs([
            (":method", "POST"),
            (":path", path),
            (":authority", "gateway"),
            ("content-type", "application/json"),
        ]);
        let body = body.as_bytes().to_vec();
        // The health view, re-read as the adapters' is.
        let (_, health) = self.view.read(&self.config, self.now, &self.store);
        let config = Rc::clone(&self.config);
        let decided = decide(
            &config,
            endpoint,
            &body,
            &headers,
            &health,
            &self.state,
            &mut self.rng,
        );
        let decision = match decided {
            Ok(d) => d,
            Err(e) => {
                return Answer {
                    status: e.status,
                    body: e.body.into_bytes(),
                    ..Answer::default()
                }
            }
        };
        let routed_body = decision.outbound.body(&body).unwrap().into_owned();
        let cluster = decision.outbound.cluster.to_string();
        let (flight_start, replay) = decision.into_flight(endpoint, headers, body);
        let mut fx = Effects::new();
        let machine = Machine::start(&config, flight_start, replay, self.now, &mut fx);
        let mut flight = Flight {
            machine,
            events: BTreeMap::new(),
            next: 0,
            head: None,
            answer: None,
            done: false,
            held: Vec::new(),
        };
        self.route(&mut flight, &cluster, &routed_body);
        self.apply(&config, &mut flight, fx);
        let deadline = client_timeout_ms.map(|t| start + t);
        self.run(&config, &mut flight, deadline);
        let mut answer = flight.answer.unwrap_or(Answer {
            timed_out: true,
            ..Answer::default()
        });
        answer.elapsed_ms = self.now - start;
        answer
    }

    fn run(&mut self, config: &Config, flight: &mut Flight, deadline: Option<u64>) {
        while !flight.done {
            let Some(((when, _), ev)) = flight.events.pop_first() else {
                break;
            };
            if deadline.is_some_and(|d| when > d) {
                self.now = deadline.unwrap_or(when);
                break; // the client left: the stream is destroyed, late events go nowhere
            }
            self.now = self.now.max(when);
            self.event(config, flight, ev);
        }
        flight.machine.on_destroyed();
    }

    fn event(&mut self, config: &Config, flight: &mut Flight, ev: Ev) {
        let mut fx = Effects::new();
        match ev {
            Ev::RouterHeaders {
                status,
                details,
                headers,
            } => {
                flight.head = Some((status, headers.clone()));
                let mut facts = self.facts(details, &headers, Vec::new());
                let flow = flight
                    .machine
                    .on_answer_headers(config, status, &mut facts, &mut fx);
                self.asked.append(&mut facts.asked);
                self.apply(config, flight, fx);
                if flow == Flow::Continue && flight.answer.is_none() {
                    let (status, headers) = flight.head.take().unwrap();
                    flight.answer = Some(Answer {
                        status,
                        headers,
                        ..Answer::default()
                    });
                }
            }
            Ev::RouterChunk { bytes, end } => self.router_chunk(config, flight, bytes, end),
            Ev::RouterReset => {
                if let Some(a) = flight.answer.as_mut() {
                    a.cut = true;
                    flight.done = true;
                }
            }
            Ev::CallDone { call, answer } => {
                flight
                    .machine
                    .on_call_answer(config, call, answer, self.now, &mut fx);
                self.apply(config, flight, fx);
            }
            Ev::Timer { token } => {
                flight.machine.on_timer(config, token, self.now, &mut fx);
                self.apply(config, flight, fx);
            }
        }
    }

    /// A chunk of the router's answer: as Envoy does, the body buffered while the filter held
    /// the answer comes with it, and goes on with it once the filter lets it through.
    fn router_chunk(&mut self, config: &Config, flight: &mut Flight, bytes: Vec<u8>, end: bool) {
        let mut chunk = std::mem::take(&mut flight.held);
        chunk.extend_from_slice(&bytes);
        let mut fx = Effects::new();
        let mut facts = self.facts("", &[], chunk.clone());
        let flow = flight
            .machine
            .on_answer_body(config, end, &mut facts, &mut fx);
        self.asked.append(&mut facts.asked);
        for e in fx.take() {
            match e {
                Effect::ReplaceBody { len, with } => {
                    assert_eq!(len, chunk.len());
                    chunk = with;
                }
                other => self.apply_one(config, flight, other),
            }
        }
        if flow == Flow::Hold {
            flight.held = chunk;
            return;
        }
        if flight.done {
            return;
        }
        if flight.answer.is_none() {
            // Its headers were held with the body: they go on now.
            if let Some((status, headers)) = flight.head.take() {
                flight.answer = Some(Answer {
                    status,
                    headers,
                    ..Answer::default()
                });
            }
        }
        if let Some(a) = flight.answer.as_mut() {
            a.body.extend_from_slice(&chunk);
            flight.done = end;
        }
    }

    fn facts<'a>(
        &self,
        details: &'static str,
        headers: &'a [(String, String)],
        chunk: Vec<u8>,
    ) -> Facts<'a> {
        Facts {
            now: self.now,
            details,
            headers,
            chunk,
            asked: Vec::new(),
        }
    }

    fn apply<'c>(&mut self, config: &'c Config, flight: &mut Flight, mut fx: Effects<'c>) {
        while !fx.is_empty() {
            let mut next = Effects::new();
            for e in fx.take() {
                if let Effect::Attempt(a) = e {
                    self.attempt(config, flight, a, &mut next);
                } else {
                    self.apply_one(config, flight, e);
                }
            }
            fx = next;
        }
    }

    fn apply_one(&mut self, config: &Config, flight: &mut Flight, e: Effect<'_>) {
        match e {
            Effect::Attempt(_) => unreachable!("applied by apply"),
            Effect::ArmTimer { due_ms, token } => flight.at(due_ms, Ev::Timer { token }),
            Effect::Record { .. } | Effect::Samples { .. } => {
                apply_health(&mut self.view, &self.store, config, &e, || self.now);
            }
            Effect::Pin {
                virtual_model,
                session,
                window,
                target,
            } => self.state.pin(virtual_model, session, window, target),
            Effect::Deliver(d) => {
                let (_, headers) = flight.head.as_mut().expect("delivered without a head");
                if d.drop_content_length {
                    headers.retain(|(k, _)| k != "content-length");
                }
                for (k, v) in d.headers.pairs() {
                    headers.retain(|(n, _)| n != k);
                    headers.push((k.to_string(), v.to_string()));
                }
            }
            Effect::Reply(r) => {
                let headers = owned(&r.headers());
                flight.answer = Some(Answer {
                    status: r.ending.status,
                    headers,
                    body: r.body.clone(),
                    ..Answer::default()
                });
                flight.done = true;
            }
            Effect::Fail(f) => {
                let headers = owned(&f.headers());
                flight.answer = Some(Answer {
                    status: f.error.status,
                    headers,
                    body: f.error.body.clone().into_bytes(),
                    ..Answer::default()
                });
                flight.done = true;
            }
            Effect::ReplaceBody { .. } => unreachable!("only while a chunk is in hand"),
        }
    }

    /// Dispatches an attempt's call-out as Envoy would.
    fn attempt<'c>(
        &mut self,
        config: &'c Config,
        flight: &mut Flight,
        a: Attempt<'c>,
        next: &mut Effects<'c>,
    ) {
        let name = config.model(a.target).unwrap().name.clone();
        self.attempts.push((name, a.kind));
        let Some(call) = a.call else {
            assert_eq!(a.kind, AttemptKind::First);
            return;
        };
        let request = flight
            .machine
            .call_request(&call, &config.header_names)
            .unwrap();
        let cluster = request.cluster.to_string();
        let known = self.providers.contains_key(&cluster) || self.refused.contains(&cluster);
        if !known {
            // Envoy refuses a call to a cluster it does not know.
            return flight
                .machine
                .on_dispatch_refused(config, call.id, self.now, next);
        }
        let body = request.body.to_vec();
        let timeout = request.timeout_ms;
        let (delay, answer) = self.call_answer(&cluster, &body);
        let (when, answer) = if delay > timeout {
            (self.now + timeout, None)
        } else {
            (self.now + delay, answer)
        };
        flight.at(
            when,
            Ev::CallDone {
                call: call.id,
                answer,
            },
        );
        flight.machine.on_dispatched(call.id, next);
    }

    /// The router's attempt at `cluster`: its answer, as events.
    fn route(&mut self, flight: &mut Flight, cluster: &str, body: &[u8]) {
        let now = self.now;
        if self.refused.iter().any(|c| c == cluster) {
            let details = "upstream_reset_before_response_started{remote_connection_failure}";
            return envoy_503(flight, now, details);
        }
        let p = self.providers.get_mut(cluster).expect("no provider");
        let request: serde_json::Value = serde_json::from_slice(body).unwrap();
        p.received.push(Received {
            routed: true,
            body: request.clone(),
        });
        let b = p.behaviour.clone();
        let at = now + b.stall_ms;
        if b.drop_before_response {
            let details = "upstream_reset_before_response_started{connection_termination}";
            return envoy_503(flight, at, details);
        }
        if let Some(status) = b.fail_status {
            let (headers, body) = failure(cluster, &b);
            flight.at(
                at,
                Ev::RouterHeaders {
                    status,
                    details: "via_upstream",
                    headers,
                },
            );
            return flight.at(
                at,
                Ev::RouterChunk {
                    bytes: body,
                    end: true,
                },
            );
        }
        let model = request["model"].as_str().unwrap_or("").to_string();
        let tokens = b.tokens.unwrap_or(3);
        if request["stream"] == true {
            let headers = vec![("content-type".into(), "text/event-stream".into())];
            flight.at(
                at,
                Ev::RouterHeaders {
                    status: 200,
                    details: "via_upstream",
                    headers,
                },
            );
            let mut t = at + b.ttft_ms;
            for i in 1..=tokens {
                if b.cut_mid_stream && i > tokens / 2 {
                    return flight.at(t, Ev::RouterReset);
                }
                let chunk = sse_chunk(&model, i);
                flight.at(
                    t,
                    Ev::RouterChunk {
                        bytes: chunk.into_bytes(),
                        end: false,
                    },
                );
                t += b.token_delay_ms;
            }
            return flight.at(
                t,
                Ev::RouterChunk {
                    bytes: b"data: [DONE]\n\n".to_vec(),
                    end: true,
                },
            );
        }
        let done = at + b.ttft_ms + b.token_delay_ms * tokens;
        let body = completion(cluster, &model, tokens, &b);
        let headers = vec![
            ("content-type".into(), "application/json".into()),
            ("content-length".into(), body.len().to_string()),
            ("x-mock-provider".into(), cluster.to_string()),
        ];
        let status = 200;
        let details = "via_upstream";
        let head = if b.headers_first { at } else { done };
        flight.at(
            head,
            Ev::RouterHeaders {
                status,
                details,
                headers,
            },
        );
        if !b.headers_first {
            return flight.at(
                done,
                Ev::RouterChunk {
                    bytes: body,
                    end: true,
                },
            );
        }
        let (first, rest) = body.split_at(body.len() / 2);
        let bytes = first.to_vec();
        flight.at(done, Ev::RouterChunk { bytes, end: false });
        let bytes = rest.to_vec();
        flight.at(done, Ev::RouterChunk { bytes, end: true });
    }

    /// A call-out to `cluster`: (when it ends, its answer or `None`).
    fn call_answer(&mut self, cluster: &str, body: &[u8]) -> (u64, Option<CallAnswer>) {
        if self.refused.iter().any(|c| c == cluster) {
            return (0, None);
        }
        let p = self.providers.get_mut(cluster).expect("no provider");
        let request: serde_json::Value = serde_json::from_slice(body).unwrap();
        p.received.push(Received {
            routed: false,
            body: request.clone(),
        });
        let b = p.behaviour.clone();
        if b.drop_before_response {
            return (b.stall_ms, None);
        }
        let (status, headers, body, delay) = match b.fail_status {
            Some(status) => {
                let (h, body) = failure(cluster, &b);
                (status, h, body, b.stall_ms)
            }
            None => {
                let model = request["model"].as_str().unwrap_or("");
                let tokens = b.tokens.unwrap_or(3);
                let delay = b.stall_ms + b.ttft_ms + b.token_delay_ms * tokens;
                // A call-out gets a streamed answer whole.
                let (kind, body) = if request["stream"] == true {
                    let chunks: String = (1..=tokens).map(|i| sse_chunk(model, i)).collect();
                    (
                        "text/event-stream",
                        format!("{chunks}data: [DONE]\n\n").into_bytes(),
                    )
                } else {
                    ("application/json", completion(cluster, model, tokens, &b))
                };
                (200, vec![("content-type".into(), kind.into())], body, delay)
            }
        };
        let mut pairs = vec![(":status".to_string(), status.to_string())];
        pairs.extend(headers);
        pairs.push(("x-mock-provider".into(), cluster.to_string()));
        let headers = Headers::from_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        (delay, Some(CallAnswer { headers, body }))
    }
}

fn owned(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Envoy's own 503 for an attempt that got no answer, with its code details.
fn envoy_503(flight: &mut Flight, at: u64, details: &'static str) {
    let headers = vec![("content-type".into(), "text/plain".into())];
    flight.at(
        at,
        Ev::RouterHeaders {
            status: 503,
            details,
            headers,
        },
    );
    let body = b"upstream connect error or disconnect/reset before headers".to_vec();
    flight.at(
        at,
        Ev::RouterChunk {
            bytes: body,
            end: true,
        },
    );
}

/// The mock's injected failure: its headers and body.
fn failure(cluster: &str, b: &Behaviour) -> (Vec<(String, String)>, Vec<u8>) {
    let mut headers = vec![
        ("content-type".to_string(), "application/json".to_string()),
        ("x-mock-provider".to_string(), cluster.to_string()),
    ];
    if let Some(v) = b.retry_after {
        headers.push(("retry-after".into(), v.into()));
    }
    let body = serde_json::json!({"error": {"message": format!("injected failure from {cluster}"),
        "type": "server_error", "code": "injected"}});
    (headers, body.to_string().into_bytes())
}

/// One streamed token of the mock's chat completion.
fn sse_chunk(model: &str, i: u64) -> String {
    let chunk = serde_json::json!({"model": model,
        "choices": [{"index": 0, "delta": {"content": format!("tok{i} ")}}]});
    format!("data: {chunk}\n\n")
}

/// The mock's chat completion (or its error body on a 200).
fn completion(cluster: &str, model: &str, tokens: u64, b: &Behaviour) -> Vec<u8> {
    let body = if b.error_body_on_200 {
        serde_json::json!({"error": {"message": format!("injected error body from {cluster}")}})
    } else {
        let text: String = (1..=tokens).map(|i| format!("tok{i} ")).collect();
        serde_json::json!({"id": "chatcmpl-1", "object": "chat.completion", "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
            "usage": {"completion_tokens": tokens}})
    };
    body.to_string().into_bytes()
}
