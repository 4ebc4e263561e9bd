//! Command-line parsing by hand: `--flag value` or `--flag=value`.

use crate::answer_fault::AnswerFault;
use crate::behaviour::{validate_status, Behaviour, DropMode};
use crate::fail_body::FailBody;
use crate::fault::StreamFault;
use crate::strict::{Expect, Kind};
use std::path::PathBuf;
use std::str::FromStr;

pub const USAGE: &str = "\
usage: mock-provider [--host 127.0.0.1] [--port 0] [--name NAME]
                     [--ttft-ms N] [--token-delay-ms N] [--output-tokens N]
                     [--fail-status CODE] [--fail-rate F] [--retry-after VALUE]
                     [--fail-body quota|billing|credit|rate_limit|invalid_key|
                                  context_length|prompt_too_long|content_filter]
                     [--drop before-response|mid-stream] [--stall-ms N]
                     [--error-body-on-200] [--headers-first]
                     [--stream-fault NAME] [--fault-after-tokens N (2)]
                     [--max-records N (10000; 0 counts only)] [--reply TEXT]
                     [--answer-fault refusal|empty]
                     [--tls-cert PEM --tls-key PEM]
                     [--strict openai|azure|anthropic|openai-compatible
                      --host-name NAME[:PORT] --api-key KEY
                      [--deployment NAME --api-version VERSION] [--base-path PATH (/v1)]]

A chat (/chat/completions, /messages) whose request has tools and ends with
the user's turn answers with a call of the first tool (or the one tool_choice
names; tool_choice none: text), its arguments the schema's required properties
(\"x\", 1, true, [], {} by type; an enum's first value); a request ending with
tool results answers \"The tool said: RESULT\" (results joined with \"; \").

Answers have --output-tokens tokens (8; fewer if the request's max_tokens,
max_completion_tokens or max_output_tokens says so). A streamed answer
(\"stream\": true) sends its opening events at once, its first token's event
--ttft-ms after them and each later token's --token-delay-ms after the one
before, each event written and flushed on its own; a non-streamed one comes
whole after ttft + tokens x token delay. --stall-ms delays every answer's start.
The flags from --name to --fault-after-tokens and --reply are also /__config
fields (snake_case): POST /__config with a JSON object changes them at run
time (null clears an optional one), GET /__config shows them all.

--fail-body NAME      an injected failure (--fail-status) carries that real
                      provider error body: OpenAI's insufficient_quota,
                      billing_hard_limit_reached, rate_limit_exceeded,
                      invalid_api_key, context_length_exceeded; Anthropic's
                      credit-balance and prompt-too-long errors; Azure's
                      content_filter (also a /__config field, fail_body).
--headers-first       a non-streamed answer sends its headers at once and its
                      body (in two parts) after its delay.
--tls-cert/--tls-key  serve TLS (PEM chain, PEM key), ALPN h2 and http/1.1.
--strict KIND         refuse API requests as that hosted service would, in its
                      error shape: TLS SNI other than NAME's host or a Host /
                      :authority other than NAME -> 421; a path it does not
                      serve -> 404; a missing or wrong key -> 401 (azure:
                      api-key, anthropic: x-api-key, both 401 on any
                      Authorization; others: Authorization: Bearer KEY);
                      anthropic without anthropic-version -> 400.
                      The bodies are checked as the real APIs check them
                      (400 in their error shape): anthropic's POST
                      /v1/messages (unknown fields, a missing max_tokens,
                      roles, a first turn not the user's, content block
                      types and fields, tool_result/tool_use pairing, tools,
                      tool_choice, thinking, at most 4 cache_control),
                      openai's POST /v1/chat/completions (unknown fields,
                      roles, content part types, tool messages answering
                      the assistant's tool_calls).
                      azure needs --deployment and --api-version (the one
                      accepted api-version of /openai/deployments/NAME/...);
                      openai-compatible serves under --base-path.
                      /__ control endpoints are never checked.
--stream-fault NAME   breaks streamed chat completions, Responses and Messages
                      answers (others ignore it), in the API's own events:
  error-before-content   200 and the opening without content (chat: the role
                         chunk; Responses: response.created, in_progress;
                         Messages: message_start, ping), then the in-stream
                         error (chat: data: {\"error\": ...} and no [DONE];
                         Responses: response.failed; Messages: event: error,
                         overloaded_error); the stream ends.
  error-after-content    N tokens, then that error (Responses: event: error,
                         code server_error); the stream ends.
  garbage-after-content  N tokens, then `this is not an event\\n\\n`, then the rest.
  stall-after-content    N tokens, then nothing for --stall-ms (which then no
                         longer delays these answers' start), then the rest.
  cut-after-content      N tokens, flushed, then the connection is aborted.
                      N is --fault-after-tokens (2; at most the answer's tokens).
--answer-fault KIND   chat completions, Responses and Messages answer a 200 that
                      answers nothing, streamed or whole, in the API's shape:
  refusal                chat finish_reason content_filter, no content;
                         Messages stop_reason refusal, no block; Responses
                         status incomplete, reason content_filter.
  empty                  chat content \"\"; Messages one empty text block;
                         Responses completed, one message with text \"\".
";

/// Everything the command line decides.
#[derive(Debug, PartialEq)]
pub struct Args {
    pub host: String,
    pub port: u16,
    pub behaviour: Behaviour,
    /// Requests kept for `GET /__requests` (0: count only, for benchmarks).
    pub max_records: usize,
    pub tls: Option<TlsFiles>,
    pub strict: Option<Expect>,
}

/// `--tls-cert` and `--tls-key`.
#[derive(Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The TLS and strict-mode flags as given, checked together once all are read.
#[derive(Debug, Default)]
struct Raw {
    tls_cert: Option<String>,
    tls_key: Option<String>,
    strict: Option<String>,
    host_name: Option<String>,
    api_key: Option<String>,
    deployment: Option<String>,
    api_version: Option<String>,
    base_path: Option<String>,
}

/// Parses the arguments after the program name; `Ok(None)` means `--help`.
pub fn parse<I: IntoIterator<Item = String>>(args: I) -> Result<Option<Args>, String> {
    let mut out = Args {
        host: "127.0.0.1".to_owned(),
        port: 0,
        behaviour: Behaviour::default(),
        max_records: crate::record::MAX_RECORDS,
        tls: None,
        strict: None,
    };
    let mut raw = Raw::default();
    let b = &mut out.behaviour;
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_owned(), Some(v.to_owned())),
            _ => (arg.clone(), None),
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(None),
            "--error-body-on-200" | "--headers-first" => {
                let on = match inline.as_deref() {
                    None | Some("true") => true,
                    Some("false") => false,
                    Some(v) => return Err(format!("{flag}: bad value {v:?}")),
                };
                if flag == "--headers-first" {
                    b.headers_first = on;
                } else {
                    b.error_body_on_200 = on;
                }
                continue;
            }
            _ => {}
        }
        let mut value = || {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| format!("{flag} needs a value"))
        };
        match flag.as_str() {
            "--host" => out.host = value()?,
            "--port" => out.port = num(&flag, &value()?)?,
            "--max-records" => out.max_records = num(&flag, &value()?)?,
            "--name" => b.name = value()?,
            "--ttft-ms" => b.ttft_ms = num(&flag, &value()?)?,
            "--token-delay-ms" => b.token_delay_ms = num(&flag, &value()?)?,
            "--output-tokens" => b.output_tokens = num(&flag, &value()?)?,
            "--stall-ms" => b.stall_ms = num(&flag, &value()?)?,
            "--fail-rate" => b.fail_rate = num(&flag, &value()?)?,
            "--retry-after" => b.retry_after = Some(value()?),
            "--fail-body" => b.fail_body = Some(FailBody::parse(&value()?)?),
            "--reply" => b.reply = Some(value()?),
            "--drop" => b.drop = Some(DropMode::parse(&value()?)?),
            "--stream-fault" => b.stream_fault = Some(StreamFault::parse(&value()?)?),
            "--fault-after-tokens" => b.fault_after_tokens = num(&flag, &value()?)?,
            "--answer-fault" => b.answer_fault = Some(AnswerFault::parse(&value()?)?),
            "--tls-cert" => raw.tls_cert = Some(value()?),
            "--tls-key" => raw.tls_key = Some(value()?),
            "--strict" => raw.strict = Some(value()?),
            "--host-name" => raw.host_name = Some(value()?),
            "--api-key" => raw.api_key = Some(value()?),
            "--deployment" => raw.deployment = Some(value()?),
            "--api-version" => raw.api_version = Some(value()?),
            "--base-path" => raw.base_path = Some(value()?),
            "--fail-status" => {
                let status = num(&flag, &value()?)?;
                validate_status(status)?;
                b.fail_status = Some(status);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    out.behaviour.validate()?;
    out.tls = tls(raw.tls_cert.take(), raw.tls_key.take())?;
    out.strict = strict(raw)?;
    Ok(Some(out))
}

fn tls(cert: Option<String>, key: Option<String>) -> Result<Option<TlsFiles>, String> {
    match (cert, key) {
        (None, None) => Ok(None),
        (Some(cert), Some(key)) => Ok(Some(TlsFiles {
            cert: cert.into(),
            key: key.into(),
        })),
        _ => Err("--tls-cert and --tls-key go together".into()),
    }
}

/// Builds the strict expectation; a flag that only strict mode (or only
/// another kind) reads is an error rather than silently ignored.
fn strict(raw: Raw) -> Result<Option<Expect>, String> {
    let Some(kind) = raw.strict else {
        let stray = [
            ("--host-name", &raw.host_name),
            ("--api-key", &raw.api_key),
            ("--deployment", &raw.deployment),
            ("--api-version", &raw.api_version),
            ("--base-path", &raw.base_path),
        ];
        return match stray.iter().find(|(_, v)| v.is_some()) {
            Some((flag, _)) => Err(format!("{flag} needs --strict")),
            None => Ok(None),
        };
    };
    let only = |flag: &str, value: &Option<String>, for_kind: &str| match value {
        Some(_) if kind != for_kind => Err(format!("{flag} is only for --strict {for_kind}")),
        _ => Ok(()),
    };
    only("--deployment", &raw.deployment, "azure")?;
    only("--api-version", &raw.api_version, "azure")?;
    only("--base-path", &raw.base_path, "openai-compatible")?;
    let required = |flag: &str, value: Option<String>| match value {
        Some(v) if !v.is_empty() => Ok(v),
        _ => Err(format!("--strict {kind} needs {flag}")),
    };
    let kind = match kind.as_str() {
        "openai" => Kind::OpenAi,
        "anthropic" => Kind::Anthropic,
        "azure" => Kind::Azure {
            deployment: required("--deployment", raw.deployment)?,
            api_version: required("--api-version", raw.api_version)?,
        },
        "openai-compatible" => Kind::OpenAiCompatible {
            base_path: base_path(raw.base_path.as_deref().unwrap_or("/v1"))?,
        },
        other => {
            return Err(format!(
                "--strict: unknown provider {other:?} (expected {})",
                Kind::NAMES
            ))
        }
    };
    let host_name = required("--host-name", raw.host_name)?;
    if host_name.contains(|c: char| c == '/' || c.is_whitespace()) {
        return Err(format!(
            "--host-name {host_name:?} must be NAME or NAME:PORT"
        ));
    }
    Ok(Some(Expect {
        kind,
        host_name,
        api_key: required("--api-key", raw.api_key)?,
    }))
}

/// `/v1`, `/api/v1/` or `/`; kept without the trailing slash (`/` becomes empty).
fn base_path(path: &str) -> Result<String, String> {
    if !path.starts_with('/') {
        return Err(format!("--base-path {path:?} must start with /"));
    }
    Ok(path.trim_end_matches('/').to_owned())
}

fn num<T: FromStr>(flag: &str, value: &str) -> Result<T, String> {
    value
        .parse()
        .map_err(|_| format!("{flag}: cannot parse {value:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Option<Args>, String> {
        parse(args.iter().map(|s| (*s).to_owned()))
    }

    #[test]
    fn defaults() {
        let a = p(&[]).unwrap().unwrap();
        assert_eq!(a.host, "127.0.0.1");
        assert_eq!(a.port, 0);
        assert_eq!(a.behaviour, Behaviour::default());
        assert_eq!((a.tls, a.strict), (None, None));
    }

    #[test]
    fn all_flags() {
        let a = p(&[
            "--host",
            "0.0.0.0",
            "--port=8080",
            "--name",
            "alpha",
            "--ttft-ms",
            "50",
            "--token-delay-ms",
            "10",
            "--output-tokens",
            "3",
            "--fail-status",
            "429",
            "--fail-rate",
            "0.5",
            "--retry-after",
            "2",
            "--fail-body",
            "quota",
            "--drop",
            "mid-stream",
            "--stall-ms",
            "7",
            "--error-body-on-200",
            "--headers-first",
        ])
        .unwrap()
        .unwrap();
        assert_eq!(a.host, "0.0.0.0");
        assert_eq!(a.port, 8080);
        let b = a.behaviour;
        assert_eq!(b.name, "alpha");
        assert_eq!((b.ttft_ms, b.token_delay_ms, b.output_tokens), (50, 10, 3));
        assert_eq!(b.fail_status, Some(429));
        assert!((b.fail_rate - 0.5).abs() < f64::EPSILON);
        assert_eq!(b.retry_after.as_deref(), Some("2"));
        assert_eq!(b.fail_body, Some(FailBody::Quota));
        assert_eq!(b.drop, Some(DropMode::MidStream));
        assert_eq!(b.stall_ms, 7);
        assert!(b.error_body_on_200);
        assert!(b.headers_first);
    }

    #[test]
    fn errors_and_help() {
        assert!(p(&["--help"]).unwrap().is_none());
        assert!(p(&["--port"]).is_err());
        assert!(p(&["--port", "x"]).is_err());
        assert!(p(&["--bogus"]).is_err());
        assert!(p(&["--fail-rate", "1.5"]).is_err());
        assert!(p(&["--fail-status", "99"]).is_err());
        assert!(p(&["--drop", "sometimes"]).is_err());
    }

    #[test]
    fn stream_fault_flags() {
        let a = p(&[
            "--stream-fault",
            "stall_after_content",
            "--fault-after-tokens=4",
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            a.behaviour.stream_fault,
            Some(StreamFault::StallAfterContent)
        );
        assert_eq!(a.behaviour.fault_after_tokens, 4);
        let a = p(&["--stream-fault=error-before-content"])
            .unwrap()
            .unwrap();
        assert_eq!(
            a.behaviour.stream_fault,
            Some(StreamFault::ErrorBeforeContent)
        );
        assert_eq!(a.behaviour.fault_after_tokens, 2);
        assert!(p(&["--stream-fault", "later"]).is_err());
        assert!(p(&["--stream-fault"]).is_err());
        assert!(p(&["--fault-after-tokens", "-1"]).is_err());
    }

    #[test]
    fn tls_flags() {
        let a = p(&["--tls-cert", "c.pem", "--tls-key=k.pem"])
            .unwrap()
            .unwrap();
        assert_eq!(
            a.tls,
            Some(TlsFiles {
                cert: "c.pem".into(),
                key: "k.pem".into()
            })
        );
        assert!(p(&["--tls-cert", "c.pem"]).is_err());
        assert!(p(&["--tls-key", "k.pem"]).is_err());
    }

    #[test]
    fn strict_kinds() {
        let base = ["--host-name", "api.openai.com", "--api-key", "sk-1"];
        let with = |extra: &[&str]| {
            let mut all: Vec<&str> = extra.to_vec();
            all.extend(base);
            p(&all).map(|a| a.unwrap().strict.unwrap())
        };
        let openai = with(&["--strict", "openai"]).unwrap();
        assert_eq!(
            openai,
            Expect {
                kind: Kind::OpenAi,
                host_name: "api.openai.com".into(),
                api_key: "sk-1".into()
            }
        );
        assert_eq!(with(&["--strict=anthropic"]).unwrap().kind, Kind::Anthropic);
        let azure = with(&[
            "--strict",
            "azure",
            "--deployment",
            "gpt4o",
            "--api-version",
            "2024-10-21",
        ])
        .unwrap();
        assert_eq!(
            azure.kind,
            Kind::Azure {
                deployment: "gpt4o".into(),
                api_version: "2024-10-21".into()
            }
        );
        let compat = |extra: &[&str]| {
            let mut all = vec!["--strict", "openai-compatible"];
            all.extend(extra);
            with(&all).map(|e| e.kind)
        };
        let path = |p: &str| Kind::OpenAiCompatible {
            base_path: p.into(),
        };
        assert_eq!(compat(&[]), Ok(path("/v1")));
        assert_eq!(compat(&["--base-path", "/api/v1/"]), Ok(path("/api/v1")));
        assert_eq!(compat(&["--base-path", "/"]), Ok(path("")));
        assert!(compat(&["--base-path", "v1"]).is_err());
    }

    #[test]
    fn strict_errors() {
        // Each strict kind needs its host name and key.
        assert!(p(&["--strict", "openai", "--api-key", "k"]).is_err());
        assert!(p(&["--strict", "openai", "--host-name", "h"]).is_err());
        assert!(p(&["--strict", "openai", "--host-name", "h", "--api-key", ""]).is_err());
        assert!(p(&["--strict", "openai", "--host-name", "h/x", "--api-key", "k"]).is_err());
        assert!(p(&["--strict", "bedrock", "--host-name", "h", "--api-key", "k"]).is_err());
        let azure = ["--strict", "azure", "--host-name", "h", "--api-key", "k"];
        assert!(
            p(&azure).is_err(),
            "azure needs a deployment and api-version"
        );
        let mut no_version = azure.to_vec();
        no_version.extend(["--deployment", "d"]);
        assert!(p(&no_version).is_err());
        // Flags for another kind, or without --strict, are mistakes.
        let openai = ["--strict", "openai", "--host-name", "h", "--api-key", "k"];
        for extra in [["--deployment", "d"], ["--base-path", "/v1"]] {
            let mut args = openai.to_vec();
            args.extend(extra);
            assert!(p(&args).is_err(), "{extra:?}");
        }
        assert!(p(&["--api-key", "k"]).is_err());
        assert!(p(&["--host-name", "h"]).is_err());
    }
}
