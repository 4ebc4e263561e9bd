//! Counting the tokens of an answer as it streams past, for the latency samples and the token
//! metrics.
//!
//! The count comes from `usage` when the provider reports it (`completion_tokens` in OpenAI JSON or
//! the final SSE chunk, `output_tokens` in Anthropic's and the Responses API's; the prompt's as
//! `prompt_tokens` or `input_tokens`), otherwise, for output and the latency samples only, from the
//! number of streamed content chunks (TrueFoundry virtual models, "Latency-based routing": TPOT
//! samples). Chunks are scanned as bytes, never parsed into a tree, and nothing of the body is
//! kept.

/// Scans response body chunks for the output token count.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsageScanner {
    reported: Option<u64>,
    prompt: Option<u64>,
    content_chunks: u64,
}

const USAGE_KEYS: [&[u8]; 2] = [b"\"completion_tokens\":", b"\"output_tokens\":"];
const PROMPT_KEYS: [&[u8]; 2] = [b"\"prompt_tokens\":", b"\"input_tokens\":"];
/// A non-empty string value after one of these is one streamed content chunk (chat delta,
/// completion text, Anthropic text delta).
const CONTENT_MARKERS: [&[u8]; 2] = [b"\"content\":\"", b"\"text\":\""];

impl UsageScanner {
    /// Feeds one chunk of the response body.
    pub fn feed(&mut self, chunk: &[u8]) {
        for key in USAGE_KEYS {
            // The last report wins: Anthropic streams a running total.
            last_number(chunk, key, &mut self.reported);
        }
        for key in PROMPT_KEYS {
            last_number(chunk, key, &mut self.prompt);
        }
        for marker in CONTENT_MARKERS {
            let mut rest = chunk;
            while let Some(at) = find(rest, marker) {
                let tail = rest.get(at + marker.len()..).unwrap_or_default();
                // An empty string (`"content":""`) carries no token.
                if tail.first() != Some(&b'"') {
                    self.content_chunks += 1;
                }
                rest = tail;
            }
        }
    }

    /// Whether a content chunk has been seen: the first token has arrived.
    pub fn has_content(&self) -> bool {
        self.content_chunks > 0
    }

    /// Output tokens: the reported usage, else the content chunks seen (0 if neither).
    pub fn output_tokens(&self) -> u64 {
        self.reported.unwrap_or(self.content_chunks)
    }

    /// `usage` as the provider reported it: (prompt tokens, completion tokens).
    pub fn reported(&self) -> (Option<u64>, Option<u64>) {
        (self.prompt, self.reported)
    }
}

/// Sets `slot` to the number after each `key` in `chunk`, so the last one stays.
fn last_number(chunk: &[u8], key: &[u8], slot: &mut Option<u64>) {
    let mut rest = chunk;
    while let Some(at) = find(rest, key) {
        let tail = rest.get(at + key.len()..).unwrap_or_default();
        if let Some(n) = leading_number(tail) {
            *slot = Some(n);
        }
        rest = tail;
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn leading_number(bytes: &[u8]) -> Option<u64> {
    let trimmed = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .and_then(|i| bytes.get(i..))?;
    let digits = trimmed.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(trimmed.get(..digits)?)
        .ok()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_completion_tokens_from_openai_json() {
        let mut s = UsageScanner::default();
        s.feed(br#"{"choices":[{"message":{"content":"hi there"}}],"usage":{"prompt_tokens":5,"completion_tokens": 42,"total_tokens":47,"prompt_tokens_details":{"cached_tokens":3}}}"#);
        assert_eq!(s.output_tokens(), 42);
        assert_eq!(s.reported(), (Some(5), Some(42)));
    }

    #[test]
    fn reads_the_final_sse_usage_chunk() {
        let mut s = UsageScanner::default();
        s.feed(b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\n");
        s.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n\n");
        assert_eq!(
            s.output_tokens(),
            2,
            "counted chunks until usage arrives; the empty role chunk is not a token"
        );
        s.feed(b"data: {\"choices\":[],\"usage\":{\"completion_tokens\":31}}\n\ndata: [DONE]\n\n");
        assert_eq!(s.output_tokens(), 31);
    }

    #[test]
    fn anthropic_streams_count_text_deltas_and_take_the_last_usage() {
        let mut s = UsageScanner::default();
        s.feed(b"event: message_start\ndata: {\"message\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n");
        s.feed(b"event: content_block_delta\ndata: {\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n");
        let mut chunks_only = UsageScanner::default();
        chunks_only.feed(b"data: {\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\ndata: {\"delta\":{\"type\":\"text_delta\",\"text\":\"x\"}}\n\n");
        assert_eq!(chunks_only.output_tokens(), 1);
        s.feed(b"event: message_delta\ndata: {\"usage\":{\"output_tokens\":57}}\n\n");
        assert_eq!(s.output_tokens(), 57);
        assert_eq!(s.reported(), (Some(3), Some(57)));
    }

    #[test]
    fn garbage_counts_nothing() {
        let mut s = UsageScanner::default();
        s.feed(b"\"completion_tokens\":");
        s.feed(&[0xff; 64]);
        assert_eq!(s.output_tokens(), 0);
        assert_eq!(s.reported(), (None, None));
        let mut chunks = UsageScanner::default();
        chunks.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n");
        assert_eq!(
            chunks.reported(),
            (None, None),
            "a chunk count is not usage"
        );
    }
}
