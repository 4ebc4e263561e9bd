//! Counting output tokens of an answer as it streams past, for the latency samples.
//!
//! The count comes from `usage` when the provider reports it (`completion_tokens` in OpenAI
//! JSON or the final SSE chunk, `output_tokens` in Anthropic's), otherwise from the number of
//! streamed content chunks (TrueFoundry seed, latency samples). Chunks are scanned as bytes,
//! never parsed into a tree, and nothing of the body is kept.

/// Scans response body chunks for the output token count.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsageScanner {
    reported: Option<u64>,
    content_chunks: u64,
}

const USAGE_KEYS: [&[u8]; 2] = [b"\"completion_tokens\":", b"\"output_tokens\":"];
/// A non-empty string value after one of these is one streamed content chunk (chat delta,
/// completion text, Anthropic text delta).
const CONTENT_MARKERS: [&[u8]; 2] = [b"\"content\":\"", b"\"text\":\""];

impl UsageScanner {
    /// Feeds one chunk of the response body.
    pub fn feed(&mut self, chunk: &[u8]) {
        for key in USAGE_KEYS {
            let mut rest = chunk;
            while let Some(at) = find(rest, key) {
                let tail = rest.get(at + key.len()..).unwrap_or_default();
                if let Some(n) = leading_number(tail) {
                    // The last report wins: Anthropic streams a running total.
                    self.reported = Some(n);
                }
                rest = tail;
            }
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
        s.feed(br#"{"choices":[{"message":{"content":"hi there"}}],"usage":{"prompt_tokens":5,"completion_tokens": 42,"total_tokens":47}}"#);
        assert_eq!(s.output_tokens(), 42);
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
    }

    #[test]
    fn garbage_counts_nothing() {
        let mut s = UsageScanner::default();
        s.feed(b"\"completion_tokens\":");
        s.feed(&[0xff; 64]);
        assert_eq!(s.output_tokens(), 0);
    }
}
