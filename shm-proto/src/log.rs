//! Logging for heddle's processes: levelled, structured events (`tracing`) written to stderr as one
//! line each, `PROGRAM: LEVEL message key=value…`. The filter comes from `HEDDLE_LOG`, else `RUST_LOG`
//! (the usual `tracing` directives, e.g. `HEDDLE_LOG=debug` or `HEDDLE_LOG=front=debug,info`), else
//! `info`. Each process calls [`init`] once, first thing in `main`.
//!
//! ```
//! shm_proto::log::init("heddle-demo");
//! tracing::info!(session = "demo", "opened");
//! ```

use tracing_subscriber::EnvFilter;

/// Install the stderr subscriber for `program` (a second call does nothing).
pub fn init(program: &'static str) {
    let filter = std::env::var("HEDDLE_LOG")
        .ok()
        .or_else(|| std::env::var("RUST_LOG").ok())
        .and_then(|d| EnvFilter::try_new(d).ok())
        .unwrap_or_else(|| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .without_time()
        .with_target(false)
        .event_format(Format { program })
        .try_init();
}

/// `PROGRAM: LEVEL message key=value…` (no time: the service manager or the test harness stamps lines).
struct Format {
    program: &'static str,
}

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for Format
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let level = *event.metadata().level();
        if level == tracing::Level::INFO {
            write!(writer, "{}: ", self.program)?;
        } else {
            write!(writer, "{}: {}: ", self.program, level.as_str().to_ascii_lowercase())?;
        }
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}
