//! Strict mode: refuse what the real hosted provider refuses (wrong TLS
//! server name, wrong `Host`, a path it does not serve, a missing or foreign
//! credential), answering in that provider's own error shape, so tests
//! through Envoy fail the way production would.
//!
//! `check` is a pure function of the expectation and what arrived. The
//! checks of a request's body (Messages, Chat Completions) are `validate`'s.

use hyper::header::{HeaderMap, AUTHORIZATION};
use hyper::StatusCode;
use serde_json::{json, Value};

/// Which hosted service the mock stands in for, with its own settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    OpenAi,
    /// Azure OpenAI: the one deployment served and the one `api-version` accepted.
    Azure {
        deployment: String,
        api_version: String,
    },
    Anthropic,
    /// A self-hosted OpenAI-compatible server (vLLM, Ollama, ...) under `base_path`.
    OpenAiCompatible {
        base_path: String,
    },
}

impl Kind {
    /// The `--strict` names.
    pub const NAMES: &'static str = "openai, azure, anthropic or openai-compatible";
}

/// What a strict provider expects of every API request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expect {
    pub kind: Kind,
    /// The name the provider is reached by, with a `:port` if clients must send one.
    pub host_name: String,
    pub api_key: String,
}

/// The headers naming the account a key belongs to, which the hosted services put on every
/// answer: OpenAI's `openai-organization` and `openai-project`, Anthropic's
/// `anthropic-organization-id` (Azure's carry neither). Their values name this provider, so a
/// test can tell whose account leaked.
pub fn account_headers(expect: &Expect, name: &str, headers: &mut hyper::HeaderMap) {
    let pairs: &[(&'static str, String)] = match expect.kind {
        Kind::OpenAi => &[
            ("openai-organization", format!("org-{name}")),
            ("openai-project", format!("proj_{name}")),
        ],
        Kind::Anthropic => &[("anthropic-organization-id", format!("org-{name}"))],
        _ => &[],
    };
    for (header, value) in pairs {
        if let Ok(value) = hyper::header::HeaderValue::from_str(value) {
            headers.insert(*header, value);
        }
    }
}

/// One request as the checks see it.
#[derive(Clone, Copy, Debug)]
pub struct Seen<'a> {
    pub tls: bool,
    pub sni: Option<&'a str>,
    /// The HTTP/2 `:authority` or the HTTP/1.1 `Host` header.
    pub authority: Option<&'a str>,
    pub method: &'a str,
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub headers: &'a HeaderMap,
}

/// A refused request: the status and the provider-shaped JSON body.
#[derive(Clone, Debug, PartialEq)]
pub struct Refusal {
    pub status: StatusCode,
    pub body: Value,
}

/// Operations of the OpenAI API a strict OpenAI accepts under `/v1`.
const OPENAI_OPS: [&str; 8] = [
    "/chat/completions",
    "/completions",
    "/embeddings",
    "/responses",
    "/conversations",
    "/moderations",
    "/models",
    "/audio/transcriptions",
];
/// Operations on one stored object: `(before the id, after it, methods)`.
type IdOp = (&'static str, &'static str, &'static [&'static str]);
const RESPONSE_ID_OPS: [IdOp; 3] = [
    ("/responses/", "", &["GET", "DELETE"]),
    ("/responses/", "/input_items", &["GET"]),
    ("/responses/", "/cancel", &["POST"]),
];
const CONVERSATION_ID_OPS: [IdOp; 1] = [("/conversations/", "", &["GET", "DELETE"])];
/// Operations under `/openai/deployments/{deployment}` (Azure's classic API).
const AZURE_DEPLOYMENT_OPS: [&str; 3] = ["/chat/completions", "/completions", "/embeddings"];
/// Operations under `/openai/v1` (Azure's v1 API, no `api-version` needed).
const AZURE_V1_OPS: [&str; 5] = [
    "/chat/completions",
    "/completions",
    "/embeddings",
    "/responses",
    "/models",
];
const ANTHROPIC_OPS: [&str; 2] = ["/messages", "/messages/count_tokens"];
const COMPATIBLE_OPS: [&str; 3] = ["/chat/completions", "/completions", "/embeddings"];

/// `rest` if it is one of `ops`, or one of `id_ops` with a one-segment id
/// and `method` among its methods.
fn operation<'a>(rest: &'a str, method: &str, ops: &[&str], id_ops: &[&[IdOp]]) -> Option<&'a str> {
    if ops.contains(&rest) {
        return Some(rest);
    }
    id_ops
        .iter()
        .copied()
        .flatten()
        .find_map(|(head, tail, methods)| {
            let id = rest.strip_prefix(head)?.strip_suffix(tail)?;
            let ok = !id.is_empty() && !id.contains('/') && methods.contains(&method);
            ok.then_some(rest)
        })
}

/// Runs the checks in the order a real service applies them (TLS, virtual
/// host, route, credential, required headers). On success returns the API
/// operation path (e.g. `/chat/completions`) the normal handlers dispatch on.
pub fn check<'a>(expect: &Expect, seen: &Seen<'a>) -> Result<&'a str, Refusal> {
    let style = Style::of(&expect.kind);
    if seen.tls
        && !seen
            .sni
            .is_some_and(|sni| sni.eq_ignore_ascii_case(host_part(&expect.host_name)))
    {
        return Err(style.misdirected(&format!(
            "TLS server name {:?} is not served here",
            seen.sni.unwrap_or("")
        )));
    }
    if !seen
        .authority
        .is_some_and(|a| a.eq_ignore_ascii_case(&expect.host_name))
    {
        return Err(style.misdirected(&format!(
            "host {:?} is not served here",
            seen.authority.unwrap_or("")
        )));
    }
    let op = route(&expect.kind, seen)?;
    credential(expect, style, seen.headers)?;
    if style == Style::Anthropic && !seen.headers.contains_key("anthropic-version") {
        return Err(style.refusal(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "anthropic-version: header is required",
        ));
    }
    Ok(op)
}

/// The host of `host[:port]` (or `[v6]:port`), as TLS names it.
fn host_part(host_name: &str) -> &str {
    if let Some(rest) = host_name.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    host_name.split(':').next().unwrap_or(host_name)
}

/// The operation path if the provider serves `seen.path`, else its 404.
fn route<'a>(kind: &Kind, seen: &Seen<'a>) -> Result<&'a str, Refusal> {
    let path = seen.path;
    let within = |prefix: &str, ops: &[&str], id_ops: &[&[IdOp]]| {
        operation(path.strip_prefix(prefix)?, seen.method, ops, id_ops)
    };
    let found = match kind {
        Kind::OpenAi => within(
            "/v1",
            &OPENAI_OPS,
            &[&RESPONSE_ID_OPS, &CONVERSATION_ID_OPS],
        ),
        Kind::Anthropic => within("/v1", &ANTHROPIC_OPS, &[]),
        Kind::OpenAiCompatible { base_path } => within(base_path, &COMPATIBLE_OPS, &[]),
        Kind::Azure {
            deployment,
            api_version,
        } => {
            if let Some(op) = within("/openai/v1", &AZURE_V1_OPS, &[&RESPONSE_ID_OPS]) {
                Some(op)
            } else {
                let rest = path.strip_prefix("/openai/deployments/");
                let Some((name, rest)) = rest.and_then(|r| r.find('/').map(|i| r.split_at(i)))
                else {
                    return Err(azure_not_found());
                };
                let Some(op) = AZURE_DEPLOYMENT_OPS.iter().find(|op| **op == rest).copied() else {
                    return Err(azure_not_found());
                };
                if name != deployment {
                    return Err(Style::Azure.refusal(
                        StatusCode::NOT_FOUND,
                        "DeploymentNotFound",
                        "The API deployment for this resource does not exist.",
                    ));
                }
                if query_param(seen.query, "api-version") != Some(api_version.as_str()) {
                    return Err(azure_not_found());
                }
                Some(op)
            }
        }
    };
    found.ok_or_else(|| match kind {
        Kind::Azure { .. } => azure_not_found(),
        Kind::Anthropic => Style::Anthropic.refusal(
            StatusCode::NOT_FOUND,
            "not_found_error",
            &format!("Not Found: {} {path}", seen.method),
        ),
        // OpenAI's own answer to an unknown URL (its code is null).
        _ => json_refusal(
            StatusCode::NOT_FOUND,
            json!({"error": {
                "message": format!("Invalid URL ({} {path})", seen.method),
                "type": "invalid_request_error", "param": null, "code": null,
            }}),
        ),
    })
}

fn azure_not_found() -> Refusal {
    Style::Azure.refusal(StatusCode::NOT_FOUND, "404", "Resource not found")
}

/// The first value of `name` in a query string (values here need no decoding).
pub fn query_param<'a>(query: Option<&'a str>, name: &str) -> Option<&'a str> {
    query?
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// The provider's credential check; the key itself never appears in a message.
fn credential(expect: &Expect, style: Style, headers: &HeaderMap) -> Result<(), Refusal> {
    let header = |name: &str| headers.get(name).map(|v| v.as_bytes());
    let key = expect.api_key.as_bytes();
    let ok = match &expect.kind {
        Kind::OpenAi | Kind::OpenAiCompatible { .. } => header(AUTHORIZATION.as_str())
            .and_then(|v| strip_bearer(v))
            .is_some_and(|token| token == key),
        // A Bearer token means Entra ID to Azure and an OAuth token to
        // Anthropic: a foreign OpenAI key there is refused even beside a good key.
        Kind::Azure { .. } => {
            !headers.contains_key(AUTHORIZATION) && header("api-key") == Some(key)
        }
        Kind::Anthropic => !headers.contains_key(AUTHORIZATION) && header("x-api-key") == Some(key),
    };
    if ok {
        return Ok(());
    }
    Err(match style {
        Style::OpenAi => style.refusal(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            "Incorrect API key provided",
        ),
        Style::Azure => style.refusal(
            StatusCode::UNAUTHORIZED,
            "401",
            "Access denied due to invalid subscription key or wrong API endpoint.",
        ),
        Style::Anthropic => style.refusal(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "invalid x-api-key",
        ),
    })
}

/// The token of `Bearer TOKEN` (scheme case-insensitive, as RFC 9110 says).
fn strip_bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, token) = value.split_at_checked(7)?;
    scheme.eq_ignore_ascii_case(b"bearer ").then_some(token)
}

/// The error document family a provider answers with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Style {
    OpenAi,
    Azure,
    Anthropic,
}

impl Style {
    fn of(kind: &Kind) -> Self {
        match kind {
            Kind::OpenAi | Kind::OpenAiCompatible { .. } => Self::OpenAi,
            Kind::Azure { .. } => Self::Azure,
            Kind::Anthropic => Self::Anthropic,
        }
    }

    fn misdirected(self, message: &str) -> Refusal {
        let kind = match self {
            Self::Anthropic | Self::OpenAi => "invalid_request_error",
            Self::Azure => "421",
        };
        self.refusal(StatusCode::MISDIRECTED_REQUEST, kind, message)
    }

    /// `kind` is the OpenAI `type` (its `code` derived from the status),
    /// Azure's `code`, or Anthropic's error `type`.
    fn refusal(self, status: StatusCode, kind: &str, message: &str) -> Refusal {
        let body = match self {
            Self::OpenAi => {
                let code = match status {
                    StatusCode::UNAUTHORIZED => "invalid_api_key",
                    StatusCode::MISDIRECTED_REQUEST => "misdirected_request",
                    _ => "invalid_request",
                };
                json!({"error": {"message": message, "type": kind, "param": null, "code": code}})
            }
            Self::Azure => json!({"error": {"code": kind, "message": message}}),
            Self::Anthropic => {
                json!({"type": "error", "error": {"type": kind, "message": message}})
            }
        };
        json_refusal(status, body)
    }
}

fn json_refusal(status: StatusCode, body: Value) -> Refusal {
    Refusal { status, body }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderValue;

    struct Req {
        method: &'static str,
        tls: bool,
        sni: Option<&'static str>,
        authority: Option<&'static str>,
        path: &'static str,
        query: Option<&'static str>,
        headers: HeaderMap,
    }

    impl Req {
        fn new(host: &'static str, path: &'static str, headers: &[(&'static str, &str)]) -> Self {
            let mut map = HeaderMap::new();
            for (name, value) in headers {
                map.append(*name, HeaderValue::from_str(value).unwrap());
            }
            Self {
                method: "POST",
                tls: true,
                sni: Some(host.split(':').next().unwrap()),
                authority: Some(host),
                path,
                query: None,
                headers: map,
            }
        }

        fn check(&self, expect: &Expect) -> Result<&'static str, (u16, Value)> {
            let seen = Seen {
                tls: self.tls,
                sni: self.sni,
                authority: self.authority,
                method: self.method,
                path: self.path,
                query: self.query,
                headers: &self.headers,
            };
            // The operation is the path's tail: hand it back with the path's lifetime.
            check(expect, &seen)
                .map(|op| &self.path[self.path.len() - op.len()..])
                .map_err(|r| (r.status.as_u16(), r.body))
        }
    }

    fn expect(kind: Kind, host: &str) -> Expect {
        Expect {
            kind,
            host_name: host.to_owned(),
            api_key: "sk-good".to_owned(),
        }
    }

    fn status(r: Result<&'static str, (u16, Value)>) -> u16 {
        r.map_or_else(|(s, _)| s, |_| 200)
    }

    const BEARER: (&str, &str) = ("authorization", "Bearer sk-good");

    #[test]
    fn openai_accepts_the_real_shape_only() {
        let e = expect(Kind::OpenAi, "api.openai.com");
        let ok = Req::new("api.openai.com", "/v1/chat/completions", &[BEARER]);
        assert_eq!(ok.check(&e), Ok("/chat/completions"));

        let mut r = Req::new("API.OpenAI.com", "/v1/embeddings", &[BEARER]);
        r.sni = Some("api.openai.com");
        assert_eq!(r.check(&e), Ok("/embeddings"), "host names ignore case");

        let (s, body) = Req::new("api.openai.com", "/chat/completions", &[BEARER])
            .check(&e)
            .unwrap_err();
        assert_eq!(s, 404, "the /v1 prefix is required");
        assert_eq!(body["error"]["type"], "invalid_request_error");

        let (s, body) = Req::new("api.openai.com", "/v1/chat/completions", &[])
            .check(&e)
            .unwrap_err();
        assert_eq!(s, 401);
        assert_eq!(body["error"]["code"], "invalid_api_key");
        let wrong = Req::new(
            "api.openai.com",
            "/v1/chat/completions",
            &[("authorization", "Bearer sk-other")],
        );
        assert_eq!(status(wrong.check(&e)), 401);
        let lower = Req::new(
            "api.openai.com",
            "/v1/chat/completions",
            &[("authorization", "bearer sk-good")],
        );
        assert_eq!(status(lower.check(&e)), 200);
    }

    #[test]
    fn stored_response_paths_by_method() {
        let e = expect(Kind::OpenAi, "api.openai.com");
        let at = |method, path| {
            let mut r = Req::new("api.openai.com", path, &[BEARER]);
            r.method = method;
            r.check(&e).map(str::to_owned).map_err(|(s, _)| s)
        };
        for (method, path) in [
            ("GET", "/v1/responses/resp_1"),
            ("DELETE", "/v1/responses/resp_1"),
            ("GET", "/v1/responses/resp_1/input_items"),
            ("POST", "/v1/responses/resp_1/cancel"),
            ("POST", "/v1/conversations"),
            ("GET", "/v1/conversations/conv_1"),
            ("DELETE", "/v1/conversations/conv_1"),
        ] {
            assert_eq!(
                at(method, path),
                Ok(path[3..].to_owned()),
                "{method} {path}"
            );
        }
        for (method, path) in [
            ("POST", "/v1/responses/resp_1"),
            ("DELETE", "/v1/responses/resp_1/input_items"),
            ("GET", "/v1/responses/resp_1/cancel"),
            ("GET", "/v1/responses/a/b/input_items"),
            ("GET", "/v1/responses//input_items"),
            ("GET", "/v1/responses/"),
            ("GET", "/responses/resp_1"),
        ] {
            assert_eq!(at(method, path), Err(404), "{method} {path}");
        }
        let mut r = Req::new("api.openai.com", "/v1/responses/resp_1", &[BEARER]);
        r.method = "PUT";
        let (_, body) = r.check(&e).unwrap_err();
        assert_eq!(
            body["error"]["message"],
            "Invalid URL (PUT /v1/responses/resp_1)"
        );

        let azure = azure();
        let key = ("api-key", "sk-good");
        let mut r = Req::new(
            "res.openai.azure.com",
            "/openai/v1/responses/resp_1/input_items",
            &[key],
        );
        r.method = "GET";
        assert_eq!(r.check(&azure), Ok("/responses/resp_1/input_items"));
        r.path = "/openai/v1/conversations/conv_1";
        assert_eq!(
            status(r.check(&azure)),
            404,
            "Azure here serves no conversations"
        );
        let compatible = expect(
            Kind::OpenAiCompatible {
                base_path: "/v1".to_owned(),
            },
            "llm.local",
        );
        let mut r = Req::new("llm.local", "/v1/responses/resp_1", &[BEARER]);
        r.method = "GET";
        assert_eq!(status(r.check(&compatible)), 404);
    }

    #[test]
    fn tls_name_and_host_come_first() {
        let e = expect(Kind::OpenAi, "api.openai.com");
        // Even with a bad path and no key, the misdirection is reported.
        let mut r = Req::new("api.openai.com", "/nope", &[]);
        r.sni = Some("other.example");
        assert_eq!(status(r.check(&e)), 421);
        r.sni = None;
        assert_eq!(status(r.check(&e)), 421, "TLS without SNI");
        r.tls = false;
        assert_eq!(status(r.check(&e)), 404, "plain HTTP has no SNI to check");

        let mut r = Req::new("api.openai.com", "/v1/chat/completions", &[BEARER]);
        r.authority = Some("127.0.0.1:8443");
        let (s, body) = r.check(&e).unwrap_err();
        assert_eq!(s, 421);
        assert_eq!(body["error"]["code"], "misdirected_request");
        r.authority = None;
        assert_eq!(status(r.check(&e)), 421);
        r.authority = Some("api.openai.com:443");
        assert_eq!(status(r.check(&e)), 421, "a port not in --host-name");
    }

    #[test]
    fn host_name_with_port() {
        let e = expect(
            Kind::OpenAiCompatible {
                base_path: "/v1".to_owned(),
            },
            "vllm.internal:8000",
        );
        let ok = Req::new("vllm.internal:8000", "/v1/completions", &[BEARER]);
        assert_eq!(ok.sni, Some("vllm.internal"));
        assert_eq!(ok.check(&e), Ok("/completions"));
        let mut r = Req::new("vllm.internal:8000", "/v1/completions", &[BEARER]);
        r.authority = Some("vllm.internal");
        assert_eq!(status(r.check(&e)), 421);
        assert_eq!(host_part("[::1]:8000"), "::1");
        assert_eq!(host_part("a.example"), "a.example");
    }

    #[test]
    fn compatible_base_path() {
        let e = expect(
            Kind::OpenAiCompatible {
                base_path: "/api/v1".to_owned(),
            },
            "llm.local",
        );
        let at = |path| Req::new("llm.local", path, &[BEARER]).check(&e);
        assert_eq!(at("/api/v1/chat/completions"), Ok("/chat/completions"));
        assert_eq!(status(at("/v1/chat/completions")), 404);
        assert_eq!(status(at("/api/v1/responses")), 404);
        let root = expect(
            Kind::OpenAiCompatible {
                base_path: String::new(),
            },
            "llm.local",
        );
        let r = Req::new("llm.local", "/embeddings", &[BEARER]);
        assert_eq!(r.check(&root), Ok("/embeddings"));
    }

    fn azure() -> Expect {
        expect(
            Kind::Azure {
                deployment: "gpt4o".to_owned(),
                api_version: "2024-10-21".to_owned(),
            },
            "res.openai.azure.com",
        )
    }

    #[test]
    fn azure_deployment_and_api_version() {
        let e = azure();
        let key = ("api-key", "sk-good");
        let mut r = Req::new(
            "res.openai.azure.com",
            "/openai/deployments/gpt4o/chat/completions",
            &[key],
        );
        r.query = Some("x=1&api-version=2024-10-21");
        assert_eq!(r.check(&e), Ok("/chat/completions"));

        r.query = None;
        let (s, body) = r.check(&e).unwrap_err();
        assert_eq!(
            (s, body),
            (
                404,
                json!({"error": {"code": "404", "message": "Resource not found"}})
            )
        );
        r.query = Some("api-version=2023-05-15");
        assert_eq!(status(r.check(&e)), 404);

        let mut other = Req::new(
            "res.openai.azure.com",
            "/openai/deployments/other/chat/completions",
            &[key],
        );
        other.query = Some("api-version=2024-10-21");
        let (s, body) = other.check(&e).unwrap_err();
        assert_eq!(
            (s, &body["error"]["code"]),
            (404, &json!("DeploymentNotFound"))
        );

        for path in [
            "/v1/chat/completions",
            "/openai/deployments/gpt4o/responses",
        ] {
            let mut r = Req::new("res.openai.azure.com", path, &[key]);
            r.query = Some("api-version=2024-10-21");
            assert_eq!(status(r.check(&e)), 404, "{path}");
        }
        let v1 = Req::new("res.openai.azure.com", "/openai/v1/responses", &[key]);
        assert_eq!(
            v1.check(&e),
            Ok("/responses"),
            "the v1 API needs no api-version"
        );
    }

    #[test]
    fn azure_key_and_no_bearer() {
        let e = azure();
        let path = "/openai/v1/chat/completions";
        let with = |h: &[(&'static str, &str)]| Req::new("res.openai.azure.com", path, h).check(&e);
        assert_eq!(status(with(&[("api-key", "sk-good")])), 200);
        let (s, body) = with(&[]).unwrap_err();
        assert_eq!((s, &body["error"]["code"]), (401, &json!("401")));
        assert_eq!(status(with(&[("api-key", "sk-bad")])), 401);
        assert_eq!(
            status(with(&[BEARER])),
            401,
            "Bearer is not Azure's key header"
        );
        assert_eq!(
            status(with(&[
                ("api-key", "sk-good"),
                ("authorization", "Bearer sk-openai")
            ])),
            401,
            "a foreign Bearer token is refused beside a good key"
        );
    }

    #[test]
    fn anthropic_key_and_version() {
        let e = expect(Kind::Anthropic, "api.anthropic.com");
        let key = ("x-api-key", "sk-good");
        let version = ("anthropic-version", "2023-06-01");
        let with =
            |path, h: &[(&'static str, &str)]| Req::new("api.anthropic.com", path, h).check(&e);
        assert_eq!(with("/v1/messages", &[key, version]), Ok("/messages"));
        assert_eq!(
            with("/v1/messages/count_tokens", &[key, version]),
            Ok("/messages/count_tokens")
        );
        let (s, body) = with("/v1/chat/completions", &[key, version]).unwrap_err();
        assert_eq!((s, &body["type"]), (404, &json!("error")));
        assert_eq!(body["error"]["type"], "not_found_error");

        let (s, body) = with("/v1/messages", &[version]).unwrap_err();
        assert_eq!(
            (s, &body["error"]["type"]),
            (401, &json!("authentication_error"))
        );
        assert_eq!(status(with("/v1/messages", &[key, version, BEARER])), 401);

        let (s, body) = with("/v1/messages", &[key]).unwrap_err();
        assert_eq!(s, 400);
        assert_eq!(
            body["error"],
            json!({"type": "invalid_request_error", "message": "anthropic-version: header is required"})
        );
    }

    #[test]
    fn query_params() {
        assert_eq!(
            query_param(Some("a=1&api-version=v"), "api-version"),
            Some("v")
        );
        assert_eq!(query_param(Some("api-versionx=v"), "api-version"), None);
        assert_eq!(query_param(None, "api-version"), None);
    }
}
