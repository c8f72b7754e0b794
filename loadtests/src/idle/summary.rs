//! An idle-fleet run's figures: one markdown row, its failures by reason, and what they
//! extrapolate to for a larger fleet.

use std::collections::BTreeMap;

const MIB: f64 = 1024.0 * 1024.0;

/// Everything one run measured.
#[derive(Debug, Default)]
pub struct Summary {
    pub label: String,
    pub devices: usize,
    pub workers: usize,
    pub pairing_secs: f64,
    /// Seconds from the storm's start until the last device finished (or the give-up cap).
    pub storm_secs: f64,
    /// Devices that had not finished when the generator stopped counting.
    pub gave_up: usize,
    pub give_up_secs: u64,
    /// Failed attempts and dropped streams, by reason (storm and window).
    pub failures: BTreeMap<String, u64>,
    /// Heartbeat latencies in the steady window, ms.
    /// None when no heartbeat fell in the window (an idle fleet's pace may be longer).
    pub heartbeat_p50: Option<f64>,
    pub heartbeat_p99: Option<f64>,
    pub heartbeats_per_sec: f64,
    /// The busiest second's heartbeats: the agent keeps its interval without jitter, so a
    /// fleet that came back together keeps heartbeating together.
    pub heartbeats_peak: usize,
    pub window_secs: f64,
    pub rss_fresh: u64,
    pub rss_before_storm: u64,
    pub rss_steady: u64,
    /// Server CPU seconds in the steady window.
    pub server_cpu_secs: f64,
    /// Generator CPU seconds (every process) during the storm and in the window.
    pub generator_storm_cpu_secs: f64,
    pub generator_window_cpu_secs: f64,
    pub load_average: Option<f64>,
}

impl Summary {
    pub fn table_header() -> &'static str {
        "| run | devices | generator processes | pairing s (devices/s) | storm s | gave up | failed attempts | heartbeat ms p50 / p99 | heartbeats/s mean / peak | RSS MiB fresh / before storm / steady | RSS/device KiB | server CPU % of a core, idle | server CPU ms per heartbeat | generator CPU % storm / idle | load avg |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    }

    pub fn table_row(&self) -> String {
        format!(
            "| {} | {} | {} | {:.0} ({:.0}) | {:.1} | {} | {} | {} / {} | {:.0} / {} | {:.0} / {:.0} / {:.0} | {:.1} | {:.1} | {} | {:.0} / {:.0} | {} |",
            self.label,
            self.devices,
            self.workers,
            self.pairing_secs,
            self.devices as f64 / self.pairing_secs.max(0.001),
            self.storm_secs,
            self.gave_up,
            self.failures.values().sum::<u64>(),
            or_dash(self.heartbeat_p50, 1),
            or_dash(self.heartbeat_p99, 1),
            self.heartbeats_per_sec,
            self.heartbeats_peak,
            self.rss_fresh as f64 / MIB,
            self.rss_before_storm as f64 / MIB,
            self.rss_steady as f64 / MIB,
            self.rss_per_device_kib(),
            self.server_cpu_percent(),
            or_dash(self.server_ms_per_heartbeat(), 2),
            100.0 * self.generator_storm_cpu_secs / self.storm_secs.max(0.001),
            100.0 * self.generator_window_cpu_secs / self.window_secs.max(0.001),
            self.load_average
                .map_or("-".to_owned(), |load| format!("{load:.1}")),
        )
    }

    /// Resident memory per connected device above the fresh server's.
    pub fn rss_per_device_kib(&self) -> f64 {
        self.rss_steady.saturating_sub(self.rss_fresh) as f64 / 1024.0 / self.devices.max(1) as f64
    }

    pub fn server_cpu_percent(&self) -> f64 {
        100.0 * self.server_cpu_secs / self.window_secs.max(0.001)
    }

    /// The server's CPU in the idle window per heartbeat answered: everything an idle fleet
    /// costs (pings, claims, contact-time writes), counted per heartbeat; none without one.
    pub fn server_ms_per_heartbeat(&self) -> Option<f64> {
        let heartbeats = self.heartbeats_per_sec * self.window_secs;
        (heartbeats >= 1.0).then(|| 1000.0 * self.server_cpu_secs / heartbeats)
    }

    /// The failures by reason, one line.
    pub fn failures_line(&self) -> String {
        let reasons: Vec<String> = self
            .failures
            .iter()
            .map(|(reason, count)| format!("{reason} ×{count}"))
            .collect();
        format!(
            "idle fleet ({}): failed attempts by reason: {}; devices not finished after {} s: {}",
            self.label,
            if reasons.is_empty() {
                "none".to_owned()
            } else {
                reasons.join(", ")
            },
            self.give_up_secs,
            self.gave_up,
        )
    }

    /// What a fleet of `target` devices would take at the measured per-device costs: memory
    /// and idle CPU grow with each connected device; the storm's pace is this machine's
    /// (its cores are shared with the generator).
    pub fn extrapolation_line(&self, target: usize) -> String {
        let scale = target as f64 / self.devices.max(1) as f64;
        let rss_mib =
            (self.rss_fresh as f64 + self.rss_per_device_kib() * 1024.0 * target as f64) / MIB;
        let pace = self.devices as f64 / self.storm_secs.max(0.001);
        format!(
            "idle fleet ({}): extrapolated from {} to {} devices, not measured: RSS ≈ {:.0} MiB \
             (fresh {:.0} MiB + {:.1} KiB per device), idle CPU ≈ {:.0} % of a core \
             ({:.1} % here × {:.1}; {:.0} heartbeats/s), storm ≈ {:.0} s at the {:.0} \
             devices/s measured here",
            self.label,
            self.devices,
            target,
            rss_mib,
            self.rss_fresh as f64 / MIB,
            self.rss_per_device_kib(),
            self.server_cpu_percent() * scale,
            self.server_cpu_percent(),
            scale,
            self.heartbeats_per_sec * scale,
            target as f64 / pace,
            pace,
        )
    }
}

/// `value` with `decimals`, or `-` for none.
fn or_dash(value: Option<f64>, decimals: usize) -> String {
    value.map_or_else(|| "-".to_owned(), |value| format!("{value:.decimals$}"))
}

/// The `q` quantile of `samples` (sorted in place), in their unit.
pub fn quantile(samples: &mut [f64], q: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    samples.sort_by(f64::total_cmp);
    let index = ((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1;
    samples[index]
}
