//! Accounts, sign-in and API tokens.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::ids::{AccountId, SessionId, TokenId, UserId};

/// `POST /api/auth/signup`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SignupParams {
    pub email: String,
    pub password: String,
    pub name: String,
}

/// `POST /api/auth/login`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoginParams {
    pub email: String,
    pub password: String,
}

/// A person who signs in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct User {
    pub id: UserId,
    pub email: String,
    pub name: String,
    /// The platform admin may list and revoke every account's devices.
    pub is_admin: bool,
}

/// The tenant a user belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Account {
    pub id: AccountId,
    pub name: String,
}

/// Answer of signup and `GET /api/me`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Me {
    pub user: User,
    pub account: Account,
}

/// Answer of login.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LoginResponse {
    pub user: User,
}

/// The longest life an API token can be given, in days.
pub const MAX_TOKEN_DAYS: u32 = 365;

/// `POST /api/tokens` (with a browser session only: an API token cannot make tokens).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NewTokenParams {
    pub name: String,
    /// Days until the token stops working, 1 to [`MAX_TOKEN_DAYS`]; absent or null: it
    /// works until it is revoked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 365)]
    pub expires_in_days: Option<i64>,
}

/// A freshly made API token; `token` is shown this once and stored only as a hash.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedToken {
    pub id: TokenId,
    pub name: String,
    pub token: String,
    /// When it stops working; null when it works until revoked.
    #[serde(default)]
    pub expires_at: Option<DateTime<Utc>>,
}

/// One API token as `GET /api/tokens` lists it: never the token or its hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiToken {
    pub id: TokenId,
    pub name: String,
    pub created_at: DateTime<Utc>,
    /// The last request it authenticated, to the minute; null if never used.
    pub last_used_at: Option<DateTime<Utc>>,
    /// When it stops working (past: it answers 401 now); null when it works until revoked.
    pub expires_at: Option<DateTime<Utc>>,
}

/// `POST /api/auth/password` (from a browser session). Every other session of the account
/// ends; so do its API tokens unless `keepApiTokens`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChangePasswordParams {
    pub current_password: String,
    pub new_password: String,
    /// Keep the account's API tokens working; absent or false: they are revoked.
    #[serde(default)]
    pub keep_api_tokens: bool,
}

/// One browser session as `GET /api/auth/sessions` lists it: never its cookie or its hash.
/// Where it was last used is coarse on purpose: a browser family, a platform and the
/// address's network (IPv4 /24, IPv6 /48).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    pub id: SessionId,
    /// The session this request came with.
    pub current: bool,
    pub created_at: DateTime<Utc>,
    /// Its last request, to the minute.
    pub last_used_at: DateTime<Utc>,
    /// `Firefox`, `Chrome`, `Safari`, `Edge`, `Opera`, or `Other`.
    pub browser: String,
    /// `Windows`, `macOS`, `iOS`, `Android`, `ChromeOS`, `Linux`, or `Other`.
    pub platform: String,
    /// The network it was last used from, like `203.0.113.0/24` or `2001:db8:1::/48`.
    pub address: String,
}
