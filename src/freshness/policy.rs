//! When a session goes stale: OpenClaw's daily and idle resets (documented in the parent module).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, FixedOffset, LocalResult, NaiveDate, NaiveDateTime, Offset, TimeZone, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{Error, IdKind, Result};
use crate::freshness::clock::from_millis;
use crate::identity::key::{normalize_channel, PeerKind, SessionKey};
use crate::store::entry::SessionEntry;

/// The hour of the daily reset when none is configured (OpenClaw: 4, local time).
pub(crate) const DEFAULT_RESET_AT_HOUR: u8 = 4;
/// The idle window of idle mode when none is configured (OpenClaw: 60 minutes).
pub(crate) const DEFAULT_IDLE_MINUTES: u32 = 60;

/// How sessions of one kind reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResetMode {
    /// At a fixed hour every day (plus an idle window, if one is set).
    Daily,
    /// After a period without messages.
    Idle,
}

/// The three kinds of conversation a reset setting can be given for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResetType {
    /// Direct messages (OpenClaw 2026.2 calls this `dm`; both are accepted).
    #[serde(alias = "dm")]
    Direct,
    /// Groups and channels.
    Group,
    /// Threads and forum topics.
    Thread,
}

impl ResetType {
    /// The reset type of a session, as OpenClaw's `resolveSessionResetType` decides:
    /// a thread if `is_thread` or the key has a thread or topic segment; else a group if
    /// `is_group` or the key is a group or channel key; else direct.
    pub fn of(key: &SessionKey, is_group: bool, is_thread: bool) -> Self {
        if is_thread || key.is_thread() {
            ResetType::Thread
        } else if is_group || key.peer_kind().is_some_and(PeerKind::is_group) {
            ResetType::Group
        } else {
            ResetType::Direct
        }
    }
}

/// One reset setting as OpenClaw writes it: `{mode, atHour, idleMinutes}`, every field
/// optional. Settings are merged field by field (see [`ResetConfig::policy`]).
///
/// Read as leniently as OpenClaw applies it: an `atHour` outside 0–23 is clamped, a
/// fraction floored, and anything but a number means the default hour (4); an
/// `idleMinutes` fraction is floored. Each correction is logged as a warning.
///
/// ```
/// use agent_sessions::freshness::ResetSpec;
///
/// let spec: ResetSpec = serde_json::from_str(r#"{"atHour": 30, "idleMinutes": 90.5}"#)?;
/// assert_eq!((spec.at_hour, spec.idle_minutes), (Some(23), Some(90)));
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResetSpec {
    /// Daily or idle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<ResetMode>,
    /// The hour of the daily reset, 0–23 (larger values are clamped).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient_at_hour"
    )]
    pub at_hour: Option<u8>,
    /// The idle window in minutes; `0` means never expire by inactivity (OpenClaw 3.x).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient_idle_minutes"
    )]
    pub idle_minutes: Option<u32>,
}

/// An `atHour` value as OpenClaw's `normalizeAtHour` reads it: a number is floored and
/// clamped to 0–23; anything else (a string, `true`, an object) is the default hour,
/// [`DEFAULT_RESET_AT_HOUR`]. `null` is no value. A value that had to be corrected is
/// logged as a warning.
pub(crate) fn normalize_at_hour(value: &serde_json::Value) -> Option<u8> {
    if value.is_null() {
        return None;
    }
    let Some(number) = value.as_f64() else {
        tracing::warn!(at_hour = %value, default = DEFAULT_RESET_AT_HOUR, "atHour is not a number; using the default hour");
        return Some(DEFAULT_RESET_AT_HOUR);
    };
    let hour = number.floor().clamp(0.0, 23.0) as u8;
    if f64::from(hour) != number {
        tracing::warn!(at_hour = %value, used = hour, "atHour is not a whole hour from 0 to 23; floored and clamped");
    }
    Some(hour)
}

/// An `idleMinutes` value as OpenClaw reads it: a number is floored, a negative one
/// becomes 1 (OpenClaw's `max(minutes, 1)`) and one beyond `u32::MAX` is clamped;
/// `0` stays 0 (never expire). Anything else, `null` included, is no value. A value that
/// had to be corrected is logged as a warning.
pub(crate) fn normalize_idle_minutes(value: &serde_json::Value) -> Option<u32> {
    if value.is_null() {
        return None;
    }
    let Some(number) = value.as_f64() else {
        tracing::warn!(idle_minutes = %value, "idleMinutes is not a number; ignored");
        return None;
    };
    let floored = number.floor();
    let minutes = if floored < 0.0 {
        1
    } else {
        floored.min(f64::from(u32::MAX)) as u32
    };
    if f64::from(minutes) != number {
        tracing::warn!(idle_minutes = %value, used = minutes, "idleMinutes is not a whole number of minutes; corrected");
    }
    Some(minutes)
}

fn lenient_at_hour<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u8>, D::Error> {
    serde_json::Value::deserialize(deserializer).map(|value| normalize_at_hour(&value))
}

fn lenient_idle_minutes<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<u32>, D::Error> {
    serde_json::Value::deserialize(deserializer).map(|value| normalize_idle_minutes(&value))
}

impl ResetSpec {
    /// Daily at `at_hour`.
    pub fn daily(at_hour: u8) -> Self {
        ResetSpec {
            mode: Some(ResetMode::Daily),
            at_hour: Some(at_hour),
            idle_minutes: None,
        }
    }

    /// After `minutes` without messages.
    pub fn idle(minutes: u32) -> Self {
        ResetSpec {
            mode: Some(ResetMode::Idle),
            at_hour: None,
            idle_minutes: Some(minutes),
        }
    }

    /// Adds an idle window (to a daily setting: whichever expires first).
    pub fn with_idle_minutes(mut self, minutes: u32) -> Self {
        self.idle_minutes = Some(minutes);
        self
    }
}

/// The effective reset policy of one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResetPolicy {
    /// The hour of the daily reset, if the session resets daily.
    pub daily_at_hour: Option<u8>,
    /// The idle window, if the session resets after inactivity.
    pub idle: Option<Duration>,
}

impl ResetPolicy {
    /// A policy under which sessions never go stale.
    pub const NEVER: ResetPolicy = ResetPolicy {
        daily_at_hour: None,
        idle: None,
    };

    /// Evaluates a session last active at `updated_at_ms` (OpenClaw's
    /// `evaluateSessionFreshness`): stale when it was last active before the most recent
    /// daily boundary, or when `now` is past its idle expiry; whichever came first is
    /// the reason.
    pub fn evaluate(&self, updated_at_ms: u64, now: DateTime<Utc>, zone: &Zone) -> Freshness {
        let updated = from_millis(updated_at_ms);
        let boundaries = self
            .daily_at_hour
            .map(|hour| zone.daily_boundaries(now, hour));
        let idle_expiry = self.idle.map(|idle| {
            updated + chrono::Duration::from_std(idle).unwrap_or(chrono::Duration::MAX)
        });
        let stale_daily = boundaries
            .map(|(last, _)| last)
            .filter(|last| updated < *last);
        let stale_idle = idle_expiry.filter(|expiry| now > *expiry);
        match (stale_daily, stale_idle) {
            (Some(daily), Some(idle)) if idle < daily => Freshness::stale(StaleReason::Idle, idle),
            (Some(daily), _) => Freshness::stale(StaleReason::Daily, daily),
            (None, Some(idle)) => Freshness::stale(StaleReason::Idle, idle),
            (None, None) => {
                let next_daily = boundaries.map(|(_, next)| next);
                let expires_at = match (next_daily, idle_expiry) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                Freshness::Fresh { expires_at }
            }
        }
    }
}

/// Why a session went stale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StaleReason {
    /// The daily reset hour passed since its last activity.
    Daily,
    /// It was idle longer than the idle window.
    Idle,
}

impl fmt::Display for StaleReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StaleReason::Daily => "daily",
            StaleReason::Idle => "idle",
        })
    }
}

/// The verdict of a [`FreshnessPolicy`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freshness {
    /// The session may continue.
    Fresh {
        /// When it would go stale without further activity (`None`: never).
        expires_at: Option<DateTime<Utc>>,
    },
    /// The session is over.
    Stale {
        /// Why.
        reason: StaleReason,
        /// When it went stale.
        expired_at: DateTime<Utc>,
    },
}

impl Freshness {
    fn stale(reason: StaleReason, expired_at: DateTime<Utc>) -> Self {
        Freshness::Stale { reason, expired_at }
    }

    /// Whether the session may continue.
    pub fn is_fresh(&self) -> bool {
        matches!(self, Freshness::Fresh { .. })
    }
}

/// What a [`FreshnessPolicy`] sees of a session.
#[derive(Debug, Clone, Copy)]
pub struct FreshnessInput<'a> {
    /// The session's key.
    pub key: &'a SessionKey,
    /// The session's entry (`updatedAt` is its last real activity).
    pub entry: &'a SessionEntry,
    /// Direct, group or thread.
    pub reset_type: ResetType,
    /// The channel the message came from, for per-channel settings.
    pub channel: Option<&'a str>,
}

/// Decides whether a session is still fresh: a pure function of the session and now.
///
/// [`ResetConfig`] is OpenClaw's policy; implement this for other rules (business
/// hours, a reset every Monday, …).
pub trait FreshnessPolicy: Send + Sync + fmt::Debug {
    /// Fresh or stale, at `now`.
    fn evaluate(&self, session: &FreshnessInput<'_>, now: DateTime<Utc>) -> Freshness;
}

/// OpenClaw's reset settings and the time zone daily resets are computed in.
///
/// The default is OpenClaw's: daily at 04:00 host-local time, no idle window.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ResetConfig {
    /// The default setting (`session.reset`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reset: Option<ResetSpec>,
    /// Settings by chat type (`session.resetByType`).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub reset_by_type: BTreeMap<ResetType, ResetSpec>,
    /// Settings by channel (`session.resetByChannel`); a channel setting replaces the
    /// default and the chat-type settings.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub reset_by_channel: BTreeMap<String, ResetSpec>,
    /// OpenClaw's legacy `session.idleMinutes`: idle mode when nothing else is set, an
    /// extra idle window otherwise. Read as [`ResetSpec`] reads `idleMinutes`.
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient_idle_minutes"
    )]
    pub idle_minutes: Option<u32>,
    /// The zone of the daily reset hour.
    pub time_zone: Zone,
}

impl ResetConfig {
    /// Sets the default.
    pub fn reset(mut self, spec: ResetSpec) -> Self {
        self.reset = Some(spec);
        self
    }

    /// Sets the setting for one chat type.
    pub fn by_type(mut self, reset_type: ResetType, spec: ResetSpec) -> Self {
        self.reset_by_type.insert(reset_type, spec);
        self
    }

    /// Sets the setting for one channel.
    pub fn by_channel(mut self, channel: &str, spec: ResetSpec) -> Self {
        let channel = normalize_channel(channel).unwrap_or_default();
        self.reset_by_channel.insert(channel, spec);
        self
    }

    /// Sets the time zone of daily resets.
    pub fn time_zone(mut self, zone: Zone) -> Self {
        self.time_zone = zone;
        self
    }

    /// The policy of a session of `reset_type` on `channel`, resolved as OpenClaw's
    /// `resolveSessionResetPolicy` does: field by field, chat type over default, and a
    /// channel setting, when there is one, replacing both.
    pub fn policy(&self, reset_type: ResetType, channel: Option<&str>) -> ResetPolicy {
        let channel_spec = channel.and_then(|channel| {
            let normalized = normalize_channel(channel)?;
            self.reset_by_channel.get(&normalized).or_else(|| {
                self.reset_by_channel
                    .iter()
                    .find(|(name, _)| name.eq_ignore_ascii_case(&normalized))
                    .map(|(_, spec)| spec)
            })
        });
        let (base, typed, legacy_idle, has_explicit) = match channel_spec {
            Some(spec) => (Some(spec), None, None, true),
            None => (
                self.reset.as_ref(),
                self.reset_by_type.get(&reset_type),
                self.idle_minutes,
                self.reset.is_some() || !self.reset_by_type.is_empty(),
            ),
        };
        let field =
            |get: fn(&ResetSpec) -> Option<u32>| typed.and_then(get).or_else(|| base.and_then(get));
        let mode = typed
            .and_then(|s| s.mode)
            .or_else(|| base.and_then(|s| s.mode))
            .unwrap_or(if !has_explicit && legacy_idle.is_some() {
                ResetMode::Idle
            } else {
                ResetMode::Daily
            });
        let at_hour = field(|s| s.at_hour.map(u32::from))
            .map_or(DEFAULT_RESET_AT_HOUR, |hour| hour.min(23) as u8);
        let idle_minutes = match field(|s| s.idle_minutes).or(legacy_idle) {
            Some(0) => None,
            Some(minutes) => Some(minutes),
            None if mode == ResetMode::Idle => Some(DEFAULT_IDLE_MINUTES),
            None => None,
        };
        ResetPolicy {
            daily_at_hour: (mode == ResetMode::Daily).then_some(at_hour),
            idle: idle_minutes.map(|m| Duration::from_secs(u64::from(m) * 60)),
        }
    }
}

impl FreshnessPolicy for ResetConfig {
    fn evaluate(&self, session: &FreshnessInput<'_>, now: DateTime<Utc>) -> Freshness {
        self.policy(session.reset_type, session.channel).evaluate(
            session.entry.updated_at,
            now,
            &self.time_zone,
        )
    }
}

/// The time zone of daily resets.
///
/// Written as a string in configuration: `local` (the default, the host's zone, as
/// OpenClaw uses), `utc`, an IANA name such as `America/New_York`, or a fixed offset
/// such as `+05:30`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Zone {
    /// The host's local zone.
    #[default]
    Local,
    /// UTC.
    Utc,
    /// An IANA zone.
    Named(chrono_tz::Tz),
    /// A fixed offset from UTC.
    Fixed(FixedOffset),
}

impl Zone {
    /// Parses `local`, `host`, `utc`, `gmt`, an IANA name, or `±HH:MM`.
    pub fn parse(value: &str) -> Result<Self> {
        let trimmed = value.trim();
        match trimmed.to_ascii_lowercase().as_str() {
            "local" | "host" => return Ok(Zone::Local),
            "utc" | "gmt" | "z" => return Ok(Zone::Utc),
            _ => {}
        }
        if let Ok(tz) = trimmed.parse::<chrono_tz::Tz>() {
            return Ok(Zone::Named(tz));
        }
        if let Ok(offset) = trimmed.parse::<FixedOffset>() {
            return Ok(Zone::Fixed(offset));
        }
        Err(Error::invalid_id(
            IdKind::TimeZone,
            value,
            "not `local`, `utc`, an IANA time zone name or a `+HH:MM` offset",
        ))
    }

    /// The most recent daily boundary at `at_hour:00` local time at or before `now`, and
    /// the one after it (OpenClaw's `resolveDailyResetAtMs`, DST-aware: boundaries are
    /// a calendar day apart, not 24 hours).
    pub(crate) fn daily_boundaries(
        &self,
        now: DateTime<Utc>,
        at_hour: u8,
    ) -> (DateTime<Utc>, DateTime<Utc>) {
        let hour = u32::from(at_hour.min(23));
        match self {
            Zone::Local => boundaries_in(&chrono::Local, now, hour),
            Zone::Utc => boundaries_in(&Utc, now, hour),
            Zone::Named(tz) => boundaries_in(tz, now, hour),
            Zone::Fixed(offset) => boundaries_in(offset, now, hour),
        }
    }
}

impl fmt::Display for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Zone::Local => f.write_str("local"),
            Zone::Utc => f.write_str("utc"),
            Zone::Named(tz) => f.write_str(tz.name()),
            Zone::Fixed(offset) => write!(f, "{offset}"),
        }
    }
}

impl FromStr for Zone {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Zone::parse(s)
    }
}

impl Serialize for Zone {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Zone {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(deserializer)?;
        Zone::parse(&raw).map_err(serde::de::Error::custom)
    }
}

fn boundaries_in<Z: TimeZone>(
    zone: &Z,
    now: DateTime<Utc>,
    hour: u32,
) -> (DateTime<Utc>, DateTime<Utc>) {
    let at =
        |date: NaiveDate| local_instant(zone, date.and_hms_opt(hour, 0, 0).expect("hour ≤ 23"));
    let today = now.with_timezone(zone).date_naive();
    let today_boundary = at(today);
    let (last_date, last) = if now < today_boundary {
        let yesterday = today.pred_opt().unwrap_or(today);
        (yesterday, at(yesterday))
    } else {
        (today, today_boundary)
    };
    let next = at(last_date.succ_opt().unwrap_or(last_date));
    (last, next)
}

/// The instant a local wall-clock time names: the earlier one when the clock is set
/// back, and for a time the clock skips (spring forward), the time read with the offset
/// before the gap, which lands just after it (as JavaScript's `Date#setHours` does).
fn local_instant<Z: TimeZone>(zone: &Z, wall: NaiveDateTime) -> DateTime<Utc> {
    match zone.from_local_datetime(&wall) {
        LocalResult::Single(instant) | LocalResult::Ambiguous(instant, _) => {
            instant.with_timezone(&Utc)
        }
        LocalResult::None => {
            let before = zone
                .from_local_datetime(&(wall - chrono::Duration::hours(3)))
                .earliest()
                .map(|instant| instant.offset().fix())
                .unwrap_or_else(|| Utc.fix());
            (wall - chrono::Duration::seconds(i64::from(before.local_minus_utc()))).and_utc()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    fn ms(text: &str) -> u64 {
        crate::freshness::clock::to_millis(utc(text))
    }

    #[test]
    fn daily_boundary_before_at_and_after_the_hour() {
        let zone = Zone::Utc;
        let policy = ResetPolicy {
            daily_at_hour: Some(4),
            idle: None,
        };
        let updated = ms("2026-03-10T03:30:00Z");
        // (now, fresh?)
        for (now, fresh) in [
            ("2026-03-10T03:59:59.999Z", true),
            ("2026-03-10T04:00:00Z", false),
            ("2026-03-10T04:00:00.001Z", false),
            ("2026-03-11T03:00:00Z", false),
        ] {
            let verdict = policy.evaluate(updated, utc(now), &zone);
            assert_eq!(verdict.is_fresh(), fresh, "{now}: {verdict:?}");
        }
        assert_eq!(
            policy.evaluate(updated, utc("2026-03-10T04:00:00Z"), &zone),
            Freshness::Stale {
                reason: StaleReason::Daily,
                expired_at: utc("2026-03-10T04:00:00Z")
            }
        );
        // Activity exactly at the boundary belongs to the new day.
        let at_boundary = ms("2026-03-10T04:00:00Z");
        assert!(policy
            .evaluate(at_boundary, utc("2026-03-10T12:00:00Z"), &zone)
            .is_fresh());
    }

    #[test]
    fn daily_boundary_in_a_non_utc_zone_and_across_a_date_change() {
        let zone = Zone::parse("America/New_York").unwrap();
        // 04:00 in New York on 2026-01-15 (EST, UTC-5) is 09:00 UTC.
        let (last, next) = zone.daily_boundaries(utc("2026-01-15T10:00:00Z"), 4);
        assert_eq!(last, utc("2026-01-15T09:00:00Z"));
        assert_eq!(next, utc("2026-01-16T09:00:00Z"));
        // 02:00 UTC on the 15th is still the 14th in New York, before 04:00 there.
        let (last, _) = zone.daily_boundaries(utc("2026-01-15T02:00:00Z"), 4);
        assert_eq!(last, utc("2026-01-14T09:00:00Z"));
        // Across New Year.
        let (last, _) = zone.daily_boundaries(utc("2026-01-01T08:59:00Z"), 4);
        assert_eq!(last, utc("2025-12-31T09:00:00Z"));
    }

    #[test]
    fn daily_boundaries_follow_daylight_saving_time() {
        let zone = Zone::parse("America/New_York").unwrap();
        // DST starts 2026-03-08 at 02:00 EST: 04:00 that day is EDT, UTC-4.
        let (last, _) = zone.daily_boundaries(utc("2026-03-08T12:00:00Z"), 4);
        assert_eq!(last, utc("2026-03-08T08:00:00Z"));
        let (last, _) = zone.daily_boundaries(utc("2026-03-07T12:00:00Z"), 4);
        assert_eq!(last, utc("2026-03-07T09:00:00Z"));
        // A reset hour inside the skipped hour lands just after the gap (03:00 EDT).
        let (last, _) = zone.daily_boundaries(utc("2026-03-08T12:00:00Z"), 2);
        assert_eq!(last, utc("2026-03-08T07:00:00Z"));
        // DST ends 2026-11-01: 01:00 happens twice; the first one counts.
        let (last, _) = zone.daily_boundaries(utc("2026-11-01T12:00:00Z"), 1);
        assert_eq!(last, utc("2026-11-01T05:00:00Z"));
    }

    #[test]
    fn idle_expiry_is_strictly_after_the_window() {
        let policy = ResetPolicy {
            daily_at_hour: None,
            idle: Some(Duration::from_secs(60 * 60)),
        };
        let updated = ms("2026-03-10T10:00:00Z");
        assert!(policy
            .evaluate(updated, utc("2026-03-10T11:00:00Z"), &Zone::Utc)
            .is_fresh());
        assert_eq!(
            policy.evaluate(updated, utc("2026-03-10T11:00:00.001Z"), &Zone::Utc),
            Freshness::Stale {
                reason: StaleReason::Idle,
                expired_at: utc("2026-03-10T11:00:00Z")
            }
        );
        assert_eq!(
            policy.evaluate(updated, utc("2026-03-10T10:30:00Z"), &Zone::Utc),
            Freshness::Fresh {
                expires_at: Some(utc("2026-03-10T11:00:00Z"))
            }
        );
    }

    #[test]
    fn combined_daily_and_idle_report_whichever_expired_first() {
        let policy = ResetPolicy {
            daily_at_hour: Some(4),
            idle: Some(Duration::from_secs(30 * 60)),
        };
        // Idle expired at 03:30, before the 04:00 boundary.
        let verdict = policy.evaluate(
            ms("2026-03-10T03:00:00Z"),
            utc("2026-03-10T05:00:00Z"),
            &Zone::Utc,
        );
        assert_eq!(
            verdict,
            Freshness::Stale {
                reason: StaleReason::Idle,
                expired_at: utc("2026-03-10T03:30:00Z")
            }
        );
        // The boundary came first.
        let verdict = policy.evaluate(
            ms("2026-03-10T03:50:00Z"),
            utc("2026-03-10T05:00:00Z"),
            &Zone::Utc,
        );
        assert_eq!(
            verdict,
            Freshness::Stale {
                reason: StaleReason::Daily,
                expired_at: utc("2026-03-10T04:00:00Z")
            }
        );
        // Fresh: expires at the earlier of the next boundary and the idle expiry.
        let verdict = policy.evaluate(
            ms("2026-03-10T05:00:00Z"),
            utc("2026-03-10T05:10:00Z"),
            &Zone::Utc,
        );
        assert_eq!(
            verdict,
            Freshness::Fresh {
                expires_at: Some(utc("2026-03-10T05:30:00Z"))
            }
        );
    }

    #[test]
    fn policy_resolution_follows_openclaw() {
        let minutes = |m: u64| Some(Duration::from_secs(m * 60));
        // (config, reset type, channel) → (daily hour, idle)
        type Case<'a> = (
            ResetConfig,
            ResetType,
            Option<&'a str>,
            Option<u8>,
            Option<Duration>,
        );
        let cases: Vec<Case<'_>> = vec![
            (
                ResetConfig::default(),
                ResetType::Direct,
                None,
                Some(4),
                None,
            ),
            (
                ResetConfig {
                    idle_minutes: Some(45),
                    ..Default::default()
                },
                ResetType::Direct,
                None,
                None,
                minutes(45),
            ),
            (
                ResetConfig {
                    idle_minutes: Some(45),
                    ..Default::default()
                }
                .reset(ResetSpec::daily(6)),
                ResetType::Direct,
                None,
                Some(6),
                minutes(45),
            ),
            (
                ResetConfig::default().reset(ResetSpec {
                    mode: Some(ResetMode::Idle),
                    ..Default::default()
                }),
                ResetType::Group,
                None,
                None,
                minutes(60),
            ),
            (
                ResetConfig::default()
                    .reset(ResetSpec::daily(3).with_idle_minutes(90))
                    .by_type(
                        ResetType::Group,
                        ResetSpec {
                            at_hour: Some(5),
                            ..Default::default()
                        },
                    ),
                ResetType::Group,
                None,
                Some(5),
                minutes(90),
            ),
            (
                ResetConfig {
                    idle_minutes: Some(45),
                    ..Default::default()
                }
                .by_type(ResetType::Group, ResetSpec::idle(120))
                .by_channel("WhatsApp", ResetSpec::idle(30)),
                ResetType::Group,
                Some("whatsapp"),
                None,
                minutes(30),
            ),
            (
                ResetConfig::default().by_channel("slack", ResetSpec::daily(2)),
                ResetType::Thread,
                Some("slack"),
                Some(2),
                None,
            ),
            (
                ResetConfig::default().reset(ResetSpec::idle(0)),
                ResetType::Direct,
                None,
                None,
                None,
            ),
            (
                ResetConfig::default().reset(ResetSpec {
                    at_hour: Some(99),
                    ..Default::default()
                }),
                ResetType::Direct,
                None,
                Some(23),
                None,
            ),
        ];
        for (index, (config, reset_type, channel, hour, idle)) in cases.into_iter().enumerate() {
            let policy = config.policy(reset_type, channel);
            assert_eq!(
                (policy.daily_at_hour, policy.idle),
                (hour, idle),
                "case {index}: {config:?}"
            );
        }
    }

    #[test]
    fn reset_specs_are_read_as_leniently_as_openclaw_applies_them() {
        // (the JSON of a setting) → (atHour, idleMinutes) as read
        let cases: &[(&str, Option<u8>, Option<u32>)] = &[
            (r#"{}"#, None, None),
            (r#"{"atHour": null, "idleMinutes": null}"#, None, None),
            (r#"{"atHour": 0}"#, Some(0), None),
            (r#"{"atHour": 23}"#, Some(23), None),
            (r#"{"atHour": -3}"#, Some(0), None),
            (r#"{"atHour": -0.5}"#, Some(0), None),
            (r#"{"atHour": 4.7}"#, Some(4), None),
            (r#"{"atHour": 23.99}"#, Some(23), None),
            (r#"{"atHour": 30}"#, Some(23), None),
            (r#"{"atHour": 1e300}"#, Some(23), None),
            (r#"{"atHour": "5"}"#, Some(4), None),
            (r#"{"atHour": true}"#, Some(4), None),
            (r#"{"atHour": [5]}"#, Some(4), None),
            (r#"{"idleMinutes": 30}"#, None, Some(30)),
            (r#"{"idleMinutes": 90.9}"#, None, Some(90)),
            (r#"{"idleMinutes": 0}"#, None, Some(0)),
            (r#"{"idleMinutes": 0.5}"#, None, Some(0)),
            (r#"{"idleMinutes": -5}"#, None, Some(1)),
            (r#"{"idleMinutes": 1e12}"#, None, Some(u32::MAX)),
            (r#"{"idleMinutes": "60"}"#, None, None),
            (r#"{"idleMinutes": {}}"#, None, None),
            (r#"{"atHour": 4.5, "idleMinutes": 45.5}"#, Some(4), Some(45)),
        ];
        for (json, at_hour, idle_minutes) in cases {
            let spec: ResetSpec = serde_json::from_str(json).unwrap();
            assert_eq!(
                (spec.at_hour, spec.idle_minutes),
                (*at_hour, *idle_minutes),
                "{json}"
            );
        }
        // The legacy top-level idleMinutes is read the same way.
        for (json, idle_minutes) in [
            (r#"{"idleMinutes": 45.5}"#, Some(45)),
            (r#"{"idleMinutes": -1}"#, Some(1)),
            (r#"{"idleMinutes": "soon"}"#, None),
        ] {
            let config: ResetConfig = serde_json::from_str(json).unwrap();
            assert_eq!(config.idle_minutes, idle_minutes, "{json}");
        }
        // A whole config with a bad hour still loads, and resolves to the clamped hour.
        let config: ResetConfig =
            serde_json::from_str(r#"{"reset":{"mode":"daily","atHour":30}}"#).unwrap();
        assert_eq!(
            config.policy(ResetType::Direct, None).daily_at_hour,
            Some(23)
        );
    }

    #[test]
    fn reset_types_come_from_the_key_and_the_message() {
        let key = |raw: &str| SessionKey::parse(raw).unwrap();
        assert_eq!(
            ResetType::of(&key("agent:main:main"), false, false),
            ResetType::Direct
        );
        assert_eq!(
            ResetType::of(&key("agent:main:main"), true, false),
            ResetType::Group
        );
        assert_eq!(
            ResetType::of(&key("agent:main:slack:channel:c1"), false, false),
            ResetType::Group
        );
        assert_eq!(
            ResetType::of(&key("agent:main:slack:channel:c1:thread:t"), false, false),
            ResetType::Thread
        );
        assert_eq!(
            ResetType::of(&key("agent:main:main"), false, true),
            ResetType::Thread
        );
    }

    #[test]
    fn config_reads_openclaw_json() {
        let config: ResetConfig = serde_json::from_str(
            r#"{"reset":{"mode":"daily","atHour":5},"resetByType":{"dm":{"mode":"idle","idleMinutes":20}},"resetByChannel":{"whatsapp":{"mode":"idle","idleMinutes":30}},"timeZone":"Europe/Berlin"}"#,
        )
        .unwrap();
        assert_eq!(config.time_zone, Zone::parse("Europe/Berlin").unwrap());
        assert_eq!(
            config.policy(ResetType::Direct, None).idle,
            Some(Duration::from_secs(20 * 60))
        );
        assert_eq!(config.policy(ResetType::Group, None).daily_at_hour, Some(5));
        assert!(Zone::parse("Mars/Olympus").is_err());
        assert_eq!(Zone::parse("+05:30").unwrap().to_string(), "+05:30");
    }
}

/// The examples that documented these crate-private helpers, kept as tests.
#[cfg(test)]
mod doc_examples {
    #[test]
    fn normalize_at_hour() {
        use crate::freshness::policy::normalize_at_hour;
        use serde_json::json;

        assert_eq!(normalize_at_hour(&json!(-3)), Some(0));
        assert_eq!(normalize_at_hour(&json!(4.7)), Some(4));
        assert_eq!(normalize_at_hour(&json!(30)), Some(23));
        assert_eq!(normalize_at_hour(&json!("noon")), Some(4));
        assert_eq!(normalize_at_hour(&json!(null)), None);
    }

    #[test]
    fn normalize_idle_minutes() {
        use crate::freshness::policy::normalize_idle_minutes;
        use serde_json::json;

        assert_eq!(normalize_idle_minutes(&json!(90.9)), Some(90));
        assert_eq!(normalize_idle_minutes(&json!(-5)), Some(1));
        assert_eq!(normalize_idle_minutes(&json!(0)), Some(0));
        assert_eq!(normalize_idle_minutes(&json!("an hour")), None);
    }
}
