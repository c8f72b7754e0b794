//! The accounts wing: accounts, users and sessions (here), API tokens (`api_tokens`),
//! password hashing (`passwords`), sign-in backoff (`login_failures`), the sessions a person
//! sees and ends (`sessions`), changing a password (`password_change`), passkeys
//! (`passkeys`) and the console unlock they open (`console_unlocks`).
//!
//! Accounts, users and sessions (API tokens are `api_tokens`).
//!
//! Signup makes a user and a new account named after them; the first user of a fresh
//! server is the platform admin. Sessions are stored as hashes. Passwords are checked and
//! hashed in the bounded queue of `passwords`; sign-in attempts are counted per email by
//! `login_failures`.

pub mod api_tokens;
pub mod console_unlocks;
pub mod login_failures;
pub mod passkeys;
pub mod password_change;
pub mod passwords;
pub mod sessions;

use tether_protocol::auth::{LoginParams, Me, SignupParams, User};
use tether_protocol::text::{self, TextKind};
use tether_protocol::{AccountId, Code, SessionId, UserId};

use crate::clock::{secs, Millis};
use crate::credentials;
use crate::error::ApiError;
use crate::store::{on_read, on_tx, stored_id, Store, Tx};
use passwords::{PasswordQueue, MAX_PASSWORD_CHARS};
use sessions::Seen;

/// How long a browser session lasts.
pub const SESSION_SECS: u64 = 30 * 24 * 3600;

/// A freshly opened browser session. The token goes into the cookie and nowhere else.
pub struct NewSession {
    pub token: String,
    pub csrf_token: String,
}

/// Who is calling, as resolved from a session or an API token.
#[derive(Clone)]
pub struct Resolved {
    pub me: Me,
    /// Present for sessions only: the token cookie-authenticated changes must echo.
    pub csrf_token: Option<String>,
    /// Present for sessions only: the session's id.
    pub session_id: Option<SessionId>,
}

/// Signup input after validation: a normalised email, a password of acceptable length and
/// a display name. Whether the password is too easy to guess is judged by [`signup`], in
/// the hashing queue (it is CPU work). (No `Debug`: it holds the password.)
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
/// Neither is refused here: a wrong one of either is the same 401, and an email the text rule
/// refuses matches no one. (No `Debug`: it holds the password.)
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

/// Creates a user, their account and a session. The password is judged
/// ([`passwords::check_strength`], with the email and name as the person's own words) and
/// hashed in the queue before anything is written.
///
/// Signups are serialised (SQLite's one writer; on PostgreSQL a lock on `users` for the
/// transaction), so two at once with one email give one account and one 409, and only the
/// very first user is the admin.
///
/// # Errors
/// 503 `unavailable` when the hashing queue is full, 422 naming `password` when it is too
/// easy to guess, 409 `email_taken`, or a database error.
pub async fn signup(
    store: &Store,
    queue: &PasswordQueue,
    new_user: NewUser,
    seen: &Seen,
) -> Result<(Me, NewSession), ApiError> {
    let ticket = queue.admit()?;
    let password = new_user.password.clone();
    let local_part = new_user
        .email
        .split('@')
        .next()
        .unwrap_or_default()
        .to_owned();
    let personal = [new_user.email.clone(), local_part, new_user.name.clone()];
    let password_hash = ticket
        .run(move || {
            let personal: Vec<&str> = personal.iter().map(String::as_str).collect();
            passwords::check_strength("password", &password, &personal)?;
            credentials::hash_password(&password)
        })
        .await??;
    let now = store.now();
    let mut tx = store.begin().await?;
    if let Tx::Postgres(pg) = &mut tx {
        // Conflicts with itself and with writes to users, not with reads or foreign-key
        // checks: one signup at a time sees the users table.
        sqlx::query("LOCK TABLE users IN SHARE ROW EXCLUSIVE MODE")
            .execute(&mut **pg)
            .await?;
    }
    if user_by_email(&mut tx, &new_user.email).await?.is_some() {
        return Err(email_taken());
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
    // The lock above already keeps a second signup of this email out; ON CONFLICT is the
    // answer should anything else ever insert users.
    let inserted = on_tx!(&mut tx, |conn| sqlx::query(
        "INSERT INTO users (id, account_id, email, name, password_hash, is_admin, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (email) DO NOTHING"
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
    if inserted == 0 {
        return Err(email_taken());
    }
    let session = open_session(&mut tx, &user_id, &account_id, now, seen).await?;
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

/// Checks a password and opens a session. The attempt takes a place in the hashing queue
/// first, then is counted for its email ([`login_failures::charge`]); a success clears the
/// count.
///
/// # Errors
/// 503 `unavailable` when the hashing queue is full, 429 `rate_limited` while the email is
/// blocked after repeated failures, 401 `invalid_credentials` for an unknown email or a
/// wrong password (the same answer and about the same time for both), or a database error.
pub async fn login(
    store: &Store,
    queue: &PasswordQueue,
    attempt: LoginAttempt,
    seen: &Seen,
) -> Result<(Me, NewSession), ApiError> {
    let LoginAttempt { email, password } = attempt;
    let ticket = queue.admit()?;
    let email_key = login_failures::key(&email);
    login_failures::charge(store, &email_key).await?;
    // Sign-up refuses such an email; one stored before the rule is not signed in to either
    // (`ann\u{200B}@example.com` would pass for `ann@example.com`).
    let row = if text::check(&email, TextKind::Name).is_ok() {
        on_read!(store, |pool| sqlx::query_as::<_, UserRow>(USER_BY_EMAIL)
            .bind(&email)
            .fetch_optional(pool)
            .await)?
    } else {
        None
    };
    let stored_hash = row
        .as_ref()
        .map_or(credentials::DECOY_PASSWORD_HASH.to_owned(), |row| {
            row.password_hash.clone()
        });
    let verified = ticket
        .run(move || {
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
    let session = open_session(&mut tx, &me.user.id, &me.account.id, store.now(), seen).await?;
    login_failures::clear(&mut tx, &email_key).await?;
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

/// The caller behind a session cookie, if the session exists and has not expired; notes its
/// use (`seen`, at most once a minute). Read from the database on every request, never
/// remembered, so an ended session is refused at once on every replica.
///
/// # Errors
/// A database error.
pub async fn by_session(
    store: &Store,
    session_token: &str,
    seen: &Seen,
) -> Result<Option<Resolved>, ApiError> {
    let token_hash = credentials::hash_token(session_token);
    let sql = format!(
        "SELECT {CALLER_COLUMNS}, s.token_hash AS token_hash, s.csrf_token AS csrf_token, \
         s.id AS session_id, s.last_used_at AS last_used_at \
         FROM sessions s JOIN users u ON u.id = s.user_id JOIN accounts a ON a.id = u.account_id \
         WHERE s.token_hash = $1 AND s.expires_at > $2"
    );
    let row = on_read!(store, |pool| sqlx::query_as::<_, SessionCallerRow>(&sql)
        .bind(&token_hash)
        .bind(store.now())
        .fetch_optional(pool)
        .await)?;
    let Some(row) =
        row.filter(|row| credentials::hashes_match(&row.caller.token_hash, &token_hash))
    else {
        return Ok(None);
    };
    sessions::note_use(store, &row.session_id, row.last_used_at, seen).await;
    let session_id = stored_id(row.session_id)?;
    let resolved = row.caller.into_resolved()?;
    Ok(Some(Resolved {
        session_id: Some(session_id),
        ..resolved
    }))
}

/// Normalises and checks an email address: trimmed, lower case, `local@domain.tld`, and held
/// to the name rule ([`TextKind::Name`]): an address is shown as who a person is.
///
/// # Errors
/// 422 naming `email`.
pub fn parse_email(raw: &str) -> Result<String, ApiError> {
    let email = raw.trim().to_lowercase();
    check_text("email", &email, TextKind::Name)?;
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

/// Checks a new password's length (in characters; see [`passwords::check_length`]).
///
/// # Errors
/// 422 naming `password`.
pub fn parse_password(password: String) -> Result<String, ApiError> {
    passwords::check_length("password", &password)?;
    Ok(password)
}

/// Checks a display name: trimmed, 1 to `max_chars` characters, every character visible
/// (`tether_protocol::text`, [`TextKind::Name`]: no control character, no direction
/// override, nothing invisible, no noncharacter).
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
    check_text(field, name, TextKind::Name)?;
    Ok(name.to_owned())
}

/// Checks stored text of `kind` (a prompt, a summary: [`TextKind::MultiLine`] keeps
/// newlines and tabs and refuses every other control character).
///
/// # Errors
/// 422 naming `field` and the first character refused.
pub fn check_text(field: &str, text: &str, kind: TextKind) -> Result<(), ApiError> {
    text::check(text, kind)
        .map_err(|refused| ApiError::invalid_field(field, &format!("{refused}.")))
}

const USER_BY_EMAIL: &str = "SELECT u.id AS user_id, u.email AS email, u.name AS user_name, \
    u.is_admin AS is_admin, a.id AS account_id, a.name AS account_name, \
    u.password_hash AS password_hash \
    FROM users u JOIN accounts a ON a.id = u.account_id WHERE u.email = $1";

/// The caller's columns of `users u JOIN accounts a`, for [`CallerRow`].
pub(crate) const CALLER_COLUMNS: &str = "u.id AS user_id, u.email AS email, u.name AS user_name, \
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

/// [`CALLER_COLUMNS`] with the presented credential's stored hash (and the session's CSRF
/// token).
#[derive(sqlx::FromRow)]
pub(crate) struct CallerRow {
    pub(crate) user_id: String,
    pub(crate) email: String,
    pub(crate) user_name: String,
    pub(crate) is_admin: i64,
    pub(crate) account_id: String,
    pub(crate) account_name: String,
    pub(crate) token_hash: String,
    pub(crate) csrf_token: Option<String>,
}

/// A session's caller, with the session's id and last use.
#[derive(sqlx::FromRow)]
struct SessionCallerRow {
    #[sqlx(flatten)]
    caller: CallerRow,
    session_id: String,
    last_used_at: Millis,
}

impl CallerRow {
    pub(crate) fn into_resolved(self) -> Result<Resolved, ApiError> {
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
            session_id: None,
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
    seen: &Seen,
) -> Result<NewSession, ApiError> {
    let session = NewSession {
        token: credentials::random_token(""),
        csrf_token: credentials::random_token(""),
    };
    on_tx!(tx, |conn| {
        sqlx::query(
            "INSERT INTO sessions (token_hash, id, account_id, user_id, csrf_token, created_at, \
             expires_at, last_used_at, browser, platform, address) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        )
        .bind(credentials::hash_token(&session.token))
        .bind(SessionId::generate().as_str())
        .bind(account_id.as_str())
        .bind(user_id.as_str())
        .bind(&session.csrf_token)
        .bind(now)
        .bind(now + secs(SESSION_SECS))
        .bind(now)
        .bind(seen.browser)
        .bind(seen.platform)
        .bind(&seen.address)
        .execute(conn)
        .await
        .map(|done| done.rows_affected())
    })?;
    Ok(session)
}

fn email_taken() -> ApiError {
    ApiError::new(Code::EmailTaken, "An account with this email exists.")
}
