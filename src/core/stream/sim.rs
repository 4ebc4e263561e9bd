//! A simulated Envoy worker for the stream machine's tests: a fake clock, mock providers with
//! the e2e mock's faults (failing status, Retry-After, stall, dropped connection, cut stream,
//! slow tokens), Envoy's router and call-outs, the health store and routing state. It is one
//! more [`Host`] of the core's stream machine: each request goes through the same
//! orchestration as in Envoy (headers, body, decision, the router's attempt written into the
//! request, its answer's events in time order), only the host is simulated.

use super::{Host, Stream, Verdict};
use crate::core::access_log::Value;
use crate::core::config::{Config, ModelId};
use crate::core::endpoint::Endpoint;
use crate::core::flight::{
    apply_health, Attempt, AttemptKind, CallAnswer, CallRequest, Chunk, Effect,
};
use crate::core::headers::Headers;
use crate::core::health::record::HealthRecord;
use crate::core::health::store::{self, MemoryStore};
use crate::core::health::view::HealthView;
use crate::core::metrics::definitions;
use crate::core::plugin::Plugin;
use crate::core::report::Write;
use crate::core::request::Edits;
use crate::core::routing::pins::PinClock;
use crate::core::routing::HealthInput;
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
        call: u64,
        answer: Option<CallAnswer>,
    },
    Timer {
        token: u64,
    },
}

/// The simulated worker.
pub struct Sim {
    pub plugin: Rc<Plugin>,
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
    /// Microsecond clock reads so far: each read is 1 µs after the one before (within the
    /// same simulated millisecond), so Switchboard's own steps take time.
    us_reads: u64,
    /// Every metric name of the config, by id, and every metric write, across requests.
    metric_names: Vec<String>,
    pub metrics: Vec<(String, Write)>,
}

/// The request in flight, as Envoy holds it.
#[derive(Default)]
struct Flight {
    events: BTreeMap<(u64, u64), Ev>,
    next: u64,
    /// The request as the filter wrote it for the router: its headers and body.
    request: Vec<(String, String)>,
    body: Vec<u8>,
    /// The router's answer head, as the filter edits it before it goes on.
    head: Option<(u16, Vec<(String, String)>)>,
    answer: Option<Answer>,
    done: bool,
    /// The router's body Envoy buffered while the filter held the answer.
    held: Vec<u8>,
    /// The answer's bytes in hand during a body event (held ones and the chunk).
    in_hand: Vec<u8>,
    /// The facts of the event in hand: Envoy's code details, and whether the headers end it.
    details: &'static str,
    /// Ids of the call-outs made.
    calls: u64,
}

impl Flight {
    fn at(&mut self, when: u64, ev: Ev) {
        self.next += 1;
        self.events.insert((when, self.next), ev);
    }

    /// The request header the filter set, as the router reads it.
    fn request_header(&self, name: &str) -> Option<&str> {
        self.request
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

impl Sim {
    pub fn new(config_json: &str) -> Sim {
        let config = Config::parse(config_json.as_bytes()).unwrap();
        let metric_names: Vec<String> = definitions(&config).into_iter().map(|d| d.1).collect();
        let ids = (0..metric_names.len() as u32).collect();
        Sim {
            plugin: Rc::new(Plugin::new(config).with_metric_ids(ids)),
            us_reads: 0,
            metric_names,
            metrics: Vec::new(),
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
        let headers = Headers::from_pairs([
            (":method", "POST"),
            (":path", endpoint.display_path()),
            (":authority", "gateway"),
            ("content-type", "application/json"),
        ]);
        let plugin = Rc::clone(&self.plugin);
        let mut stream = Stream::new(fastrand::Rng::with_seed(self.rng.u64(..)));
        let mut flight = Flight {
            body: body.as_bytes().to_vec(),
            ..Flight::default()
        };
        let mut host = SimHost {
            sim: self,
            flight: &mut flight,
        };
        stream.on_request_headers(&plugin, &mut host, headers, false);
        let sent = stream.on_request_body(&plugin, &mut host, body.len(), true);
        if sent == Verdict::Continue && !flight.done {
            let cluster = flight
                .request_header(&plugin.config.header_names.cluster)
                .unwrap_or_default()
                .to_string();
            let routed = std::mem::take(&mut flight.body);
            self.route(&mut flight, &cluster, &routed);
        }
        let deadline = client_timeout_ms.map(|t| start + t);
        self.run(&plugin, &mut stream, &mut flight, deadline);
        let mut answer = flight.answer.unwrap_or(Answer {
            timed_out: true,
            ..Answer::default()
        });
        answer.elapsed_ms = self.now - start;
        answer
    }

    fn run(
        &mut self,
        plugin: &Plugin,
        stream: &mut Stream,
        flight: &mut Flight,
        deadline: Option<u64>,
    ) {
        while !flight.done {
            let Some(((when, _), ev)) = flight.events.pop_first() else {
                break;
            };
            if deadline.is_some_and(|d| when > d) {
                self.now = deadline.unwrap_or(when);
                break; // the client left: the stream is destroyed, late events go nowhere
            }
            self.now = self.now.max(when);
            self.event(plugin, stream, flight, ev);
        }
        stream.on_destroyed();
    }

    fn event(&mut self, plugin: &Plugin, stream: &mut Stream, flight: &mut Flight, ev: Ev) {
        match ev {
            Ev::RouterHeaders {
                status,
                details,
                headers,
            } => {
                flight.head = Some((status, headers));
                flight.details = details;
                let mut host = SimHost { sim: self, flight };
                let verdict = stream.on_response_headers(plugin, &mut host, false);
                if verdict == Verdict::Continue && flight.answer.is_none() {
                    let (status, headers) = flight.head.take().unwrap();
                    flight.answer = Some(Answer {
                        status,
                        headers,
                        ..Answer::default()
                    });
                }
            }
            Ev::RouterChunk { bytes, end } => self.router_chunk(plugin, stream, flight, bytes, end),
            Ev::RouterReset => {
                if let Some(a) = flight.answer.as_mut() {
                    a.cut = true;
                    flight.done = true;
                }
            }
            Ev::CallDone { call, answer } => {
                let mut host = SimHost { sim: self, flight };
                stream.on_call_done(plugin, &mut host, call, answer);
            }
            Ev::Timer { token } => {
                let mut host = SimHost { sim: self, flight };
                stream.on_timer(plugin, &mut host, token);
            }
        }
    }

    /// A chunk of the router's answer: as Envoy does, the body buffered while the filter held
    /// the answer comes with it, and goes on with it once the filter lets it through.
    fn router_chunk(
        &mut self,
        plugin: &Plugin,
        stream: &mut Stream,
        flight: &mut Flight,
        bytes: Vec<u8>,
        end: bool,
    ) {
        let mut chunk = std::mem::take(&mut flight.held);
        chunk.extend_from_slice(&bytes);
        flight.in_hand = chunk;
        let mut host = SimHost { sim: self, flight };
        let verdict = stream.on_response_body(plugin, &mut host, end);
        let chunk = std::mem::take(&mut flight.in_hand);
        if verdict == Verdict::Stop {
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

/// The simulated host of one request's stream, for one event.
struct SimHost<'a> {
    sim: &'a mut Sim,
    flight: &'a mut Flight,
}

impl Host for SimHost<'_> {
    fn now_ms(&mut self) -> u64 {
        self.sim.asked.push("now");
        self.sim.now
    }

    fn now_us(&mut self) -> u64 {
        self.sim.us_reads += 1;
        self.sim.now * 1000 + self.sim.us_reads
    }

    fn request_body(&mut self) -> Vec<u8> {
        self.flight.body.clone()
    }

    fn with_routing<T>(
        &mut self,
        plugin: &Plugin,
        now_ms: u64,
        decide: impl FnOnce(&HealthInput<'_>, &dyn RoutingState) -> T,
    ) -> T {
        // The health view, re-read as the adapters' is.
        let (_, health) = self.sim.view.read(&plugin.config, now_ms, &self.sim.store);
        decide(&health, &self.sim.state)
    }

    fn remove_request_header(&mut self, name: &str) {
        self.flight.request.retain(|(k, _)| k != name);
    }

    fn set_request_header(&mut self, name: &str, value: &str) {
        self.remove_request_header(name);
        self.flight
            .request
            .push((name.to_string(), value.to_string()));
    }

    fn edit_request_body(&mut self, body: &[u8], edits: &Edits) -> bool {
        match edits.apply(body) {
            Some(edited) => {
                self.flight.body = edited;
                true
            }
            None => false,
        }
    }

    fn clear_route_cache(&mut self) {}

    fn resume_request(&mut self) {}

    fn reply(&mut self, status: u16, headers: &[(&str, &str)], body: &[u8]) {
        self.flight.answer = Some(Answer {
            status,
            headers: owned(headers),
            body: body.to_vec(),
            ..Answer::default()
        });
        self.flight.done = true;
    }

    /// Envoy refuses a call to a cluster it does not know; others answer after their delay,
    /// or not at all past the call's timeout.
    fn dispatch(&mut self, call: &CallRequest<'_>) -> Option<u64> {
        let cluster = call.cluster.to_string();
        let known =
            self.sim.providers.contains_key(&cluster) || self.sim.refused.contains(&cluster);
        if !known {
            return None;
        }
        let (delay, answer) = self.sim.call_answer(&cluster, call.body);
        let (when, answer) = if delay > call.timeout_ms {
            (self.sim.now + call.timeout_ms, None)
        } else {
            (self.sim.now + delay, answer)
        };
        self.flight.calls += 1;
        let id = self.flight.calls;
        self.flight.at(when, Ev::CallDone { call: id, answer });
        Some(id)
    }

    fn arm_timer(&mut self, due_ms: u64, token: u64) {
        self.flight.at(due_ms, Ev::Timer { token });
    }

    fn write_metric(&mut self, id: u32, write: Write) {
        let name = self.sim.metric_names.get(id as usize).cloned();
        self.sim.metrics.push((name.unwrap_or_default(), write));
    }

    fn write_field(&mut self, _key: &'static str, _value: Value<'_>) {}

    fn record_health(&mut self, config: &Config, effect: &Effect<'_>) -> Option<ModelId> {
        let now = self.sim.now;
        apply_health(&mut self.sim.view, &self.sim.store, config, effect, || now)
    }

    fn pin(
        &mut self,
        virtual_model: &str,
        session: u64,
        window: u64,
        target: &str,
        clock: PinClock,
    ) {
        self.sim
            .state
            .pin(virtual_model, session, window, target, clock);
    }

    fn on_attempt(&mut self, config: &Config, attempt: &Attempt<'_>) {
        let name = config
            .model(attempt.target)
            .map_or("?", |m| m.name.as_str());
        self.sim.attempts.push((name.to_string(), attempt.kind));
    }

    fn answer_status(&mut self) -> u16 {
        self.flight.head.as_ref().map_or(502, |(status, _)| *status)
    }

    fn answer_code_details(&mut self) -> Option<String> {
        self.sim.asked.push("details");
        Some(self.flight.details.to_string())
    }

    fn answer_headers(&mut self) -> Headers {
        self.sim.asked.push("headers");
        let headers = self
            .flight
            .head
            .as_ref()
            .map_or(&[][..], |(_, h)| h.as_slice());
        Headers::from_pairs(headers.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }

    fn answer_body(&mut self) -> Chunk {
        self.sim.asked.push("chunk");
        Chunk::new(self.flight.in_hand.clone())
    }

    fn set_response_header(&mut self, name: &str, value: &str) {
        if let Some((_, headers)) = self.flight.head.as_mut() {
            headers.retain(|(n, _)| n != name);
            headers.push((name.to_string(), value.to_string()));
        }
    }

    fn remove_response_header(&mut self, name: &str) {
        if let Some((_, headers)) = self.flight.head.as_mut() {
            headers.retain(|(n, _)| n != name);
        }
    }

    fn replace_answer_body(&mut self, with: Vec<u8>) {
        self.flight.in_hand = with;
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
