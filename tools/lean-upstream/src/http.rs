//! Finding where one HTTP/1.1 request ends, as its bytes arrive, without keeping its body: the
//! head is read for `content-length`, `transfer-encoding: chunked` and `connection: close`;
//! the body is counted (or its chunks walked) and dropped.

/// Where the parser is after some bytes.
#[derive(Debug, PartialEq, Eq)]
pub enum Progress {
    /// Every byte was used; the request is not complete yet.
    NeedMore,
    /// A request ended after `used` bytes of this input; `close` if the client asked for it.
    Done { used: usize, close: bool },
    /// Not a request this parser can frame.
    Bad,
}

/// Longest request head accepted.
const MAX_HEAD: usize = 64 * 1024;

#[derive(Debug)]
enum State {
    Head,
    /// Body bytes still to skip.
    Body(usize),
    Chunked(Chunk),
}

#[derive(Debug, Clone, Copy)]
enum Chunk {
    /// Reading a chunk-size line; the size so far, and whether an extension started.
    Size(usize, bool),
    /// Data bytes of the chunk still to skip.
    Data(usize),
    /// The CRLF after a chunk's data.
    DataEnd,
    /// Trailer lines after the last chunk; the length of the current line.
    Trailer(usize),
}

/// One connection's request framing.
#[derive(Debug)]
pub struct Parser {
    state: State,
    head: Vec<u8>,
    close: bool,
}

impl Default for Parser {
    fn default() -> Self {
        Parser {
            state: State::Head,
            head: Vec::with_capacity(1024),
            close: false,
        }
    }
}

impl Parser {
    /// Consumes `data` up to the end of the request in progress.
    pub fn feed(&mut self, data: &[u8]) -> Progress {
        let mut used = 0;
        loop {
            let rest = data.get(used..).unwrap_or_default();
            match &mut self.state {
                State::Head => {
                    // Search from just before the new bytes: the blank line may straddle reads.
                    let from = self.head.len().saturating_sub(3);
                    self.head.extend_from_slice(rest);
                    let Some(end) = find(self.head.get(from..).unwrap_or_default(), b"\r\n\r\n")
                        .map(|at| from + at + 4)
                    else {
                        return if self.head.len() > MAX_HEAD {
                            Progress::Bad
                        } else {
                            Progress::NeedMore
                        };
                    };
                    // Bytes after the head that belong to this input, not the head.
                    let extra = self.head.len() - end;
                    used += rest.len() - extra;
                    let Some(framing) = read_head(self.head.get(..end).unwrap_or_default()) else {
                        return Progress::Bad;
                    };
                    self.head.clear();
                    self.close = framing.close;
                    self.state = if framing.chunked {
                        State::Chunked(Chunk::Size(0, false))
                    } else {
                        State::Body(framing.length)
                    };
                }
                State::Body(remaining) => {
                    let take = (*remaining).min(rest.len());
                    *remaining -= take;
                    used += take;
                    if *remaining > 0 {
                        return Progress::NeedMore;
                    }
                    return self.finish(used);
                }
                State::Chunked(chunk) => {
                    let (n, done) = walk_chunks(chunk, rest);
                    used += n;
                    if done {
                        return self.finish(used);
                    }
                    if n == usize::MAX {
                        return Progress::Bad;
                    }
                    return Progress::NeedMore;
                }
            }
        }
    }

    fn finish(&mut self, used: usize) -> Progress {
        self.state = State::Head;
        Progress::Done {
            used,
            close: self.close,
        }
    }
}

/// Walks chunked framing over `data`: (bytes used, whether the body ended).
fn walk_chunks(state: &mut Chunk, data: &[u8]) -> (usize, bool) {
    let mut i = 0;
    while let Some(&b) = data.get(i) {
        match state {
            Chunk::Data(left) => {
                let take = (*left).min(data.len() - i);
                *left -= take;
                i += take;
                if *left == 0 {
                    *state = Chunk::DataEnd;
                }
                continue;
            }
            Chunk::Size(size, ext) => match b {
                b'\n' if *size == 0 => *state = Chunk::Trailer(0),
                b'\n' => *state = Chunk::Data(*size),
                b'\r' => {}
                b';' => *ext = true,
                _ if *ext => {}
                _ => match (b as char).to_digit(16) {
                    Some(d) if *size < usize::MAX >> 8 => *size = *size * 16 + d as usize,
                    _ => return (usize::MAX, false),
                },
            },
            Chunk::DataEnd => {
                if b == b'\n' {
                    *state = Chunk::Size(0, false);
                }
            }
            Chunk::Trailer(len) => match b {
                b'\n' if *len == 0 => return (i + 1, true),
                b'\n' => *len = 0,
                b'\r' => {}
                _ => *len += 1,
            },
        }
        i += 1;
    }
    (i, false)
}

struct Framing {
    length: usize,
    chunked: bool,
    close: bool,
}

fn read_head(head: &[u8]) -> Option<Framing> {
    let text = std::str::from_utf8(head).ok()?;
    let mut lines = text.split("\r\n");
    let request_line = lines.next()?;
    let mut framing = Framing {
        length: 0,
        chunked: false,
        close: request_line.ends_with("HTTP/1.0"),
    };
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            framing.length = value.parse().ok()?;
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            framing.chunked = value.to_ascii_lowercase().contains("chunked");
        } else if name.eq_ignore_ascii_case("connection") {
            let value = value.to_ascii_lowercase();
            framing.close =
                value.contains("close") || (framing.close && !value.contains("keep-alive"));
        }
    }
    Some(framing)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed_all(parser: &mut Parser, parts: &[&[u8]]) -> Vec<Progress> {
        let mut out = Vec::new();
        for part in parts {
            let mut data = *part;
            loop {
                match parser.feed(data) {
                    Progress::Done { used, close } => {
                        out.push(Progress::Done { used, close });
                        data = &data[used..];
                        if data.is_empty() {
                            break;
                        }
                    }
                    other => {
                        out.push(other);
                        break;
                    }
                }
            }
        }
        out
    }

    #[test]
    fn content_length_bodies_end_where_declared_across_reads_and_pipelined() {
        let mut p = Parser::default();
        let req =
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello";
        // Split inside the blank line and inside the body.
        let out = feed_all(&mut p, &[&req[..40], &req[40..62], &req[62..]]);
        assert_eq!(
            out.last(),
            Some(&Progress::Done {
                used: req.len() - 62,
                close: false
            })
        );
        assert!(out[..out.len() - 1]
            .iter()
            .all(|p| *p == Progress::NeedMore));
        // Two requests in one read.
        let two = [&req[..], &req[..]].concat();
        let out = feed_all(&mut p, &[&two]);
        assert_eq!(
            out,
            [
                Progress::Done {
                    used: req.len(),
                    close: false
                },
                Progress::Done {
                    used: req.len(),
                    close: false
                }
            ]
        );
    }

    #[test]
    fn chunked_bodies_end_after_the_last_chunk_and_trailers() {
        let mut p = Parser::default();
        let req = b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n5;x=y\r\nhello\r\n0\r\nx-t: 1\r\n\r\n";
        for split in 1..req.len() {
            let out = feed_all(&mut p, &[&req[..split], &req[split..]]);
            assert!(
                matches!(out.last(), Some(Progress::Done { close: true, .. })),
                "split {split}: {out:?}"
            );
        }
    }

    #[test]
    fn a_head_without_an_end_is_refused_once_too_long() {
        let mut p = Parser::default();
        let junk = vec![b'a'; MAX_HEAD + 1];
        assert_eq!(p.feed(&junk), Progress::Bad);
    }
}
