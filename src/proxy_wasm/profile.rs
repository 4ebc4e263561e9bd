//! Where a request's time goes inside the filter, for `make profile`: built only with the
//! `profile` feature, every callback and host call is timed with the host clock and, every
//! [`REPORT_EVERY_NS`] of it, each worker logs per-request figures. Without the feature a span
//! is an empty value and costs nothing.
//!
//! Envoy's CPU accounting (what `make bench` reports) gives the filter's total; this splits it
//! into the host calls (each a crossing out of V8 plus Envoy's work) and the filter's own code.

/// Times the enclosing scope under `name` until dropped.
#[cfg(not(feature = "profile"))]
#[inline(always)]
pub fn span(_name: &'static str) -> Span {
    Span
}

/// A timed scope (nothing without the `profile` feature).
#[cfg(not(feature = "profile"))]
pub struct Span;

#[cfg(feature = "profile")]
pub use timed::span;

/// Host time between two reports of a worker.
#[cfg(feature = "profile")]
pub const REPORT_EVERY_NS: u64 = 5_000_000_000;

#[cfg(feature = "profile")]
mod timed {
    use super::REPORT_EVERY_NS;
    use std::cell::RefCell;

    /// Calls and nanoseconds of one name: all, and outside the spans nested in it.
    #[derive(Clone, Copy, Default)]
    struct Totals {
        calls: u64,
        ns: u64,
        self_ns: u64,
    }

    #[derive(Default)]
    struct Profile {
        names: Vec<(&'static str, Totals)>,
        // Open spans: their name, start, and time spent in spans nested in them.
        open: Vec<(&'static str, u64, u64)>,
        requests: u64,
        since_ns: u64,
    }

    thread_local! {
        static PROFILE: RefCell<Profile> = RefCell::new(Profile::default());
    }

    fn now_ns() -> u64 {
        proxy_wasm::hostcalls::get_current_time()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(0))
    }

    /// A timed scope.
    pub struct Span;

    /// Times the enclosing scope under `name` until dropped.
    pub fn span(name: &'static str) -> Span {
        let start = now_ns();
        PROFILE.with(|p| {
            let mut p = p.borrow_mut();
            if name == "on_http_request_headers" {
                if p.requests == 0 {
                    p.since_ns = start;
                }
                p.requests += 1;
            }
            p.open.push((name, start, 0));
        });
        Span
    }

    impl Drop for Span {
        fn drop(&mut self) {
            let end = now_ns();
            PROFILE.with(|p| {
                let mut p = p.borrow_mut();
                let Some((name, start, nested)) = p.open.pop() else {
                    return;
                };
                let ns = end.saturating_sub(start);
                if let Some(parent) = p.open.last_mut() {
                    parent.2 += ns;
                }
                let at = match p.names.iter().position(|(n, _)| *n == name) {
                    Some(at) => at,
                    None => {
                        p.names.push((name, Totals::default()));
                        p.names.len() - 1
                    }
                };
                if let Some((_, t)) = p.names.get_mut(at) {
                    t.calls += 1;
                    t.ns += ns;
                    t.self_ns += ns.saturating_sub(nested);
                }
                if p.open.is_empty() && end.saturating_sub(p.since_ns) >= REPORT_EVERY_NS {
                    report(&mut p);
                }
            });
        }
    }

    /// Logs one line per name (calls, µs inclusive, µs own, per request) and starts over.
    fn report(p: &mut Profile) {
        if p.requests == 0 {
            return;
        }
        let n = p.requests as f64;
        p.names.sort_by_key(|(_, t)| std::cmp::Reverse(t.self_ns));
        let mut lines = format!("profile over {} requests:", p.requests);
        for (name, t) in &p.names {
            lines.push_str(&format!(
                "\nprofile {name} calls={:.2} total_us={:.2} self_us={:.2}",
                t.calls as f64 / n,
                t.ns as f64 / n / 1e3,
                t.self_ns as f64 / n / 1e3,
            ));
        }
        log::info!("{lines}");
        p.names.clear();
        p.requests = 0;
    }
}
