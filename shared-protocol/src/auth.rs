//! Accounts, sign-in and API tokens.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::ids::{AccountId, TokenId, UserId};

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

/// `POST /api/tokens`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NewTokenParams {
    pub name: String,
}

/// A freshly made API token; `token` is shown this once and stored only as a hash.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedToken {
    pub id: TokenId,
    pub name: String,
    pub token: String,
}
