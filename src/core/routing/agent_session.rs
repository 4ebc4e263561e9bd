//! `{"source": "agent_session"}`: the session a coding agent already sends, so sessions stay
//! where their prompt cache is without any client change.
//!
//! The first present, valid one of, in order:
//!
//! | Header / body member | Sent by | Documented in |
//! |---|---|---|
//! | `x-claude-code-session-id` | Claude Code (v2.1.86 on), every request | Claude Code docs, "Gateway protocol reference", Request headers |
//! | `session-id` | OpenAI Codex CLI (root session, shared by subagents) | openai/codex PR #21757, "api: send hyphenated session and thread headers" |
//! | `session_id` | older Codex CLI builds, Cline's openai-codex provider | openai/codex PR #22193, "fix: drop underscored id headers" |
//! | `x-session-affinity` | opencode (non-opencode providers) | anomalyco/opencode `packages/opencode/src/session/llm/request.ts`, `prepare` |
//! | `x-session-id` | opencode (same place); the generic name LLMGateway and OpenRouter read | same; LLMGateway docs, "Sessions" |
//! | `x-opencode-session` | opencode's own Zen/Go providers, Cline's opencode-go provider | opencode.ai docs, "Go" |
//! | body `prompt_cache_key` | Codex (defaults to the session id), opencode for OpenAI, Roo Code for Moonshot | OpenAI "Prompt caching" (the field routes to one cache); pydantic/pydantic-ai PR #7769 quoting Codex's `client.rs` |
//! | body `metadata.user_id` | Claude Code (holds its session UUID, legacy `..._session_<uuid>` or a JSON string) | coder/aibridge PR #241 |
//!
//! Headers come first: they name the session without reading the body and agents send them on
//! every request; the body members follow for clients that send only those. Codex's
//! `thread-id` is left out on purpose: subagent threads differ in it but share the session's
//! prompt cache key, so keying on the session keeps them on one cache. Underscore header names
//! reach the filter only when Envoy keeps them (`headers_with_underscores_action`, ALLOW by
//! default). `x-client-request-id` is new on every Claude Code request, so it is no session.
//! agentgateway trusts Codex's unprefixed headers only with a `codex*` User-Agent; here they
//! count from any client, since a client sending `session-id` names its session by it too,
//! and a forged one only chooses the forger's own target.
//!
//! Header values must be 8 to 256 characters of `[A-Za-z0-9_-]` (the rule LiteLLM's
//! `x-<vendor>-session-id` reading and agentgateway's agent-session detection apply): every
//! agent above sends a UUID or `ses_...` id, while a short or free-form value (`"1"`,
//! `"default"`) would be some other client's placeholder that would put unrelated sessions on
//! one target. An invalid header is skipped for the next source. Body members are any
//! non-empty string: Claude Code's JSON-string `metadata.user_id` fails that character rule but
//! still names one session.

use super::body_member::bytes_at;
use crate::core::headers::Headers;
use std::borrow::Cow;
use std::ops::Range;

/// The session headers, most specific first (see the table above).
pub const HEADERS: [&str; 6] = [
    "x-claude-code-session-id",
    "session-id",
    "session_id",
    "x-session-affinity",
    "x-session-id",
    "x-opencode-session",
];

/// The body members read when no header names the session, in order.
pub const BODY_MEMBERS: [&str; 2] = ["prompt_cache_key", "metadata.user_id"];

/// Shortest and longest session header value accepted.
const VALUE_LEN: std::ops::RangeInclusive<usize> = 8..=256;

/// The agent session of a request with `headers` and `body` (whose top-level members are
/// `fields`), or `None` when it sends none.
pub fn session<'a>(
    headers: &'a Headers,
    body: &'a [u8],
    fields: &[(Cow<'_, str>, Range<usize>)],
) -> Option<Cow<'a, [u8]>> {
    let header = HEADERS
        .iter()
        .filter_map(|name| headers.get(name))
        .find(|v| valid_header_value(v));
    if let Some(value) = header {
        return Some(Cow::Borrowed(value));
    }
    BODY_MEMBERS
        .iter()
        .find_map(|path| bytes_at(body, fields, path).filter(|v| !v.is_empty()))
}

/// 8 to 256 characters of `[A-Za-z0-9_-]`.
fn valid_header_value(value: &[u8]) -> bool {
    VALUE_LEN.contains(&value.len())
        && value
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::request::inspect;

    fn agent_session(headers: &[(&str, &str)], body: &str) -> Option<String> {
        let headers = Headers::from_pairs(headers.iter().copied());
        let inspected = inspect(body.as_bytes()).unwrap();
        session(&headers, body.as_bytes(), &inspected.fields)
            .map(|v| String::from_utf8(v.into_owned()).unwrap())
    }

    const UUID: &str = "54c1eb09-bc4c-4d2f-98eb-6d2ab2d5e2fe";
    const BODY: &str = r#"{"model": "m", "prompt_cache_key": "pck-12345678", "metadata": {"user_id": "user_h_account__session_u"}}"#;

    #[test]
    fn headers_win_in_their_order_over_the_body() {
        let claude = ("x-claude-code-session-id", UUID);
        let codex = ("session-id", "019a9544-7ab1-73c1-837e-1fa681f4462b");
        let opencode = ("x-session-affinity", "ses_01fc2cbe1ffeXgUcoySQcdO14d");
        assert_eq!(
            agent_session(&[opencode, codex, claude], BODY).as_deref(),
            Some(UUID)
        );
        assert_eq!(
            agent_session(&[opencode, codex], BODY).as_deref(),
            Some(codex.1)
        );
        assert_eq!(
            agent_session(&[("x-session-id", "ses_abcdefgh"), opencode], BODY).as_deref(),
            Some(opencode.1)
        );
        assert_eq!(
            agent_session(&[("session_id", "older-codex-id")], BODY).as_deref(),
            Some("older-codex-id")
        );
    }

    #[test]
    fn then_prompt_cache_key_then_metadata_user_id() {
        assert_eq!(agent_session(&[], BODY).as_deref(), Some("pck-12345678"));
        let no_key = r#"{"model": "m", "prompt_cache_key": 7, "metadata": {"user_id": "{\"session_id\":\"u\"}"}}"#;
        assert_eq!(
            agent_session(&[], no_key).as_deref(),
            Some(r#"{"session_id":"u"}"#),
            "a JSON-string user_id is a session too"
        );
        assert_eq!(agent_session(&[], r#"{"model": "m"}"#), None);
        assert_eq!(
            agent_session(&[], r#"{"model": "m", "prompt_cache_key": ""}"#),
            None
        );
    }

    #[test]
    fn invalid_header_values_are_skipped_for_the_next_source() {
        for bad in ["short", "has space in it", "semi;colon12", &"x".repeat(257)] {
            assert_eq!(
                agent_session(&[("x-claude-code-session-id", bad)], BODY).as_deref(),
                Some("pck-12345678"),
                "{bad}"
            );
        }
        assert_eq!(
            agent_session(
                &[("session-id", "1"), ("x-session-id", "ses_abcdefgh")],
                BODY
            )
            .as_deref(),
            Some("ses_abcdefgh")
        );
    }
}
