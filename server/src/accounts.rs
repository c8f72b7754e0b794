//! Accounts, users, sessions and API tokens.
//!
//! Signup makes a user and a new account named after them; the first user of a fresh
//! server is the platform admin. Sessions and API tokens are stored as hashes.

use tether_protocol::auth::{CreatedToken, LoginParams, Me, NewTokenParams, SignupParams, User};
use tether_protocol::routes::USER_TOKEN_PREFIX;
use tether_protocol::{AccountId, Code, TokenId, UserId};

use crate::clock::{secs, Millis};
use crate::credentials;
use crate::error::ApiError;
use crate::store::{on_read, on_tx, stored_id, Store, Tx};

/// How long a browser session lasts.
pub const SESSION_SECS: u64 = 30 * 24 * 3600;
/// Passwords shorter than this are refused.
pub const MIN_PASSWORD_CHARS: usize = 8;
/// Longer passwords are refused: argon2 on megabytes is a denial of service.
pub const MAX_PASSWORD_CHARS: usize = 1024;

/// A freshly opened browser session. The token goes into the cookie and nowhere else.
pub struct NewSession {
    pub token: String,
    pub csrf_token: String,
}

/// Who is calling, as resolved from a session or an API token.
pub struct Resolved {
    pub me: Me,
    /// Present for sessions only: the token cookie-authenticated changes must echo.
    pub csrf_token: Option<String>,
}

/// Signup input after validation: a normalised email, a password of acceptable length and
/// a display name. (No `Debug`: it holds the password.)
pub struct NewUser {
    email: String,
    password: String,
    name: String,
}

impl TryFrom<SignupParams> for NewUser {
    type Error = ApiError;
    fn try_from(params: SignupParams) -> Result<NewUser, ApiError> {
        Ok(NewUser {
            email: parse_email(&params.email)?,
            password: parse_password(params.password)?,
            name: parse_name("name", &params.name, 100)?,
        })
    }
}

/// A sign-in attempt: the email as stored (trimmed, lower case) and the password as typed.
/// Neither is refused here: a wrong one of either is the same 401. (No `Debug`: it holds the
/// password.)
pub struct LoginAttempt {
    email: String,
    password: String,
}

impl From<LoginParams> for LoginAttempt {
    fn from(params: LoginParams) -> LoginAttempt {
        LoginAttempt {
            email: params.email.trim().to_lowercase(),
            password: params.password,
        }
    }
}

/// A checked [`NewTokenParams`]: the token's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewApiToken {
    name: String,
}

impl TryFrom<NewTokenParams> for NewApiToken {
    type Error = ApiError;
    fn try_from(params: NewTokenParams) -> Result<NewApiToken, ApiError> {
        Ok(NewApiToken {
            name: parse_name("name", &params.name, 100)?,
        })
    }
}

/// Creates a user, their account and a session.
///
/// # Errors
/// 409 `email_taken`, or a database error.
pub async fn signup(store: &Store, new_user: NewUser) -> Result<(Me, NewSession), ApiError> {
    let password_hash = hash_password_blocking(new_user.password.clone()).await?;
    let now = store.now();
    let mut tx = store.begin().await?;
    if user_by_email(&mut tx, &new_user.email).await?.is_some() {
        return Err(ApiError::new(
            Code::EmailTaken,
            "An account with this email exists.",
        ));
    }
    let first_user = count_users(&mut tx).await? == 0;
    let account_id = AccountId::generate();
    let user_id = UserId::generate();
    on_tx!(&mut tx, |conn| sqlx::query(
        "INSERT INTO accounts (id, name, created_at) VALUES ($1, $2, $3)"
    )
    .bind(account_id.as_str())
    .bind(&new_user.name)
    .bind(now)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    on_tx!(&mut tx, |conn| sqlx::query(
        "INSERT INTO users (id, account_id, email, name, password_hash, is_admin, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)"
    )
    .bind(user_id.as_str())
    .bind(account_id.as_str())
    .bind(&new_user.email)
    .bind(&new_user.name)
    .bind(&password_hash)
    .bind(i64::from(first_user))
    .bind(now)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    let session = open_session(&mut tx, &user_id, &account_id, now).await?;
    tx.commit().await?;
    let me = Me {
        user: User {
            id: user_id,
            email: new_user.email,
            name: new_user.name.clone(),
            is_admin: first_user,
        },
        account: tether_protocol::auth::Account {
            id: account_id,
            name: new_user.name,
        },
    };
    tracing::info!(user_id = %me.user.id, admin = first_user, "signed up");
    Ok((me, session))
}

/// Checks a password and opens a session.
///
/// # Errors
/// 401 `invalid_credentials` for an unknown email or a wrong password (the same answer and
/// about the same time for both), or a database error.
pub async fn login(store: &Store, attempt: LoginAttempt) -> Result<(Me, NewSession), ApiError> {
    let LoginAttempt { email, password } = attempt;
    let row = on_read!(store, |pool| sqlx::query_as::<_, UserRow>(USER_BY_EMAIL)
        .bind(&email)
        .fetch_optional(pool)
        .await)?;
    let stored_hash = row
        .as_ref()
        .map_or(credentials::DECOY_PASSWORD_HASH.to_owned(), |row| {
            row.password_hash.clone()
        });
    let verified = with_password_slot(move || {
        password.chars().count() <= MAX_PASSWORD_CHARS
            && credentials::verify_password(&password, &stored_hash)
    })
    .await?;
    let row = match row {
        Some(row) if verified => row,
        _ => {
            return Err(ApiError::new(
                Code::InvalidCredentials,
                "The email or the password is wrong.",
            ))
        }
    };
    let me = row.into_me()?;
    let mut tx = store.begin().await?;
    let session = open_session(&mut tx, &me.user.id, &me.account.id, store.now()).await?;
    tx.commit().await?;
    Ok((me, session))
}

/// Ends the session with this cookie token; unknown tokens are ignored.
///
/// # Errors
/// A database error.
pub async fn logout(store: &Store, session_token: &str) -> Result<(), ApiError> {
    let token_hash = credentials::hash_token(session_token);
    let mut tx = store.begin().await?;
    on_tx!(&mut tx, |conn| sqlx::query(
        "DELETE FROM sessions WHERE token_hash = $1"
    )
    .bind(&token_hash)
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    tx.commit().await
}

/// Makes an API token (`tut_…`) for the user; the plaintext is returned this once.
///
/// # Errors
/// A database error.
pub async fn create_api_token(
    store: &Store,
    me: &Me,
    new: NewApiToken,
) -> Result<CreatedToken, ApiError> {
    let NewApiToken { name } = new;
    let id = TokenId::generate();
    let token = credentials::random_token(USER_TOKEN_PREFIX);
    let mut tx = store.begin().await?;
    on_tx!(&mut tx, |conn| sqlx::query(
        "INSERT INTO api_tokens (id, account_id, user_id, name, token_hash, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6)"
    )
    .bind(id.as_str())
    .bind(me.account.id.as_str())
    .bind(me.user.id.as_str())
    .bind(&name)
    .bind(credentials::hash_token(&token))
    .bind(store.now())
    .execute(conn)
    .await
    .map(|done| done.rows_affected()))?;
    tx.commit().await?;
    Ok(CreatedToken { id, name, token })
}

/// The caller behind a session cookie, if the session exists and has not expired.
///
/// # Errors
/// A database error.
pub async fn by_session(store: &Store, session_token: &str) -> Result<Option<Resolved>, ApiError> {
    let token_hash = credentials::hash_token(session_token);
    let sql = format!(
        "SELECT {CALLER_COLUMNS}, s.token_hash AS token_hash, s.csrf_token AS csrf_token \
         FROM sessions s JOIN users u ON u.id = s.user_id JOIN accounts a ON a.id = u.account_id \
         WHERE s.token_hash = $1 AND s.expires_at > $2"
    );
    let row = on_read!(store, |pool| sqlx::query_as::<_, CallerRow>(&sql)
        .bind(&token_hash)
        .bind(store.now())
        .fetch_optional(pool)
        .await)?;
    row.filter(|row| credentials::hashes_match(&row.token_hash, &token_hash))
        .map(CallerRow::into_resolved)
        .transpose()
}

/// The caller behind an API token.
///
/// # Errors
/// A database error.
pub async fn by_api_token(store: &Store, token: &str) -> Result<Option<Resolved>, ApiError> {
    let token_hash = credentials::hash_token(token);
    let sql = format!(
        "SELECT {CALLER_COLUMNS}, t.token_hash AS token_hash, NULL AS csrf_token \
         FROM api_tokens t JOIN users u ON u.id = t.user_id JOIN accounts a ON a.id = u.account_id \
         WHERE t.token_hash = $1"
    );
    let row = on_read!(store, |pool| sqlx::query_as::<_, CallerRow>(&sql)
        .bind(&token_hash)
        .fetch_optional(pool)
        .await)?;
    row.filter(|row| credentials::hashes_match(&row.token_hash, &token_hash))
        .map(|row| {
            row.into_resolved().map(|resolved| Resolved {
                csrf_token: None,
                ..resolved
            })
        })
        .transpose()
}

/// Normalises and checks an email address: trimmed, lower case, `local@domain.tld`.
///
/// # Errors
/// 422 naming `email`.
pub fn parse_email(raw: &str) -> Result<String, ApiError> {
    let email = raw.trim().to_lowercase();
    let shape_ok = email.len() <= 254
        && !email.chars().any(|c| c.is_whitespace() || c.is_control())
        && email.split_once('@').is_some_and(|(local, domain)| {
            !local.is_empty()
                && !domain.contains('@')
                && domain.contains('.')
                && !domain.starts_with('.')
                && !domain.ends_with('.')
        });
    if shape_ok {
        Ok(email)
    } else {
        Err(ApiError::invalid_field(
            "email",
            "must be an email address like name@example.com.",
        ))
    }
}

/// Checks a password's length (in characters).
///
/// # Errors
/// 422 naming `password`.
pub fn parse_password(password: String) -> Result<String, ApiError> {
    let chars = password.chars().count();
    if chars < MIN_PASSWORD_CHARS {
        return Err(ApiError::invalid_field(
            "password",
            "must be at least 8 characters.",
        ));
    }
    if chars > MAX_PASSWORD_CHARS {
        return Err(ApiError::invalid_field(
            "password",
            "must be at most 1024 characters.",
        ));
    }
    Ok(password)
}

/// Checks a display name: trimmed, 1 to `max_chars` characters, no control characters.
///
/// # Errors
/// 422 naming `field`.
pub fn parse_name(field: &str, raw: &str, max_chars: usize) -> Result<String, ApiError> {
    let name = raw.trim();
    if name.is_empty() {
        return Err(ApiError::invalid_field(field, "must not be empty."));
    }
    if name.chars().count() > max_chars {
        return Err(ApiError::invalid_field(
            field,
            &format!("must be at most {max_chars} characters."),
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(ApiError::invalid_field(
            field,
            "must not contain control characters.",
        ));
    }
    Ok(name.to_owned())
}

const USER_BY_EMAIL: &str = "SELECT u.id AS user_id, u.email AS email, u.name AS user_name, \
    u.is_admin AS is_admin, a.id AS account_id, a.name AS account_name, \
    u.password_hash AS password_hash \
    FROM users u JOIN accounts a ON a.id = u.account_id WHERE u.email = $1";

const CALLER_COLUMNS: &str = "u.id AS user_id, u.email AS email, u.name AS user_name, \
    u.is_admin AS is_admin, a.id AS account_id, a.name AS account_name";

#[derive(sqlx::FromRow)]
struct UserRow {
    user_id: String,
    email: String,
    user_name: String,
    is_admin: i64,
    account_id: String,
    account_name: String,
    password_hash: String,
}

impl UserRow {
    fn into_me(self) -> Result<Me, ApiError> {
        me_from_parts(
            self.user_id,
            self.email,
            self.user_name,
            self.is_admin,
            self.account_id,
            self.account_name,
        )
    }
}

#[derive(sqlx::FromRow)]
struct CallerRow {
    user_id: String,
    email: String,
    user_name: String,
    is_admin: i64,
    account_id: String,
    account_name: String,
    token_hash: String,
    csrf_token: Option<String>,
}

impl CallerRow {
    fn into_resolved(self) -> Result<Resolved, ApiError> {
        Ok(Resolved {
            me: me_from_parts(
                self.user_id,
                self.email,
                self.user_name,
                self.is_admin,
                self.account_id,
                self.account_name,
            )?,
            csrf_token: self.csrf_token,
        })
    }
}

fn me_from_parts(
    user_id: String,
    email: String,
    user_name: String,
    is_admin: i64,
    account_id: String,
    account_name: String,
) -> Result<Me, ApiError> {
    Ok(Me {
        user: User {
            id: stored_id(user_id)?,
            email,
            name: user_name,
            is_admin: is_admin != 0,
        },
        account: tether_protocol::auth::Account {
            id: stored_id(account_id)?,
            name: account_name,
        },
    })
}

async fn user_by_email(tx: &mut Tx, email: &str) -> Result<Option<String>, ApiError> {
    let id = on_tx!(tx, |conn| sqlx::query_scalar::<_, String>(
        "SELECT id FROM users WHERE email = $1"
    )
    .bind(email)
    .fetch_optional(conn)
    .await)?;
    Ok(id)
}

async fn count_users(tx: &mut Tx) -> Result<i64, ApiError> {
    let count = on_tx!(tx, |conn| sqlx::query_scalar::<_, i64>(
        "SELECT COUNT(*) FROM users"
    )
    .fetch_one(conn)
    .await)?;
    Ok(count)
}

async fn open_session(
    tx: &mut Tx,
    user_id: &UserId,
    account_id: &AccountId,
    now: Millis,
) -> Result<NewSession, ApiError> {
    let session = NewSession {
        token: credentials::random_token(""),
        csrf_token: credentials::random_token(""),
    };
    on_tx!(tx, |conn| {
        sqlx::query(
        "INSERT INTO sessions (token_hash, account_id, user_id, csrf_token, created_at, expires_at) \
         VALUES ($1, $2, $3, $4, $5, $6)"
    )
    .bind(credentials::hash_token(&session.token))
    .bind(account_id.as_str())
    .bind(user_id.as_str())
    .bind(&session.csrf_token)
    .bind(now)
    .bind(now + secs(SESSION_SECS))
    .execute(conn)
    .await
    .map(|done| done.rows_affected())
    })?;
    Ok(session)
}

async fn hash_password_blocking(password: String) -> Result<String, ApiError> {
    with_password_slot(move || credentials::hash_password(&password)).await?
}

/// Runs an argon2id hash or check off the async threads, at most one per core at a time:
/// each takes 19 MiB and a core for tens of milliseconds, so a burst of sign-ins queues here
/// instead of taking every core and leaving that memory behind in the allocator.
async fn with_password_slot<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    static SLOTS: std::sync::OnceLock<tokio::sync::Semaphore> = std::sync::OnceLock::new();
    let slots = SLOTS.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get);
        tokio::sync::Semaphore::new(cores)
    });
    let _slot = slots
        .acquire()
        .await
        .map_err(|error| ApiError::internal(&error))?;
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|error| ApiError::internal(&error))
}
