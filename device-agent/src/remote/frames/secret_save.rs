//! Answering a `secret.save` frame: the sealed box is opened with this device's seal key and
//! stored in the vault ([`vault::receive`]), then the server is told only whether that
//! worked, never the value.

use tether_protocol::secrets::DeliveryAnswer;

use crate::local::seal_key::SealKeyPair;
use crate::local::vault;
use crate::remote::events::SecretDelivery;
use crate::remote::frames::FrameContext;

/// Opens and stores `delivery`'s box (off the async threads), then answers the server.
pub async fn handle(context: FrameContext, delivery: SecretDelivery) {
    let FrameContext {
        client,
        data_dir,
        config,
        ..
    } = context;
    let id = delivery.id.clone();
    let answer = tokio::task::spawn_blocking(move || {
        let refuse = |error: String| DeliveryAnswer {
            saved: false,
            name: delivery.name.clone(),
            error: Some(error),
        };
        let Some(pairing) = config().pairing else {
            return refuse("this computer is not paired".to_owned());
        };
        let key = match SealKeyPair::load(&data_dir) {
            Ok(Some(key)) => key,
            Ok(None) => return refuse("this computer has no seal key".to_owned()),
            Err(err) => return refuse(format!("the seal key cannot be opened: {err:#}")),
        };
        vault::receive(
            &data_dir,
            &delivery.id,
            &key,
            &pairing.device_id,
            &delivery.name,
            &delivery.sealed,
            chrono::Utc::now().timestamp(),
        )
    })
    .await;
    let Ok(answer) = answer else {
        tracing::warn!(delivery = %id, "saving a secret failed");
        return;
    };
    if let Err(err) = client.answer_secret_delivery(&id, &answer).await {
        tracing::warn!(delivery = %id, "secret answer not delivered: {err}");
    }
}
