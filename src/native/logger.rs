//! The `log` crate's lines, which the core and the adapter write, go to Envoy's log under its
//! `dynamic_modules` component, at Envoy's level for it.

use super::ffi::{log_level, ModuleBuffer};

struct EnvoyLog;

static LOGGER: EnvoyLog = EnvoyLog;

fn level(l: log::Level) -> u32 {
    match l {
        log::Level::Error => log_level::ERROR,
        log::Level::Warn => log_level::WARN,
        log::Level::Info => log_level::INFO,
        log::Level::Debug => log_level::DEBUG,
        log::Level::Trace => log_level::TRACE,
    }
}

impl log::Log for EnvoyLog {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        // SAFETY: a plain query of Envoy's logger.
        super::api().is_some_and(|api| unsafe { (api.log_enabled)(level(metadata.level())) })
    }

    fn log(&self, record: &log::Record<'_>) {
        let Some(api) = super::api() else {
            return;
        };
        let lvl = level(record.level());
        // SAFETY: as above; the line is only formatted when Envoy would print it.
        if unsafe { (api.log_enabled)(lvl) } {
            let line = record.args().to_string();
            // SAFETY: the buffer outlives the call, which copies it.
            unsafe { (api.log)(lvl, ModuleBuffer::of(line.as_bytes())) };
        }
    }

    fn flush(&self) {}
}

/// Routes `log` lines to Envoy (once per process; later calls change nothing).
pub fn install() {
    if log::set_logger(&LOGGER).is_ok() {
        // Envoy decides per line (`log_enabled`), so every level reaches `log` above.
        log::set_max_level(log::LevelFilter::Trace);
    }
}
