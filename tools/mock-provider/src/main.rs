//! `mock-provider`: a mock OpenAI/Anthropic-compatible LLM provider for
//! Switchboard's end-to-end tests and demo.
//!
//! Binds, prints `listening on HOST:PORT`, then serves HTTP/1.1 and HTTP/2
//! (over TLS with `--tls-cert`/`--tls-key`) until SIGTERM/SIGINT. See
//! `--help` for the flags (`--strict` mimics a hosted provider's refusals)
//! and `/__config` for runtime changes.

mod answer_fault;
mod anthropic;
mod args;
mod b64;
mod behaviour;
mod fail_body;
mod fault;
mod generate;
mod openai;
mod record;
mod respond;
mod responses;
mod router;
mod seal;
mod serve;
mod sse;
mod store;
mod strict;
mod tool_turn;
mod validate;

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::signal::unix::{signal, Signal, SignalKind};

#[tokio::main]
async fn main() -> ExitCode {
    let args = match args::parse(std::env::args().skip(1)) {
        Ok(Some(args)) => args,
        Ok(None) => {
            let _ = std::io::stdout().write_all(args::USAGE.as_bytes());
            return ExitCode::SUCCESS;
        }
        Err(msg) => {
            let _ = writeln!(std::io::stderr(), "mock-provider: {msg}\n{}", args::USAGE);
            return ExitCode::from(2);
        }
    };

    // Read the certificate before binding, so a bad file fails the start.
    let tls = match args.tls.as_ref().map(serve::tls_acceptor).transpose() {
        Ok(tls) => tls,
        Err(msg) => {
            let _ = writeln!(std::io::stderr(), "mock-provider: {msg}");
            return ExitCode::FAILURE;
        }
    };

    // Install the handlers before announcing the port, so a test that sends
    // SIGTERM right after reading the line gets a clean exit.
    let mut shutdown = match Shutdown::install() {
        Ok(shutdown) => shutdown,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "mock-provider: signal handlers: {e}");
            return ExitCode::FAILURE;
        }
    };

    let listener = match TcpListener::bind((args.host.as_str(), args.port)).await {
        Ok(listener) => listener,
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "mock-provider: cannot bind {}:{}: {e}",
                args.host,
                args.port
            );
            return ExitCode::FAILURE;
        }
    };
    let addr = match listener.local_addr() {
        Ok(addr) => addr,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "mock-provider: {e}");
            return ExitCode::FAILURE;
        }
    };
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "listening on {addr}");
        let _ = out.flush();
    }

    let state = Arc::new(router::State::new(
        args.behaviour,
        args.max_records,
        args.strict,
    ));
    loop {
        tokio::select! {
            () = shutdown.wait() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    tokio::spawn(serve::connection(stream, tls.clone(), Arc::clone(&state)));
                }
                Err(e) => {
                    // E.g. out of file descriptors: back off instead of spinning.
                    let _ = writeln!(std::io::stderr(), "mock-provider: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
    ExitCode::SUCCESS
}

/// SIGINT and SIGTERM listeners.
struct Shutdown {
    interrupt: Signal,
    terminate: Signal,
}

impl Shutdown {
    fn install() -> std::io::Result<Self> {
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }

    /// Resolves when either signal arrives.
    async fn wait(&mut self) {
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
    }
}
