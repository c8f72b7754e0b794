//! Opaque string ids.
//!
//! Ids are generated as UUID v7 (time-ordered, so indexes stay append-mostly) and travel as
//! strings. Parsing at the edge rejects anything that is not a plausible id, so a hostile
//! path segment never reaches a query.

use std::fmt;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Why a string is not an id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdError;

impl fmt::Display for IdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an id is 1 to 64 characters of letters, digits, '-' and '_'")
    }
}

impl std::error::Error for IdError {}

/// Checks the shape every id shares: short, and only characters safe in a URL path.
fn check_id(raw: &str) -> Result<(), IdError> {
    let shape_ok = !raw.is_empty()
        && raw.len() <= 64
        && raw
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if shape_ok {
        Ok(())
    } else {
        Err(IdError)
    }
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, ToSchema)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// A fresh, time-ordered id.
            pub fn generate() -> Self {
                Self(uuid::Uuid::now_v7().simple().to_string())
            }

            /// Parses an id received from outside.
            ///
            /// # Errors
            /// [`IdError`] when the text is empty, too long or holds other characters.
            pub fn parse(raw: &str) -> Result<Self, IdError> {
                check_id(raw)?;
                Ok(Self(raw.to_owned()))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(raw: String) -> Result<Self, IdError> {
                check_id(&raw)?;
                Ok(Self(raw))
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

id_type!(
    /// A tenant: the unit that owns devices, jobs and decisions.
    AccountId
);
id_type!(
    /// A person who signs in to the web.
    UserId
);
id_type!(
    /// A paired computer.
    DeviceId
);
id_type!(
    /// A unit of work assigned to one device.
    JobId
);
id_type!(
    /// A question a run asked its owner.
    DecisionId
);
id_type!(
    /// An API token (its id, never its secret).
    TokenId
);
id_type!(
    /// A browser session (its id, never its cookie).
    SessionId
);
id_type!(
    /// One sealed secret on its way to a device (`secret_deliveries`).
    DeliveryId
);
id_type!(
    /// A browser's Web Push subscription (`push_subscriptions`).
    SubscriptionId
);
id_type!(
    /// A file attached to a job's task (`attachments`): an upload first, then the job's.
    AttachmentId
);
id_type!(
    /// A shared space: accounts that see each other's space jobs.
    SpaceId
);
id_type!(
    /// An invitation to a space (its id, never its link's secret).
    InvitationId
);

#[cfg(test)]
mod tests {
    use super::*;

    fn check(raw: &str, ok: bool) {
        assert_eq!(JobId::parse(raw).is_ok(), ok, "{raw:?}");
        let json = serde_json::to_string(raw).unwrap_or_default();
        assert_eq!(
            serde_json::from_str::<JobId>(&json).is_ok(),
            ok,
            "{raw:?} via serde"
        );
    }

    #[test]
    fn parses_only_plausible_ids() {
        check("0192f0c1a2b37c3d8e9f", true);
        check("job_1-a", true);
        check("", false);
        check("../etc/passwd", false);
        check("a b", false);
        check("é", false);
        check(&"x".repeat(65), false);
        check(&"x".repeat(64), true);
    }

    #[test]
    fn generated_ids_parse_and_are_ordered() {
        let first = DeviceId::generate();
        let second = DeviceId::generate();
        assert!(DeviceId::parse(first.as_str()).is_ok());
        assert!(first < second);
    }
}
