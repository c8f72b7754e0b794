//! The store wing: the database and everything written straight to it — job rows and
//! their one-statement writes (`job_rows`), the audit ledger (`ledger`) and evidence
//! bytes on disk (`blobs`). It imports no domain wing.
//!
//! The database: one [`Store`] over SQLite (embedded default) or PostgreSQL.
//!
//! Both backends share SQL text (`$1` placeholders work on both in sqlx), times are BIGINT
//! unix milliseconds and ids/JSON are TEXT, so rows decode identically. The [`on_tx!`] and
//! [`on_read!`] macros expand one query body once per backend, which avoids both `sqlx::Any`
//! and generics over `Database`. SQL differs only where it must ([`Tx::lock_clause`]).
//!
//! SQLite has exactly one writer: a write pool of one connection whose transactions are
//! `BEGIN IMMEDIATE`, next to a read pool. Every mutation goes through [`Store::begin`].
//!
//! The store also carries the [`Clock`]: [`Store::now`] is the time every domain function
//! writes and compares stored times with, so a test can move it.

pub mod blobs;
pub mod idempotency;
pub mod job_rows;
pub mod ledger;

use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use sqlx::pool::PoolConnection;
use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{
    Connection, PgConnection, PgPool, Postgres, Sqlite, SqliteConnection, SqlitePool, Transaction,
};
use tether_protocol::AccountId;

use crate::clock::{Clock, Millis};
use crate::config::Config;
use crate::error::ApiError;

/// Handle to the database and the clock its times are read from; cheap to clone.
#[derive(Clone)]
pub struct Store {
    backend: Backend,
    /// "Now" for every time this server writes or compares with a stored one.
    clock: Clock,
}

#[derive(Clone)]
enum Backend {
    Sqlite { write: SqlitePool, read: SqlitePool },
    Postgres(PgPool),
}

/// A pool to read from without a transaction.
pub(crate) enum Reader<'a> {
    Sqlite(&'a SqlitePool),
    Postgres(&'a PgPool),
}

/// Where a read of a [`ReadSource`] goes: a read pool (one connection per statement), or
/// one connection held for several reads in a row.
pub(crate) enum Reads<'a> {
    Sqlite(&'a SqlitePool),
    Postgres(&'a PgPool),
    SqliteConn(&'a mut SqliteConnection),
    PostgresConn(&'a mut PgConnection),
}

/// What read functions take: the store itself, or a [`HeldReader`] for a response that
/// needs several reads (each pooled use costs a round trip to return the connection).
pub(crate) trait ReadSource {
    fn reads(&mut self) -> Reads<'_>;
    fn now(&self) -> Millis;
}

impl ReadSource for &Store {
    fn reads(&mut self) -> Reads<'_> {
        match &self.backend {
            Backend::Sqlite { read, .. } => Reads::Sqlite(read),
            Backend::Postgres(pool) => Reads::Postgres(pool),
        }
    }

    fn now(&self) -> Millis {
        Store::now(self)
    }
}

/// One read connection held for several reads in a row.
pub(crate) struct HeldReader<'a> {
    store: &'a Store,
    connection: HeldConnection,
}

enum HeldConnection {
    Sqlite(PoolConnection<Sqlite>),
    Postgres(PoolConnection<Postgres>),
}

impl<S: ReadSource + ?Sized> ReadSource for &mut S {
    fn reads(&mut self) -> Reads<'_> {
        (**self).reads()
    }

    fn now(&self) -> Millis {
        (**self).now()
    }
}

/// Reads inside a transaction, seeing its own writes; `now` as the transaction took it.
pub(crate) struct InTx<'a> {
    pub tx: &'a mut Tx,
    pub now: Millis,
}

impl ReadSource for InTx<'_> {
    fn reads(&mut self) -> Reads<'_> {
        match &mut *self.tx {
            Tx::Sqlite(tx) => Reads::SqliteConn(tx),
            Tx::Postgres(tx) => Reads::PostgresConn(tx),
        }
    }

    fn now(&self) -> Millis {
        self.now
    }
}

impl ReadSource for HeldReader<'_> {
    fn reads(&mut self) -> Reads<'_> {
        match &mut self.connection {
            HeldConnection::Sqlite(connection) => Reads::SqliteConn(connection),
            HeldConnection::Postgres(connection) => Reads::PostgresConn(connection),
        }
    }

    fn now(&self) -> Millis {
        self.store.now()
    }
}

/// Runs `$body` with `$exec` bound to the executor of a [`ReadSource`] (a pool or a held
/// connection of either backend).
macro_rules! on_reads {
    ($source:expr, |$exec:ident| $body:expr) => {
        match $crate::store::ReadSource::reads(&mut $source) {
            $crate::store::Reads::Sqlite($exec) => $body,
            $crate::store::Reads::Postgres($exec) => $body,
            $crate::store::Reads::SqliteConn($exec) => $body,
            $crate::store::Reads::PostgresConn($exec) => $body,
        }
    };
}

/// A write transaction on either backend.
pub enum Tx {
    Sqlite(Transaction<'static, Sqlite>),
    Postgres(Transaction<'static, Postgres>),
}

/// Runs `$body` with `$conn` bound to the transaction's connection of either backend.
macro_rules! on_tx {
    ($tx:expr, |$conn:ident| $body:expr) => {
        match $tx {
            $crate::store::Tx::Sqlite(tx) => {
                let $conn: &mut sqlx::SqliteConnection = &mut **tx;
                $body
            }
            $crate::store::Tx::Postgres(tx) => {
                let $conn: &mut sqlx::PgConnection = &mut **tx;
                $body
            }
        }
    };
}

/// Runs `$body` with `$pool` bound to the read pool of either backend.
macro_rules! on_read {
    ($store:expr, |$pool:ident| $body:expr) => {
        match $store.reader() {
            $crate::store::Reader::Sqlite($pool) => $body,
            $crate::store::Reader::Postgres($pool) => $body,
        }
    };
}

pub(crate) use {on_read, on_reads, on_tx};

impl Store {
    /// Connects to the configured database (creating the SQLite file and data dir when
    /// missing) and applies that backend's migrations. Times are read from `clock`.
    ///
    /// # Errors
    /// When the database cannot be reached or a migration fails.
    pub async fn connect(config: &Config, clock: Clock) -> anyhow::Result<Store> {
        let url = match &config.database_url {
            Some(url) => url.clone(),
            None => {
                std::fs::create_dir_all(&config.data_dir)
                    .with_context(|| format!("creating data dir {}", config.data_dir.display()))?;
                config.default_sqlite_url()
            }
        };
        let backend = if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            connect_postgres(&url, config.db_max_connections).await?
        } else if url.starts_with("sqlite:") {
            connect_sqlite(&url, config.db_max_connections).await?
        } else {
            anyhow::bail!("the database URL must start with postgres:// or sqlite://");
        };
        Ok(Store { backend, clock })
    }

    /// The clock this store's times come from.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Now, in the stored form.
    pub fn now(&self) -> Millis {
        self.clock.now_millis()
    }

    /// `"sqlite"` or `"postgres"`, for logs and tests.
    pub fn backend_name(&self) -> &'static str {
        match self.backend {
            Backend::Sqlite { .. } => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }

    /// Checks the database answers a trivial query.
    ///
    /// # Errors
    /// A database error.
    pub async fn ping(&self) -> Result<(), ApiError> {
        on_read!(self, |pool| sqlx::query("SELECT 1")
            .execute(pool)
            .await
            .map(drop))?;
        Ok(())
    }

    /// Starts a write transaction (`BEGIN IMMEDIATE` on SQLite).
    ///
    /// # Errors
    /// A database error, answered as `internal` (or `unavailable` when the pool is exhausted).
    pub async fn begin(&self) -> Result<Tx, ApiError> {
        Ok(match &self.backend {
            // Begun on a task of its own: sqlx's SQLite `BEGIN` is not safe to drop half-way
            // (its transaction depth falls out of step with the connection, and the next
            // `BEGIN` fails), and actix drops a handler's future when its client goes away.
            // Dropped after it began, a transaction only queues its rollback.
            Backend::Sqlite { write, .. } => {
                let write = write.clone();
                let begun = tokio::spawn(async move { write.begin_with("BEGIN IMMEDIATE").await });
                Tx::Sqlite(begun.await.map_err(|error| ApiError::internal(&error))??)
            }
            Backend::Postgres(pool) => Tx::Postgres(pool.begin().await?),
        })
    }

    /// One read connection for several reads in a row.
    ///
    /// # Errors
    /// A database error (`unavailable` when the pool is exhausted).
    pub(crate) async fn hold_reader(&self) -> Result<HeldReader<'_>, ApiError> {
        let connection = match &self.backend {
            Backend::Sqlite { read, .. } => HeldConnection::Sqlite(read.acquire().await?),
            Backend::Postgres(pool) => HeldConnection::Postgres(pool.acquire().await?),
        };
        Ok(HeldReader {
            store: self,
            connection,
        })
    }

    /// The PostgreSQL pool, for a write that is one statement (no transaction to begin
    /// and commit); `None` on SQLite.
    pub(crate) fn postgres_pool(&self) -> Option<&PgPool> {
        match &self.backend {
            Backend::Sqlite { .. } => None,
            Backend::Postgres(pool) => Some(pool),
        }
    }

    pub(crate) fn reader(&self) -> Reader<'_> {
        match &self.backend {
            Backend::Sqlite { read, .. } => Reader::Sqlite(read),
            Backend::Postgres(pool) => Reader::Postgres(pool),
        }
    }

    /// Closes the pools (tests call this before dropping a database).
    pub async fn close(&self) {
        match &self.backend {
            Backend::Sqlite { write, read } => {
                read.close().await;
                write.close().await;
            }
            Backend::Postgres(pool) => pool.close().await,
        }
    }
}

impl Tx {
    /// # Errors
    /// A database error.
    pub async fn commit(self) -> Result<(), ApiError> {
        match self {
            // A commit dropped half-way has the same problem as a `BEGIN`: it runs to the end.
            Tx::Sqlite(tx) => tokio::spawn(tx.commit())
                .await
                .map_err(|error| ApiError::internal(&error))??,
            Tx::Postgres(tx) => tx.commit().await?,
        }
        Ok(())
    }

    /// Appended to a SELECT that is followed by an UPDATE of the same row: PostgreSQL locks
    /// the row; SQLite's `BEGIN IMMEDIATE` already serialises writers. `NO KEY UPDATE`, not
    /// `UPDATE`: no key is ever changed, and the stronger lock would also stop every insert
    /// whose foreign key names the row (an account's jobs and events behind its claims).
    pub fn lock_clause(&self) -> &'static str {
        match self {
            Tx::Sqlite(_) => "",
            Tx::Postgres(_) => " FOR NO KEY UPDATE",
        }
    }

    /// Like [`Tx::lock_clause`], skipping rows another transaction holds (claims).
    pub fn skip_locked_clause(&self) -> &'static str {
        match self {
            Tx::Sqlite(_) => "",
            Tx::Postgres(_) => " FOR NO KEY UPDATE SKIP LOCKED",
        }
    }

    /// Locks the account's row until the transaction ends, on PostgreSQL. A cap on the
    /// account's rows (the run limit, push subscriptions, wrong pairing codes) takes it
    /// before it counts, so each count sees every row inserted under it before and a burst
    /// cannot overrun the cap. SQLite's one writer serialises them already.
    ///
    /// # Errors
    /// A database error.
    pub async fn lock_account(&mut self, account_id: &AccountId) -> Result<(), ApiError> {
        if matches!(self, Tx::Sqlite(_)) {
            return Ok(());
        }
        let lock = format!(
            "SELECT id FROM accounts WHERE id = $1{}",
            self.lock_clause()
        );
        on_tx!(self, |conn| sqlx::query(&lock)
            .bind(account_id.as_str())
            .execute(conn)
            .await
            .map(|done| done.rows_affected()))?;
        Ok(())
    }
}

async fn connect_sqlite(url: &str, read_connections: u32) -> anyhow::Result<Backend> {
    let options = SqliteConnectOptions::from_str(url)
        .context("parsing the SQLite URL")?
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(5))
        .foreign_keys(true);
    // A local file does not go stale: no ping before each use (each is a round trip to the
    // connection's thread).
    let write = SqlitePoolOptions::new()
        .max_connections(1)
        .test_before_acquire(false)
        .connect_with(options.clone())
        .await
        .context("opening the SQLite database")?;
    sqlx::migrate!("../migrations/sqlite")
        .run(&write)
        .await
        .context("applying SQLite migrations")?;
    let read = SqlitePoolOptions::new()
        .max_connections(read_connections.max(1))
        .test_before_acquire(false)
        .connect_with(options.read_only(true))
        .await
        .context("opening the SQLite read pool")?;
    Ok(Backend::Sqlite { write, read })
}

/// How long a PostgreSQL connection may sit idle before it is pinged on its next use.
const IDLE_BEFORE_PING: Duration = Duration::from_secs(30);

async fn connect_postgres(url: &str, max_connections: u32) -> anyhow::Result<Backend> {
    // A ping before every use is a round trip per statement batch; only a connection idle
    // long enough to have been cut (a restart, a proxy's timeout) is checked first.
    let pool = PgPoolOptions::new()
        .max_connections(max_connections.max(2))
        .acquire_timeout(Duration::from_secs(10))
        .test_before_acquire(false)
        .before_acquire(|connection, meta| {
            Box::pin(async move {
                if meta.idle_for >= IDLE_BEFORE_PING {
                    connection.ping().await?;
                }
                Ok(true)
            })
        })
        .connect(url)
        .await
        .context("connecting to PostgreSQL")?;
    sqlx::migrate!("../migrations/postgres")
        .run(&pool)
        .await
        .context("applying PostgreSQL migrations")?;
    Ok(Backend::Postgres(pool))
}

/// A stored id back into its type; a malformed one is a server fault.
///
/// # Errors
/// `internal` when the stored text is not an id.
pub fn stored_id<T>(raw: String) -> Result<T, ApiError>
where
    T: TryFrom<String, Error = tether_protocol::IdError>,
{
    T::try_from(raw).map_err(|error| ApiError::internal(&format_args!("stored id: {error}")))
}
