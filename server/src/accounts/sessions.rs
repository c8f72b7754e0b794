//! Browser sessions as their person sees them: listed with where and when each was last
//! used, ended one by one or all but the current one (also by a password change, in
//! [`super::change_password`]).
//!
//! Where is coarse on purpose: a browser family and a platform read from the User-Agent,
//! and the client address's network (IPv4 /24, IPv6 /48). A session's last use (and where)
//! is written at most once per [`LAST_USED_EVERY_SECS`], so requests do not each cost a
//! write. Sessions are not remembered by any replica: every request reads its session from
//! the database, so a deleted row is an ended session everywhere at once.

use std::net::IpAddr;

use tether_protocol::auth::Session;
use tether_protocol::{AccountId, SessionId, UserId};

use crate::clock::{secs, to_time, Millis};
use crate::error::ApiError;
use crate::store::{on_read, on_tx, stored_id, Store, Tx};

/// A session's last use is written at most this often.
pub const LAST_USED_EVERY_SECS: u64 = 60;

/// Where a request came from, as coarse as a session keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub(super) browser: &'static str,
    pub(super) platform: &'static str,
    pub(super) address: String,
}

impl Seen {
    pub fn new(user_agent: Option<&str>, address: IpAddr) -> Seen {
        let user_agent = user_agent.unwrap_or_default();
        Seen {
            browser: browser(user_agent),
            platform: platform(user_agent),
            address: network(address),
        }
    }
}

/// A few families, by the tokens each browser puts in its User-Agent. Order matters: Edge
/// and Opera also say `Chrome`, and Chrome also says `Safari`.
fn browser(user_agent: &str) -> &'static str {
    let has = |token: &str| user_agent.contains(token);
    if has("Edg/") || has("EdgA/") || has("EdgiOS/") {
        "Edge"
    } else if has("OPR/") || has("Opera") {
        "Opera"
    } else if has("Firefox/") || has("FxiOS/") {
        "Firefox"
    } else if has("Chrome/") || has("CriOS/") || has("Chromium/") {
        "Chrome"
    } else if has("Safari/") && has("Version/") {
        "Safari"
    } else {
        "Other"
    }
}

/// Order matters: Android says `Linux`, an iPhone says `like Mac OS X`.
fn platform(user_agent: &str) -> &'static str {
    let has = |token: &str| user_agent.contains(token);
    if has("Android") {
        "Android"
    } else if has("iPhone") || has("iPad") || has("iPod") {
        "iOS"
    } else if has("Windows") {
        "Windows"
    } else if has("CrOS") {
        "ChromeOS"
    } else if has("Macintosh") || has("Mac OS X") {
        "macOS"
    } else if has("Linux") || has("X11") {
        "Linux"
    } else {
        "Other"
    }
}

/// The address's network: enough to tell home from elsewhere, not the device.
fn network(address: IpAddr) -> String {
    match address.to_canonical() {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            format!("{a}.{b}.{c}.0/24")
        }
        IpAddr::V6(v6) => {
            let [a, b, c, ..] = v6.segments();
            format!("{}/48", std::net::Ipv6Addr::new(a, b, c, 0, 0, 0, 0, 0))
        }
    }
}

/// Writes a session's last use and where, unless another request just did. A failure is
/// logged, not answered: the request itself is fine.
pub(super) async fn note_use(store: &Store, id: &str, last_used_at: Millis, seen: &Seen) {
    let now = store.now();
    if now - last_used_at < secs(LAST_USED_EVERY_SECS) {
        return;
    }
    let written = async {
        let mut tx = store.begin().await?;
        on_tx!(&mut tx, |conn| sqlx::query(
            "UPDATE sessions SET last_used_at = $1, browser = $2, platform = $3, address = $4 \
             WHERE id = $5 AND last_used_at <= $6"
        )
        .bind(now)
        .bind(seen.browser)
        .bind(seen.platform)
        .bind(&seen.address)
        .bind(id)
        .bind(now - secs(LAST_USED_EVERY_SECS))
        .execute(conn)
        .await
        .map(|done| done.rows_affected()))?;
        tx.commit().await
    }
    .await;
    if let Err(error) = written {
        tracing::warn!(session_id = id, %error, "noting a session's use failed");
    }
}

/// The user's sessions that have not expired, the most recently used first; `current` is
/// marked.
///
/// # Errors
/// A database error.
pub async fn list(
    store: &Store,
    account_id: &AccountId,
    user_id: &UserId,
    current: Option<&SessionId>,
) -> Result<Vec<Session>, ApiError> {
    let rows = on_read!(store, |pool| sqlx::query_as::<_, SessionRow>(
        "SELECT id, created_at, last_used_at, browser, platform, address FROM sessions \
         WHERE account_id = $1 AND user_id = $2 AND expires_at > $3 \
         ORDER BY last_used_at DESC, id DESC"
    )
    .bind(account_id.as_str())
    .bind(user_id.as_str())
    .bind(store.now())
    .fetch_all(pool)
    .await)?;
    rows.into_iter()
        .map(|row| {
            let id: SessionId = stored_id(row.id)?;
            Ok(Session {
                current: current == Some(&id),
                id,
                created_at: to_time(row.created_at),
                last_used_at: to_time(row.last_used_at.max(row.created_at)),
                browser: known(row.browser),
                platform: known(row.platform),
                address: row.address,
            })
        })
        .collect()
}

/// A session opened before sessions recorded where they were used, and not used since.
fn known(word: String) -> String {
    if word.is_empty() {
        "Other".to_owned()
    } else {
        word
    }
}

/// Whether the session still holds (not ended, not expired), for a stream it opened.
///
/// # Errors
/// A database error.
pub async fn is_open(store: &Store, id: &SessionId) -> Result<bool, ApiError> {
    // The id, not a constant: PostgreSQL's `1` is an INT4, which does not decode as i64.
    let found = on_read!(store, |pool| sqlx::query_scalar::<_, String>(
        "SELECT id FROM sessions WHERE id = $1 AND expires_at > $2"
    )
    .bind(id.as_str())
    .bind(store.now())
    .fetch_optional(pool)
    .await)?;
    Ok(found.is_some())
}

/// Ends one of the user's sessions: its next request is 401.
///
/// # Errors
/// 404 for an unknown session or another user's, or a database error.
pub async fn end(
    store: &Store,
    account_id: &AccountId,
    user_id: &UserId,
    id: &SessionId,
) -> Result<(), ApiError> {
    let mut tx = store.begin().await?;
    let ended = on_tx!(&mut tx, |conn| sqlx::query(
        "DELETE FROM sessions WHERE id = $1 AND account_id = $2 AND user_id = $3"
    )
    .bind(id.as_str())
    .bind(account_id.as_str())
    .bind(user_id.as_str())
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    if ended == 0 {
        return Err(ApiError::not_found("session"));
    }
    tx.commit().await?;
    tracing::info!(session_id = %id, "session ended");
    Ok(())
}

/// Ends every session of the user but `keep`.
///
/// # Errors
/// A database error.
pub async fn end_others(
    store: &Store,
    account_id: &AccountId,
    user_id: &UserId,
    keep: &SessionId,
) -> Result<(), ApiError> {
    let mut tx = store.begin().await?;
    let ended = end_others_in(&mut tx, account_id, user_id, keep).await?;
    tx.commit().await?;
    tracing::info!(user_id = %user_id, ended, "other sessions ended");
    Ok(())
}

/// [`end_others`] in a transaction; returns how many ended.
pub(super) async fn end_others_in(
    tx: &mut Tx,
    account_id: &AccountId,
    user_id: &UserId,
    keep: &SessionId,
) -> Result<u64, ApiError> {
    let ended = on_tx!(tx, |conn| sqlx::query(
        "DELETE FROM sessions WHERE account_id = $1 AND user_id = $2 AND id <> $3"
    )
    .bind(account_id.as_str())
    .bind(user_id.as_str())
    .bind(keep.as_str())
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    Ok(ended)
}

#[derive(sqlx::FromRow)]
struct SessionRow {
    id: String,
    created_at: Millis,
    last_used_at: Millis,
    browser: String,
    platform: String,
    address: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_agents_read_as_a_few_families() {
        let cases = [
            ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36 Edg/120.0", "Edge", "Windows"),
            ("Mozilla/5.0 (X11; Linux x86_64; rv:121.0) Gecko/20100101 Firefox/121.0", "Firefox", "Linux"),
            ("Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Safari/605.1.15", "Safari", "macOS"),
            ("Mozilla/5.0 (iPhone; CPU iPhone OS 17_1 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.1 Mobile/15E148 Safari/604.1", "Safari", "iOS"),
            ("Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Mobile Safari/537.36", "Chrome", "Android"),
            ("Mozilla/5.0 (X11; CrOS x86_64 14541.0.0) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/120.0 Safari/537.36", "Chrome", "ChromeOS"),
            ("curl/8.4.0", "Other", "Other"),
            ("", "Other", "Other"),
        ];
        for (user_agent, expected_browser, expected_platform) in cases {
            assert_eq!(browser(user_agent), expected_browser, "{user_agent}");
            assert_eq!(platform(user_agent), expected_platform, "{user_agent}");
        }
    }

    #[test]
    fn addresses_are_kept_as_their_network() {
        let at = |text: &str| network(text.parse().unwrap_or(IpAddr::from([0, 0, 0, 0])));
        assert_eq!(at("203.0.113.77"), "203.0.113.0/24");
        assert_eq!(at("::ffff:198.51.100.9"), "198.51.100.0/24");
        assert_eq!(at("2001:db8:1:2:3:4:5:6"), "2001:db8:1::/48");
        assert_eq!(at("::1"), "::/48");
    }
}
