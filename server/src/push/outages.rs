//! The moment a computer "goes offline": the sweeper asks, every sweep, which computers with
//! a running or waiting job have not been heard from within the online window. Each such
//! outage is claimed once (`push_outages` remembers the last contact time it was told for),
//! so its owner hears of it once, from one replica, and again only after the computer came
//! back and went away again.

use tether_protocol::DeviceId;

use crate::clock::Millis;
use crate::error::ApiError;
use crate::store::{on_read, on_tx, stored_id, Store};

/// Most outages one sweep claims; the next sweep takes the rest.
const BATCH: i64 = 200;

/// Claims the outages not told yet of computers silent since before `now - online_window`
/// whose account has a subscription that wants to hear it; returns those computers.
///
/// # Errors
/// A database error (nothing is claimed then).
pub async fn claim(
    store: &Store,
    now: Millis,
    online_window: Millis,
) -> Result<Vec<DeviceId>, ApiError> {
    let candidates = on_read!(store, |pool| sqlx::query_as::<_, (String, Millis)>(
        "SELECT d.id, d.last_seen_at FROM devices d \
         WHERE d.revoked_at IS NULL AND d.last_seen_at IS NOT NULL AND d.last_seen_at < $1 \
         AND EXISTS (SELECT 1 FROM jobs j WHERE j.device_id = d.id \
                     AND j.state IN ('running', 'waiting')) \
         AND EXISTS (SELECT 1 FROM push_subscriptions s WHERE s.account_id = d.account_id \
                     AND s.wants_device_offline = 1) \
         AND NOT EXISTS (SELECT 1 FROM push_outages o WHERE o.device_id = d.id \
                         AND o.last_seen_at = d.last_seen_at) \
         ORDER BY d.last_seen_at LIMIT $2"
    )
    .bind(now - online_window)
    .bind(BATCH)
    .fetch_all(pool)
    .await)?;
    if candidates.is_empty() {
        return Ok(Vec::new());
    }
    let mut tx = store.begin().await?;
    let mut claimed = Vec::new();
    for (device_id, last_seen_at) in candidates {
        // Only the replica whose write changes the row tells the owner.
        let won = on_tx!(&mut tx, |conn| sqlx::query(
            "INSERT INTO push_outages (device_id, last_seen_at) VALUES ($1, $2) \
             ON CONFLICT (device_id) DO UPDATE SET last_seen_at = excluded.last_seen_at \
             WHERE push_outages.last_seen_at <> excluded.last_seen_at"
        )
        .bind(&device_id)
        .bind(last_seen_at)
        .execute(conn)
        .await
        .map(|done| done.rows_affected()))?;
        if won == 1 {
            claimed.push(stored_id(device_id)?);
        }
    }
    tx.commit().await?;
    Ok(claimed)
}
