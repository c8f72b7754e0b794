//! Logs, request ids and OpenTelemetry export.
//!
//! **Invariant:** logs carry ids, methods, paths and statuses; never a token, password,
//! cookie, query string or body.
//!
//! A request head actix-http cannot parse (answered 400), or one past its buffer (431), is
//! logged by actix-http itself at error level: `stream error: request parse error: …`, target
//! `actix_http::h1::dispatcher`. It is the client's doing, and a filter directive can only
//! drop a line, not lower it: the logs ([`ClientFaults`]) write it at warn instead, target
//! `tether_server::telemetry`, with actix's words in the message. The filter still decides
//! on actix's line: `RUST_LOG=…,actix_http::h1::dispatcher=off` silences it.

use std::fmt;
use std::sync::OnceLock;
use std::time::Instant;

use actix_web::dev::{ServiceRequest, ServiceResponse};
use actix_web::http::header::{HeaderName, HeaderValue};
use opentelemetry::metrics::{Counter, Histogram};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use rand::RngCore;
use tether_protocol::routes::REQUEST_ID_HEADER;
use tracing::callsite::{DefaultCallsite, Identifier};
use tracing::field::{Field, FieldSet, Value, Visit};
use tracing::level_filters::LevelFilter;
use tracing::metadata::Kind;
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Dispatch, Event, Level, Metadata, Subscriber};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt as _};
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::EnvFilter;

/// What `init` installed; `shutdown` flushes the OpenTelemetry exporters, if any.
#[must_use = "dropping it early loses the last spans and metrics"]
pub struct Telemetry {
    tracer: Option<SdkTracerProvider>,
    meter: Option<SdkMeterProvider>,
}

impl Telemetry {
    /// Sends what is still buffered. Call it outside the async runtime: the OTLP HTTP client
    /// blocks.
    pub fn shutdown(self) {
        if let Some(tracer) = self.tracer {
            if let Err(err) = tracer.shutdown() {
                eprintln!("tether-server: flushing traces failed: {err}");
            }
        }
        if let Some(meter) = self.meter {
            if let Err(err) = meter.shutdown() {
                eprintln!("tether-server: flushing metrics failed: {err}");
            }
        }
    }
}

/// Installs the log subscriber: `RUST_LOG` filters (default `info`); `TETHER_LOG_FORMAT=json`
/// writes one JSON object per line (with the request span's fields) for log pipelines. With
/// `OTEL_EXPORTER_OTLP_ENDPOINT` set, spans (one per request) and request metrics are also
/// exported over OTLP/HTTP; the SDK reads the other `OTEL_*` variables (service name, headers,
/// export interval). Call it before the async runtime starts: the OTLP client blocks.
pub fn init() -> Telemetry {
    let otlp = std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT").is_some_and(|v| !v.is_empty());
    let (tracer, meter) = if otlp {
        (tracer_provider(), meter_provider())
    } else {
        (None, None)
    };
    if let Some(meter) = &meter {
        opentelemetry::global::set_meter_provider(meter.clone());
        make_request_instruments();
    }
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let json = std::env::var("TETHER_LOG_FORMAT").as_deref() == Ok("json");
    install(filter, json, std::io::stdout, tracer.as_ref());
    Telemetry { tracer, meter }
}

/// Installs the global subscriber: `filter`, the logs (text, or one JSON object per line,
/// through [`ClientFaults`]) written by `writer`, and spans to `tracer` when given. `init` writes to
/// stdout; a test can write to a buffer. `false` when a subscriber was installed already.
pub fn install<W>(
    filter: EnvFilter,
    json: bool,
    writer: W,
    tracer: Option<&SdkTracerProvider>,
) -> bool
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let (text_logs, json_logs) = if json {
        let json_logs = tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_writer(writer);
        (None, Some(json_logs))
    } else {
        (
            Some(tracing_subscriber::fmt::layer().with_writer(writer)),
            None,
        )
    };
    let trace_layer = tracer
        .map(|provider| tracing_opentelemetry::layer().with_tracer(provider.tracer(SERVICE_NAME)));
    tracing_subscriber::registry()
        .with(filter)
        .with(ClientFaults(Layer::and_then(text_logs, json_logs)))
        .with(trace_layer)
        .try_init()
        .is_ok()
}

/// The log output `L`, which writes actix-http's error line about a malformed request head
/// as a warning: the client's fault, not the server's. Everything else passes unchanged.
pub struct ClientFaults<L>(L);

impl<S, L> Layer<S> for ClientFaults<L>
where
    S: Subscriber,
    L: Layer<S>,
{
    fn on_register_dispatch(&self, subscriber: &Dispatch) {
        self.0.on_register_dispatch(subscriber);
    }

    fn on_layer(&mut self, subscriber: &mut S) {
        self.0.on_layer(subscriber);
    }

    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        self.0.register_callsite(metadata)
    }

    fn enabled(&self, metadata: &Metadata<'_>, ctx: Context<'_, S>) -> bool {
        self.0.enabled(metadata, ctx)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        self.0.max_level_hint()
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        self.0.on_new_span(attrs, id, ctx);
    }

    fn on_record(&self, span: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        self.0.on_record(span, values, ctx);
    }

    fn on_follows_from(&self, span: &Id, follows: &Id, ctx: Context<'_, S>) {
        self.0.on_follows_from(span, follows, ctx);
    }

    fn event_enabled(&self, event: &Event<'_>, ctx: Context<'_, S>) -> bool {
        self.0.event_enabled(event, ctx)
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let Some(message) = client_fault(event) else {
            self.0.on_event(event, ctx);
            return;
        };
        // Written only where a warning would be.
        if LevelFilter::current() < LevelFilter::WARN {
            return;
        }
        let fields = CLIENT_FAULT.fields();
        let Some(field) = fields.field("message") else {
            return;
        };
        let text = format!("malformed request: {message}");
        let text = text.as_str();
        let values = [(&field, Some(&text as &dyn Value))];
        let values = fields.value_set(&values);
        self.0.on_event(&Event::new(&CLIENT_FAULT, &values), ctx);
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        self.0.on_enter(id, ctx);
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        self.0.on_exit(id, ctx);
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        self.0.on_close(id, ctx);
    }

    fn on_id_change(&self, old: &Id, new: &Id, ctx: Context<'_, S>) {
        self.0.on_id_change(old, new, ctx);
    }
}

/// Where the warning about a malformed request head is said to come from. It is handed
/// straight to the log output, never dispatched, so it needs no registration.
static CLIENT_FAULT_CALLSITE: DefaultCallsite = DefaultCallsite::new(&CLIENT_FAULT);
static CLIENT_FAULT: Metadata<'static> = Metadata::new(
    "malformed request",
    "tether_server::telemetry",
    Level::WARN,
    Some(file!()),
    Some(line!()),
    Some(module_path!()),
    FieldSet::new(&["message"], Identifier(&CLIENT_FAULT_CALLSITE)),
    Kind::EVENT,
);

/// The message of actix-http's error line about a request head it refused.
fn client_fault(event: &Event<'_>) -> Option<String> {
    let meta = event.metadata();
    if *meta.level() != Level::ERROR || !meta.target().starts_with("actix_http::h1") {
        return None;
    }
    let mut message = Message(None);
    event.record(&mut message);
    message
        .0
        .filter(|message| message.starts_with("stream error: request parse error"))
}

/// An event's `message` field, as text.
struct Message(Option<String>);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.0 = Some(format!("{value:?}"));
        }
    }
}

/// The name spans and metrics are exported under, unless `OTEL_SERVICE_NAME` says otherwise.
const SERVICE_NAME: &str = "tether-server";

fn resource() -> Resource {
    let builder = Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_some() {
        builder.build()
    } else {
        builder.with_service_name(SERVICE_NAME).build()
    }
}

fn tracer_provider() -> Option<SdkTracerProvider> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .build()
        .map_err(|err| eprintln!("tether-server: OTLP traces are off: {err}"))
        .ok()?;
    Some(
        SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource())
            .build(),
    )
}

fn meter_provider() -> Option<SdkMeterProvider> {
    let exporter = opentelemetry_otlp::MetricExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .build()
        .map_err(|err| eprintln!("tether-server: OTLP metrics are off: {err}"))
        .ok()?;
    Some(
        SdkMeterProvider::builder()
            .with_periodic_exporter(exporter)
            .with_resource(resource())
            .build(),
    )
}

/// The request instruments exported over OTLP, made once a meter provider is installed; unset
/// (and so costing nothing per request) when OTLP is off.
struct RequestInstruments {
    count: Counter<u64>,
    duration: Histogram<f64>,
}

static REQUEST_INSTRUMENTS: OnceLock<RequestInstruments> = OnceLock::new();

fn make_request_instruments() {
    let meter = opentelemetry::global::meter(SERVICE_NAME);
    let _ = REQUEST_INSTRUMENTS.set(RequestInstruments {
        count: meter
            .u64_counter("tether.http.requests")
            .with_description("HTTP requests answered, by route pattern, method and status")
            .build(),
        duration: meter
            .f64_histogram("tether.http.request.duration")
            .with_unit("s")
            .with_description("Time to answer, by route pattern")
            .build(),
    });
}

/// Records one answered request on the OTLP instruments (the Prometheus ones are in
/// `metrics`). `route` is the matched pattern, never the raw path.
pub fn record_request(route: &str, method: &str, status: u16, seconds: f64) {
    let Some(instruments) = REQUEST_INSTRUMENTS.get() else {
        return;
    };
    let route = KeyValue::new("http.route", route.to_owned());
    instruments.count.add(
        1,
        &[
            route.clone(),
            KeyValue::new("http.request.method", method.to_owned()),
            KeyValue::new("http.response.status_code", i64::from(status)),
        ],
    );
    instruments.duration.record(seconds, &[route]);
}

/// The caller's `x-request-id` when it is sane (1 to 64 of `[A-Za-z0-9._-]`), else a new one.
pub fn request_id(req: &ServiceRequest) -> String {
    req.headers()
        .get(REQUEST_ID_HEADER)
        .and_then(|value| value.to_str().ok())
        .filter(|id| is_sane_id(id))
        .map_or_else(new_request_id, str::to_owned)
}

/// Echoes the request id on the answer and logs the outcome.
pub fn finish<B>(res: &mut ServiceResponse<B>, request_id: &str, started: Instant) {
    if let Ok(value) = HeaderValue::from_str(request_id) {
        res.headers_mut()
            .insert(HeaderName::from_static(REQUEST_ID_HEADER), value);
    }
    let status = res.status().as_u16();
    let elapsed_ms = started.elapsed().as_millis();
    if status >= 500 {
        tracing::error!(status, elapsed_ms, "answered");
    } else {
        tracing::info!(status, elapsed_ms, "answered");
    }
}

fn is_sane_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

fn new_request_id() -> String {
    // Unique, not secret: the thread's generator, not a system call per request.
    let mut bytes = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut bytes);
    crate::credentials::hex(&bytes)
}
