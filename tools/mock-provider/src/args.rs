//! Command-line parsing by hand: `--flag value` or `--flag=value`.

use crate::behaviour::{validate_status, Behaviour, DropMode};
use std::str::FromStr;

pub const USAGE: &str = "\
usage: mock-provider [--host 127.0.0.1] [--port 0] [--name NAME]
                     [--ttft-ms N] [--token-delay-ms N] [--output-tokens N]
                     [--fail-status CODE] [--fail-rate F] [--retry-after VALUE]
                     [--drop before-response|mid-stream] [--stall-ms N]
                     [--error-body-on-200] [--max-records N (10000; 0 counts only)] [--reply TEXT]
";

/// Everything the command line decides.
#[derive(Debug, PartialEq)]
pub struct Args {
    pub host: String,
    pub port: u16,
    pub behaviour: Behaviour,
    /// Requests kept for `GET /__requests` (0: count only, for benchmarks).
    pub max_records: usize,
}

/// Parses the arguments after the program name; `Ok(None)` means `--help`.
pub fn parse<I: IntoIterator<Item = String>>(args: I) -> Result<Option<Args>, String> {
    let mut out = Args {
        host: "127.0.0.1".to_owned(),
        port: 0,
        behaviour: Behaviour::default(),
        max_records: crate::record::MAX_RECORDS,
    };
    let b = &mut out.behaviour;
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_owned(), Some(v.to_owned())),
            _ => (arg.clone(), None),
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(None),
            "--error-body-on-200" => {
                b.error_body_on_200 = match inline.as_deref() {
                    None | Some("true") => true,
                    Some("false") => false,
                    Some(v) => return Err(format!("--error-body-on-200: bad value {v:?}")),
                };
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
            "--reply" => b.reply = Some(value()?),
            "--drop" => b.drop = Some(DropMode::parse(&value()?)?),
            "--fail-status" => {
                let status = num(&flag, &value()?)?;
                validate_status(status)?;
                b.fail_status = Some(status);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    out.behaviour.validate()?;
    Ok(Some(out))
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
            "--drop",
            "mid-stream",
            "--stall-ms",
            "7",
            "--error-body-on-200",
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
        assert_eq!(b.drop, Some(DropMode::MidStream));
        assert_eq!(b.stall_ms, 7);
        assert!(b.error_body_on_200);
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
}
