//! Server configuration: command-line flags and `TETHER_*` environment variables.
//!
//! [`Config`] is a plain struct with public fields so tests build one with [`Config::new`]
//! and shrink the time constants they exercise.

use std::path::PathBuf;

use clap::Parser;

use crate::proxies::TrustedProxies;
use crate::rate_limits::RateLimitConfig;

/// Everything the server needs to start. Not `Debug`: the database URL may hold a password.
#[derive(Clone)]
pub struct Config {
    /// Address the HTTP listener binds; port 0 picks a free one.
    pub listen: String,
    /// `postgres://…` or `sqlite://…`; `None` means `tether.db` inside `data_dir`.
    pub database_url: Option<String>,
    /// Where the embedded database and the evidence blobs (`blobs/`) live.
    pub data_dir: PathBuf,
    /// Redis for wake-ups and relays across replicas; `None` keeps them in process.
    pub redis_url: Option<String>,
    /// Base of verification links and cookie security; derived from the request's Host when unset.
    pub public_url: Option<String>,
    /// How long a claim, heartbeat or progress call keeps a lease.
    pub lease_secs: u64,
    /// A device heard from within this window is shown online.
    pub online_secs: u64,
    /// The heartbeat pace the server asks agents for.
    pub heartbeat_secs: u64,
    /// The pace asked of a device that holds no run and keeps its event stream open here:
    /// its pings on the stream keep it online meanwhile (see `leases::heartbeat`).
    pub idle_heartbeat_secs: u64,
    /// How often the sweeper looks for expired leases.
    pub sweep_secs: u64,
    /// How often heartbeats' contact times are written in one batch (see `presence`).
    pub presence_flush_ms: u64,
    /// How long a pairing code stays valid (protocol default 600).
    pub pairing_expires_secs: u64,
    /// The first polling interval of `register` (protocol default 5).
    pub pairing_interval_secs: u64,
    /// Running or waiting jobs one account may have at once; claims past it answer 204.
    pub max_running_per_account: u32,
    /// HTTP worker threads; tests use one per app to keep the machine responsive.
    pub http_workers: usize,
    /// Connections of the PostgreSQL pool, or of the SQLite read pool.
    pub db_max_connections: u32,
    /// How long a live file request waits for the device before answering 504.
    pub relay_timeout_secs: u64,
    /// How long an owner's preview, release or discard of held evidence waits for the
    /// computer's upload before answering 504.
    pub evidence_wait_secs: u64,
    /// How often the server pings an event stream.
    pub events_ping_secs: u64,
    /// An event stream silent (no pong, no message) this long is closed.
    pub events_idle_secs: u64,
    /// Per-replica rate limits (`TETHER_RATE_LIMITS`).
    pub rate_limits: RateLimitConfig,
    /// Largest evidence file accepted (protocol: 100 MB); tests shrink it.
    pub evidence_max_bytes: u64,
    /// argon2id hashes run at once (default one per core; see `passwords`).
    pub password_slots: usize,
    /// Password checks that may wait for a slot; past them sign-in and sign-up answer 503
    /// (`TETHER_PASSWORD_QUEUE`, default 16 per slot).
    pub password_queue: usize,
    /// Peers whose `X-Forwarded-For` / `Forwarded` headers name the client
    /// (`TETHER_TRUSTED_PROXIES`); empty believes none (see `routes::client`).
    pub trusted_proxies: TrustedProxies,
    /// How long a request body may take to arrive, extended by a second per 16 KiB received
    /// (`TETHER_BODY_TIMEOUT_SECS`; see `routes::edge`); past it, 408 `request_timeout`.
    pub body_timeout_ms: u64,
    /// Open connections this replica serves (`TETHER_MAX_CONNECTIONS`); a connection past
    /// them is answered 503 `unavailable`. Lowered to fit the open-files limit.
    pub max_connections: usize,
    /// Address of the Prometheus `/metrics` listener (`TETHER_METRICS_LISTEN`); `None`
    /// serves no metrics. Never the public listener: the counts are platform-wide.
    pub metrics_listen: Option<String>,
    /// The VAPID private key, base64url of the 32-byte P-256 scalar
    /// (`TETHER_VAPID_PRIVATE_KEY`); `None` makes one once and keeps it in the data dir.
    /// Replicas must share one.
    pub vapid_private_key: Option<String>,
    /// The VAPID `sub` claim, `mailto:…` or `https://…` (`TETHER_PUSH_SUBJECT`); `None`
    /// uses the public URL when it is https, else sends none.
    pub push_subject: Option<String>,
    /// Admits push endpoints on loopback addresses, `http://127.0.0.1:PORT/…` and
    /// `http://[::1]:PORT/…` (`TETHER_PUSH_ALLOW_LOOPBACK=1`), for tests only: with it, any
    /// account can make the server POST to this host's loopback services.
    pub push_allow_loopback: bool,
    /// The newest tether-agent release (`TETHER_LATEST_AGENT_VERSION`, e.g. `0.5.0`): the
    /// Computers pages mark an older agent "update available". `None` marks none.
    pub latest_agent_version: Option<String>,
}

impl Config {
    /// The defaults: SQLite in `data_dir`, listening on 127.0.0.1:8080, protocol constants.
    pub fn new(data_dir: PathBuf) -> Config {
        Config {
            listen: "127.0.0.1:8080".to_owned(),
            database_url: None,
            data_dir,
            redis_url: None,
            public_url: None,
            lease_secs: 120,
            online_secs: 90,
            heartbeat_secs: 30,
            idle_heartbeat_secs: 300,
            sweep_secs: 15,
            presence_flush_ms: 1_000,
            pairing_expires_secs: tether_protocol::pairing::PAIRING_EXPIRES_SECS,
            pairing_interval_secs: tether_protocol::pairing::PAIRING_INTERVAL_SECS,
            max_running_per_account: 4,
            http_workers: cores(),
            db_max_connections: 10,
            relay_timeout_secs: 10,
            evidence_wait_secs: 60,
            events_ping_secs: 20,
            events_idle_secs: 60,
            rate_limits: RateLimitConfig::defaults(),
            evidence_max_bytes: tether_protocol::jobs::MAX_EVIDENCE_BYTES,
            password_slots: cores(),
            password_queue: PASSWORD_QUEUE_PER_SLOT * cores(),
            trusted_proxies: TrustedProxies::default(),
            body_timeout_ms: 20_000,
            max_connections: 20_000,
            metrics_listen: None,
            vapid_private_key: None,
            push_subject: None,
            push_allow_loopback: false,
            latest_agent_version: None,
        }
    }

    /// Reads flags and environment variables; the second value is `--migrate-only`.
    pub fn from_args() -> (Config, bool) {
        let cli = Cli::parse();
        let migrate_only = cli.migrate_only;
        (cli.into_config(), migrate_only)
    }

    /// The SQLite URL used when no database URL is configured.
    pub fn default_sqlite_url(&self) -> String {
        format!("sqlite://{}", self.data_dir.join("tether.db").display())
    }

    /// Whether cookies must be `Secure` (and answers carry HSTS): only when the public URL
    /// is https.
    pub fn secure_cookies(&self) -> bool {
        self.public_url
            .as_deref()
            .is_some_and(|url| url.starts_with("https://"))
    }
}

/// `tether-server [--listen ADDR] [--database-url URL] [--data-dir DIR]`.
#[derive(Parser)]
#[command(
    name = "tether-server",
    version,
    about = "Tether's coordination service"
)]
struct Cli {
    /// Address to listen on.
    #[arg(long, env = "TETHER_LISTEN", default_value = "127.0.0.1:8080")]
    listen: String,
    /// postgres://… for PostgreSQL; default a SQLite file in the data dir.
    #[arg(long, env = "TETHER_DATABASE_URL")]
    database_url: Option<String>,
    /// Data directory, created when missing.
    #[arg(long, env = "TETHER_DATA_DIR", default_value = "./tether-data")]
    data_dir: PathBuf,
    /// redis://… for wake-ups and relays across replicas; default in process.
    #[arg(long, env = "TETHER_REDIS_URL")]
    redis_url: Option<String>,
    /// Public base URL, e.g. https://tether.example.com.
    #[arg(long, env = "TETHER_PUBLIC_URL")]
    public_url: Option<String>,
    #[arg(long, env = "TETHER_LEASE_SECS", default_value_t = 120, hide = true)]
    lease_secs: u64,
    #[arg(long, env = "TETHER_ONLINE_SECS", default_value_t = 90, hide = true)]
    online_secs: u64,
    #[arg(long, env = "TETHER_HEARTBEAT_SECS", default_value_t = 30, hide = true)]
    heartbeat_secs: u64,
    #[arg(
        long,
        env = "TETHER_IDLE_HEARTBEAT_SECS",
        default_value_t = 300,
        hide = true
    )]
    idle_heartbeat_secs: u64,
    #[arg(long, env = "TETHER_SWEEP_SECS", default_value_t = 15, hide = true)]
    sweep_secs: u64,
    /// Milliseconds between batched writes of heartbeats' contact times.
    #[arg(
        long,
        env = "TETHER_PRESENCE_FLUSH_MS",
        default_value_t = 1_000,
        hide = true
    )]
    presence_flush_ms: u64,
    /// Seconds a live file request waits for the device.
    #[arg(
        long,
        env = "TETHER_RELAY_TIMEOUT_SECS",
        default_value_t = 10,
        hide = true
    )]
    relay_timeout_secs: u64,
    /// How long a held file's preview, release or discard waits for the computer.
    #[arg(
        long,
        env = "TETHER_EVIDENCE_WAIT_SECS",
        default_value_t = 60,
        hide = true
    )]
    evidence_wait_secs: u64,
    /// Database connections: the PostgreSQL pool, or SQLite's read pool (its writer is
    /// always one). On PostgreSQL each commit waits for its WAL flush, so concurrent
    /// transactions, flushed together, are what buys throughput (docs/PERFORMANCE.md).
    #[arg(long, env = "TETHER_DB_CONNECTIONS", default_value_t = 10)]
    db_connections: u32,
    /// HTTP worker threads (default: one per core).
    #[arg(long, env = "TETHER_HTTP_WORKERS")]
    http_workers: Option<usize>,
    /// Largest evidence file accepted, in bytes (at most the protocol's 100 MB).
    #[arg(
        long,
        env = "TETHER_EVIDENCE_MAX_BYTES",
        default_value_t = tether_protocol::jobs::MAX_EVIDENCE_BYTES,
        hide = true
    )]
    evidence_max_bytes: u64,
    /// Apply the database migrations and exit (for a deploy's migration step).
    #[arg(long)]
    migrate_only: bool,
    /// Password checks that may wait for a hashing slot (default 16 per core).
    #[arg(long, env = "TETHER_PASSWORD_QUEUE")]
    password_queue: Option<usize>,
    /// `off`, or changes such as `heartbeat=120/min,files=30/min` (units s, min, h).
    #[arg(long, env = "TETHER_RATE_LIMITS", default_value = "on", value_parser = RateLimitConfig::parse)]
    rate_limits: RateLimitConfig,
    /// Proxies whose X-Forwarded-For / Forwarded is believed: addresses or CIDRs,
    /// comma-separated (e.g. `10.0.0.0/8,127.0.0.1`). Empty: none, the peer is the client.
    #[arg(long, env = "TETHER_TRUSTED_PROXIES", default_value = "", value_parser = TrustedProxies::parse)]
    trusted_proxies: TrustedProxies,
    /// Seconds a request body may take to arrive (plus one per 16 KiB received).
    #[arg(long, env = "TETHER_BODY_TIMEOUT_SECS", default_value_t = 20)]
    body_timeout_secs: u64,
    /// Open connections served at once; past them a connection is answered 503.
    #[arg(long, env = "TETHER_MAX_CONNECTIONS", default_value_t = 20_000)]
    max_connections: usize,
    /// Address for Prometheus `/metrics`, e.g. 127.0.0.1:9090; unset: no metrics listener.
    #[arg(long, env = "TETHER_METRICS_LISTEN")]
    metrics_listen: Option<String>,
    /// The Web Push (VAPID) private key: base64url of the 32-byte P-256 scalar; default a
    /// key made once and kept in the data dir. Every replica must be given the same one.
    #[arg(long, env = "TETHER_VAPID_PRIVATE_KEY", hide_env_values = true)]
    vapid_private_key: Option<String>,
    /// The VAPID contact, `mailto:…` or `https://…`; default the public URL when https.
    #[arg(long, env = "TETHER_PUSH_SUBJECT", value_parser = parse_push_subject)]
    push_subject: Option<String>,
    /// Admit push endpoints on loopback addresses, for tests only: `1` or `true`.
    #[arg(
        long,
        env = "TETHER_PUSH_ALLOW_LOOPBACK",
        value_parser = parse_switch,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true",
        default_value = "false",
        hide = true
    )]
    push_allow_loopback: bool,
    /// The newest tether-agent version, e.g. 0.5.0: older agents show "update available".
    #[arg(long, env = "TETHER_LATEST_AGENT_VERSION")]
    latest_agent_version: Option<String>,
}

/// A switch that only `1` or `true` turns on; `0`, `false` or nothing leaves it off, and
/// anything else is refused rather than guessed at (`yes` is not read as on).
fn parse_switch(raw: &str) -> Result<bool, String> {
    match raw.trim() {
        "1" | "true" => Ok(true),
        "" | "0" | "false" => Ok(false),
        _ => Err("must be 1 or true (on), or 0 or false (off)".to_owned()),
    }
}

/// RFC 8292 asks for a contact the push service can reach: a mailto: or an https: URI.
fn parse_push_subject(raw: &str) -> Result<String, String> {
    let subject = raw.trim();
    if subject.is_empty() {
        return Ok(String::new());
    }
    let shaped = subject.starts_with("mailto:") || subject.starts_with("https://");
    if shaped && subject.len() > 8 && !subject.chars().any(char::is_control) {
        Ok(subject.to_owned())
    } else {
        Err("must be mailto:ADDRESS or an https:// URL".to_owned())
    }
}

impl Cli {
    fn into_config(self) -> Config {
        let mut config = Config::new(self.data_dir);
        config.listen = self.listen;
        config.database_url = self.database_url.filter(|url| !url.is_empty());
        config.redis_url = self.redis_url.filter(|url| !url.is_empty());
        config.public_url = self
            .public_url
            .filter(|url| !url.is_empty())
            .map(|url| url.trim_end_matches('/').to_owned());
        // Zero would make leases expire at once or spin the sweeper.
        config.lease_secs = self.lease_secs.max(1);
        config.online_secs = self.online_secs.max(1);
        config.heartbeat_secs = self.heartbeat_secs.max(1);
        // Never quicker than a busy device's pace; the agent waits at most 300 s.
        config.idle_heartbeat_secs = self
            .idle_heartbeat_secs
            .clamp(config.heartbeat_secs, 300.max(config.heartbeat_secs));
        config.sweep_secs = self.sweep_secs.max(1);
        config.presence_flush_ms = self.presence_flush_ms.clamp(10, 60_000);
        config.relay_timeout_secs = self.relay_timeout_secs.max(1);
        config.evidence_wait_secs = self.evidence_wait_secs.clamp(1, 600);
        config.db_max_connections = self.db_connections.clamp(1, 1_000);
        if let Some(workers) = self.http_workers {
            config.http_workers = workers.clamp(1, 256);
        }
        config.rate_limits = self.rate_limits;
        if let Some(waiting) = self.password_queue {
            config.password_queue = waiting;
        }
        config.trusted_proxies = self.trusted_proxies;
        config.body_timeout_ms = self.body_timeout_secs.clamp(1, 3_600) * 1_000;
        config.max_connections = self.max_connections.max(1);
        config.metrics_listen = self.metrics_listen.filter(|addr| !addr.is_empty());
        config.vapid_private_key = self.vapid_private_key.filter(|key| !key.trim().is_empty());
        config.push_subject = self.push_subject.filter(|subject| !subject.is_empty());
        config.push_allow_loopback = self.push_allow_loopback;
        config.latest_agent_version = self
            .latest_agent_version
            .map(|version| version.trim().to_owned())
            .filter(|version| !version.is_empty());
        config.evidence_max_bytes = self
            .evidence_max_bytes
            .min(tether_protocol::jobs::MAX_EVIDENCE_BYTES);
        config
    }
}

/// Waiting places of the password-hashing queue per hashing slot (one slot per core).
pub const PASSWORD_QUEUE_PER_SLOT: usize = 16;

/// The cores this process may use: the default of HTTP workers and hashing slots.
fn cores() -> usize {
    std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{parse_switch, Cli};

    fn loopback_switch(args: &[&str]) -> Result<bool, clap::Error> {
        let argv = ["tether-server"].iter().chain(args);
        Cli::try_parse_from(argv).map(|cli| cli.into_config().push_allow_loopback)
    }

    #[test]
    fn the_loopback_switch_is_off_unless_named() {
        assert!(!loopback_switch(&[]).unwrap_or(true));
        assert!(loopback_switch(&["--push-allow-loopback"]).unwrap_or(false));
        assert!(loopback_switch(&["--push-allow-loopback", "1"]).unwrap_or(false));
        assert!(!loopback_switch(&["--push-allow-loopback", "0"]).unwrap_or(true));
        assert!(loopback_switch(&["--push-allow-loopback", "yes"]).is_err());
    }

    #[test]
    fn only_one_or_true_turn_a_switch_on() {
        assert_eq!(parse_switch("1"), Ok(true));
        assert_eq!(parse_switch("true"), Ok(true));
        assert_eq!(parse_switch("0"), Ok(false));
        assert_eq!(parse_switch("false"), Ok(false));
        assert_eq!(parse_switch(""), Ok(false));
        for refused in ["yes", "on", "TRUE", "2", "enable"] {
            assert!(parse_switch(refused).is_err(), "{refused} was accepted");
        }
    }
}
