//! The hub: frames to devices' event streams, and requests the web makes that a device
//! answers (relays), in process or across replicas through Redis.
//!
//! One small interface, [`Hub`], over two buses:
//!
//! - **In process** (the embedded default): a map from device to the senders of its open
//!   streams, a map from request id to the waiting web request, and a broadcast channel per
//!   account whose pages follow its changes.
//! - **Redis** (`TETHER_REDIS_URL`): every replica subscribes to `tether:dev:{deviceId}` for
//!   each device whose stream it holds, to `tether:acct:{accountId}` for each account whose
//!   pages it serves a stream to, to `tether:job:{jobId}` for each job a page watches here
//!   ([`job_feeds`]), and to its own `tether:replica:{id}`. A frame is a
//!   `PUBLISH` to the device's channel; the number of receivers it reports tells whether the
//!   device has an open stream anywhere. An account event is a `PUBLISH` to the account's
//!   channel. A relayed request is a `SET tether:relay:{id} … NX EX` naming the device and
//!   the waiting replica; the answer, posted to any replica, takes the key with `GETDEL` and
//!   is published to the waiting replica's channel. Every replica also subscribes to
//!   `tether:tokens`, where a replica that ended a token names its owner (a device, or the
//!   user whose API tokens changed), or names an account a browser just asked to hear of
//!   ended jobs, so all of them forget it (see `replica_memory`).
//!
//! An owner's request about a held evidence file (`evidence.request`) is relayed the same
//! way under its single-use upload id: the ticket also binds the account, job, evidence id
//! and action ([`UploadBinding`]); the device's upload, at any replica, checks it, takes it
//! ([`Hub::take_upload`]) and hands the outcome back ([`Hub::deliver_upload`]). A taken or
//! abandoned id is remembered for [`GONE_TTL`] (`tether:relay-gone:{id}`), so its second
//! use is told 410 `upload_gone`, not 404.
//!
//! An owner's request to delete a stopped job's engine session (`session.delete`) is
//! relayed alike under its single-use request id, bound to the account and job
//! ([`DeletionBinding`]): the device's answer, at any replica, takes it
//! ([`Hub::take_deletion`]) and hands it back ([`Hub::deliver_deletion`]).
//!
//! **Invariant:** frames and relays are hints with short lives. Nothing here is the truth
//! about a job: a lost frame costs the device latency (it claims on every (re)connect and
//! heartbeat), a lost relay answer a 504.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures_util::StreamExt;
use redis::aio::MultiplexedConnection;
use redis::AsyncConnectionConfig;
use serde::{Deserialize, Serialize};
use tether_protocol::changes::DiffAgainst;
use tether_protocol::decisions::DecisionChange;
use tether_protocol::engine_sessions::SessionDeletion;
use tether_protocol::evidence::{EvidenceAction, PreviewReady};
use tether_protocol::files::{FileAnswer, FileOp};
use tether_protocol::frames::ServerFrame;
use tether_protocol::jobs::{Evidence, JobEvent};
use tether_protocol::{AccountId, Code, DecisionId, DeviceId, JobId, UserId};
use tokio::sync::{broadcast, mpsc, oneshot};

use crate::accounts::api_tokens::ApiTokens;
use crate::credentials;
use crate::devices::DeviceTokens;
use crate::error::ApiError;
use crate::replica_memory::ReplicaMemory;
use crate::store::job_rows;
use crate::store::Store;

pub mod job_feeds;
pub mod pipes;

/// Frames one stream may have queued before further ones are dropped (they are hints).
pub const STREAM_BUFFER: usize = 16;
/// Account events one follower may fall behind by before it is told it lagged.
pub const ACCOUNT_BUFFER: usize = 64;
/// How long a stream waits for its Redis subscription before it serves without one.
const SUBSCRIBE_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause between attempts to reach Redis again.
const RECONNECT_PAUSE: Duration = Duration::from_secs(1);
const KEY_PREFIX: &str = "tether:";
/// How long a taken or abandoned upload id is remembered (answered 410, not 404).
const GONE_TTL: Duration = Duration::from_secs(600);

/// The hub of one replica; cheap to clone.
#[derive(Clone)]
pub struct Hub {
    inner: Arc<Inner>,
}

struct Inner {
    /// This replica's id, named in relay keys so answers find their way back.
    replica: String,
    /// Streams and waiting requests held by this replica. A std mutex: it is never held
    /// across an await.
    local: Mutex<Local>,
    bus: Bus,
    /// The tokens this replica checked recently, and the accounts it found quiet.
    memories: Memories,
}

#[derive(Default)]
struct Local {
    /// Open event streams by device id: (stream number, its mailbox).
    streams: HashMap<String, Vec<(u64, Arc<Mailbox>)>>,
    next_stream: u64,
    /// Relayed requests this replica waits on, by request id (an upload id for evidence).
    waiting: HashMap<String, Waiter>,
    /// Upload ids taken or abandoned here (in process): the device, and until when.
    gone: HashMap<String, (String, Instant)>,
    /// Accounts whose pages follow their changes through this replica, by account id.
    accounts: HashMap<String, AccountFollowers>,
    /// Jobs whose pages watch their news through this replica, by job id.
    jobs: HashMap<String, JobWatchers>,
    /// Pipes read on this replica, by name: (pipe number, its sender).
    pipes: HashMap<String, (u64, mpsc::Sender<String>)>,
    /// Tickets (in process only; with Redis they live there): value and expiry, by key.
    tickets: HashMap<String, (String, Instant)>,
}

/// The open account streams of one account on this replica.
struct AccountFollowers {
    sender: broadcast::Sender<AccountEvent>,
    /// Open [`AccountStream`]s; the entry (and the Redis subscription) goes with the last.
    count: usize,
}

/// What happened to a job, for the pages that watch it (`job_feeds`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum JobNews {
    /// Lines appended, in order and numbered without a gap, as they were stored (no
    /// `entry`: each watcher reads them on its own timeline).
    Lines { events: Vec<JobEvent> },
    /// The job's state, attempt, cancel request or outcome changed, and lines may have
    /// been appended with it: read the job again.
    Changed,
}

/// The watchers of one job on this replica.
struct JobWatchers {
    sender: broadcast::Sender<Arc<JobNews>>,
    /// Open followers; the entry (and the Redis subscription) goes with the last.
    count: usize,
}

/// A change to an account's data that its open pages follow. Hints like frames: a page that
/// misses one catches up at its next periodic read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum AccountEvent {
    /// Decisions were asked, answered, expired or withdrawn.
    #[serde(rename_all = "camelCase")]
    Decisions {
        change: DecisionChange,
        /// The decision that changed, when it is one (a run ending may settle several).
        decision_id: Option<DecisionId>,
    },
    /// Sessions of the account ended: an open stream checks that its own still holds.
    SessionsEnded,
    /// The account left a space, or was removed or given another role there: its open
    /// streams of that space check that they may still follow it.
    #[serde(rename_all = "camelCase")]
    SpaceChanged { space_id: String },
}

struct Waiter {
    /// Only this device may answer.
    device_id: String,
    answer: oneshot::Sender<Answer>,
    /// Set for an evidence request: what its upload id is bound to.
    upload: Option<UploadBinding>,
    /// Set for a session deletion: what its request id is bound to.
    deletion: Option<DeletionBinding>,
}

impl Waiter {
    /// Whether `answer` is the kind of answer this request waits for.
    fn takes(&self, answer: &Answer) -> bool {
        match answer {
            Answer::File(_) => self.upload.is_none() && self.deletion.is_none(),
            Answer::Evidence(_) => self.upload.is_some(),
            Answer::Deletion(_) => self.deletion.is_some(),
        }
    }

    /// Whether its id is single use and remembered once gone (410, not 404).
    fn single_use(&self) -> bool {
        self.upload.is_some() || self.deletion.is_some()
    }
}

/// A device's answer to a relayed request.
#[derive(Serialize, Deserialize)]
enum Answer {
    File(FileAnswer),
    Evidence(EvidenceAnswer),
    Deletion(SessionDeletion),
}

/// What a session deletion's request id is bound to: one job of one account (and, in its
/// ticket, one device).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeletionBinding {
    pub account_id: AccountId,
    pub job_id: JobId,
}

/// What a relayed request is bound to besides its device.
enum Bound {
    /// A file request: answered once, forgotten after.
    Nothing,
    Upload(UploadBinding),
    Deletion(DeletionBinding),
}

/// What an evidence upload id is bound to: one job of one account, one file, one action
/// (and, in its ticket, one device).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UploadBinding {
    pub account_id: AccountId,
    pub job_id: JobId,
    pub evidence_id: String,
    pub action: EvidenceAction,
}

/// How the device's upload ended, as the replica that took it tells the waiting request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum EvidenceAnswer {
    /// The bytes are in the preview store.
    Preview(PreviewReady),
    /// The bytes are in the blob store and the row says so.
    Released(Box<Evidence>),
    /// The computer deleted the file and its variants; so were their rows.
    Discarded,
    /// The computer refused; `kept` when its evidence upload is off.
    Refused { kept: bool, reason: String },
}

/// An upload id taken by the device's upload: where its answer goes.
pub struct TakenUpload {
    id: String,
    to: Destination,
}

enum Destination {
    Here(oneshot::Sender<Answer>),
    Replica(String),
}

enum Bus {
    InProcess,
    Redis(Box<RedisBus>),
}

struct RedisBus {
    client: redis::Client,
    /// The connection commands go through; replaced after it fails.
    publisher: Mutex<Option<MultiplexedConnection>>,
    /// Subscription changes, in order, for the listener that owns the subscriber connection.
    commands: mpsc::UnboundedSender<Command>,
    /// Taken once by [`Hub::listen`].
    command_queue: Mutex<Option<mpsc::UnboundedReceiver<Command>>>,
}

enum Command {
    Subscribe(String, oneshot::Sender<bool>),
    Unsubscribe(String),
}

/// What a relay key holds: who may answer, which replica waits, and for an evidence
/// request what its upload id is bound to.
#[derive(Serialize, Deserialize)]
struct RelayTicket {
    device: String,
    replica: String,
    #[serde(default)]
    upload: Option<UploadBinding>,
    #[serde(default)]
    deletion: Option<DeletionBinding>,
}

/// An answer on its way to the replica that waits for it.
#[derive(Serialize, Deserialize)]
struct RelayEnvelope {
    id: String,
    answer: Answer,
}

/// The frames waiting for one open stream, at most [`STREAM_BUFFER`], and the waker of its
/// reader.
///
/// Every connected device holds one for as long as it is connected, almost always empty: it
/// costs about a hundred bytes then and allocates only while frames wait. (A tokio channel
/// allocates a block of 32 frames up front, about 3 KiB per connected device.) Its reader
/// polls it ([`EventStream::poll_frame`]), so the stream can be served by the connection's
/// own task.
#[derive(Default)]
struct Mailbox {
    /// A std mutex: it is never held across an await.
    waiting: Mutex<Waiting>,
}

#[derive(Default)]
struct Waiting {
    frames: VecDeque<ServerFrame>,
    /// The reader that found no frame, woken by the next one.
    reader: Option<Waker>,
    /// Set once a frame was dropped because [`STREAM_BUFFER`] frames already waited.
    dropped: bool,
}

impl Mailbox {
    /// Queues `frame` unless [`STREAM_BUFFER`] frames already wait; says whether it did.
    fn offer(&self, frame: ServerFrame) -> bool {
        let reader = {
            let mut waiting = self.lock();
            if waiting.frames.len() >= STREAM_BUFFER {
                waiting.dropped = true;
                return false;
            }
            waiting.frames.push_back(frame);
            waiting.reader.take()
        };
        if let Some(reader) = reader {
            reader.wake();
        }
        true
    }

    /// The oldest waiting frame, or the reader is woken by the next; an emptied queue gives
    /// its memory back.
    fn poll_take(&self, cx: &mut std::task::Context<'_>) -> Poll<ServerFrame> {
        let mut waiting = self.lock();
        let Some(frame) = waiting.frames.pop_front() else {
            if !waiting
                .reader
                .as_ref()
                .is_some_and(|reader| reader.will_wake(cx.waker()))
            {
                waiting.reader = Some(cx.waker().clone());
            }
            return Poll::Pending;
        };
        if waiting.frames.is_empty() {
            waiting.frames.shrink_to_fit();
        }
        Poll::Ready(frame)
    }

    fn lock(&self) -> MutexGuard<'_, Waiting> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// An open event stream of one device on this replica. Dropping it closes the registration
/// (and, for the device's last stream here, its Redis subscription).
pub struct EventStream {
    hub: Hub,
    device_id: String,
    number: u64,
    mailbox: Arc<Mailbox>,
}

impl EventStream {
    /// The next frame for this stream, in the order they were sent, or `Pending` (and the
    /// task woken by the next). A frame stays queued until this returns it.
    pub fn poll_frame(&self, cx: &mut std::task::Context<'_>) -> Poll<ServerFrame> {
        self.mailbox.poll_take(cx)
    }

    /// Whether a frame for this stream may have been lost: one was dropped from its full
    /// mailbox, or frames come through Redis (published while this replica's subscriber was
    /// away, they are gone). In process, every frame sent after the stream opened reaches it.
    pub fn may_have_missed_frames(&self) -> bool {
        matches!(self.hub.inner.bus, Bus::Redis(_)) || self.mailbox.lock().dropped
    }

    /// The next frame for this stream; waits while there is none. Cancel-safe.
    pub async fn next_frame(&self) -> ServerFrame {
        std::future::poll_fn(|cx| self.poll_frame(cx)).await
    }
}

impl Drop for EventStream {
    fn drop(&mut self) {
        self.hub.detach(&self.device_id, self.number);
    }
}

/// An open follower of one account's changes on this replica (a page's event stream).
/// Dropping it closes the registration (and, for the account's last one here, its Redis
/// subscription).
pub struct AccountStream {
    hub: Hub,
    account_id: String,
    /// The account's events.
    pub events: broadcast::Receiver<AccountEvent>,
}

impl Drop for AccountStream {
    fn drop(&mut self) {
        self.hub.unfollow(&self.account_id);
    }
}

/// Removes a waiting request when the web request ends, however it ends.
struct WaitGuard<'a> {
    hub: &'a Hub,
    id: String,
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        let mut local = self.hub.local();
        let abandoned = local.waiting.remove(&self.id);
        if let Some(waiter) = abandoned.filter(Waiter::single_use) {
            remember_gone(&mut local, &self.id, waiter.device_id);
        }
    }
}

/// Remembers an upload id that was taken or abandoned, dropping expired ones.
fn remember_gone(local: &mut Local, id: &str, device_id: String) {
    let now = Instant::now();
    local.gone.retain(|_, (_, until)| *until > now);
    local
        .gone
        .insert(id.to_owned(), (device_id, now + GONE_TTL));
}

impl Hub {
    /// The in-process hub of a single server.
    pub fn in_process() -> Hub {
        Hub::with_bus(Bus::InProcess)
    }

    /// The hub for `redis_url`, or the in-process one when there is none. Checks that Redis
    /// answers, so a wrong URL fails at start-up.
    ///
    /// # Errors
    /// When the URL is malformed or Redis does not answer.
    pub async fn connect(redis_url: Option<&str>) -> anyhow::Result<Hub> {
        let Some(url) = redis_url else {
            return Ok(Hub::in_process());
        };
        let client = redis::Client::open(url).context("parsing TETHER_REDIS_URL")?;
        let mut connection = client
            .get_multiplexed_async_connection_with_config(&connection_config())
            .await
            .context("connecting to Redis")?;
        let _: String = redis::cmd("PING")
            .query_async(&mut connection)
            .await
            .context("pinging Redis")?;
        let (commands, command_queue) = mpsc::unbounded_channel();
        Ok(Hub::with_bus(Bus::Redis(Box::new(RedisBus {
            client,
            publisher: Mutex::new(Some(connection)),
            commands,
            command_queue: Mutex::new(Some(command_queue)),
        }))))
    }

    fn with_bus(bus: Bus) -> Hub {
        // With Redis the memory is trusted once the subscriber hears the other replicas.
        let memories = Memories::new(matches!(bus, Bus::InProcess));
        Hub {
            inner: Arc::new(Inner {
                replica: credentials::random_token(""),
                local: Mutex::new(Local::default()),
                bus,
                memories,
            }),
        }
    }

    /// The device tokens this replica checked recently.
    pub fn device_tokens(&self) -> &DeviceTokens {
        &self.inner.memories.devices
    }

    /// The API tokens this replica checked recently.
    pub fn api_tokens(&self) -> &ApiTokens {
        &self.inner.memories.api
    }

    /// Forgets `device_id`'s token on every replica (it was revoked, removed or paired
    /// again); on this one before it returns.
    pub async fn forget_device_token(&self, device_id: &DeviceId) {
        self.forget_everywhere(device_id.as_str()).await;
    }

    /// Forgets `user_id`'s API tokens on every replica (one was revoked, or the password
    /// changed); on this one before it returns.
    pub async fn forget_api_tokens(&self, user_id: &UserId) {
        self.forget_everywhere(user_id.as_str()).await;
    }

    /// The accounts this replica found with no browser that wants to hear of ended jobs.
    pub fn quiet_accounts(&self) -> &QuietAccounts {
        &self.inner.memories.quiet
    }

    /// A browser of `account_id` may now want to hear of ended jobs: every replica forgets
    /// that the account was quiet; this one before it returns.
    pub async fn forget_quiet_account(&self, account_id: &AccountId) {
        self.forget_everywhere(account_id.as_str()).await;
    }

    async fn forget_everywhere(&self, owner: &str) {
        self.inner.memories.forget(owner);
        if let Bus::Redis(bus) = &self.inner.bus {
            let published = bus
                .query::<i64>(redis::cmd("PUBLISH").arg(tokens_channel()).arg(owner))
                .await;
            if let Err(error) = published {
                tracing::warn!(owner, %error, "a forget was not published");
            }
        }
    }

    /// A device's token ended: every replica forgets it, and its open streams are told.
    pub async fn device_revoked(&self, device_id: &DeviceId) {
        self.forget_device_token(device_id).await;
        self.notify(device_id, ServerFrame::DeviceRevoked).await;
    }

    /// `"in-process"` or `"redis"`, for logs.
    pub fn bus_name(&self) -> &'static str {
        match self.inner.bus {
            Bus::InProcess => "in-process",
            Bus::Redis(_) => "redis",
        }
    }

    fn local(&self) -> MutexGuard<'_, Local> {
        // A panic while holding this lock leaves plain maps behind; keep using them.
        self.inner
            .local
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers an event stream of `device_id`. With Redis, the first stream of a device on
    /// this replica subscribes to its channel before this returns, so a frame published after
    /// the stream opened reaches it.
    pub async fn open_stream(&self, device_id: &DeviceId) -> EventStream {
        let mailbox = Arc::new(Mailbox::default());
        let (number, subscribed) = {
            let mut local = self.local();
            local.next_stream += 1;
            let number = local.next_stream;
            // A device almost always has one stream; room for more is made when it has.
            let streams = local
                .streams
                .entry(device_id.to_string())
                .or_insert_with(|| Vec::with_capacity(1));
            streams.push((number, mailbox.clone()));
            let first = streams.len() == 1;
            let subscribed = match &self.inner.bus {
                Bus::Redis(bus) if first => {
                    let (ack, acked) = oneshot::channel();
                    let command = Command::Subscribe(device_channel(device_id.as_str()), ack);
                    // Sent under the lock, so subscribes and unsubscribes keep their order.
                    bus.commands.send(command).ok().map(|()| acked)
                }
                _ => None,
            };
            (number, subscribed)
        };
        if let Some(acked) = subscribed {
            match tokio::time::timeout(SUBSCRIBE_TIMEOUT, acked).await {
                Ok(Ok(true)) => {}
                _ => tracing::warn!(
                    device_id = %device_id,
                    "no Redis subscription for a new event stream; it gets frames once Redis is back"
                ),
            }
        }
        EventStream {
            hub: self.clone(),
            device_id: device_id.to_string(),
            number,
            mailbox,
        }
    }

    fn detach(&self, device_id: &str, number: u64) {
        let mut local = self.local();
        let Some(streams) = local.streams.get_mut(device_id) else {
            return;
        };
        streams.retain(|(n, _)| *n != number);
        if streams.is_empty() {
            local.streams.remove(device_id);
            if let Bus::Redis(bus) = &self.inner.bus {
                let _ = bus
                    .commands
                    .send(Command::Unsubscribe(device_channel(device_id)));
            }
        }
    }

    /// Follows the changes of `account_id`. With Redis, the account's first follower on this
    /// replica subscribes to its channel before this returns, so an event published after the
    /// stream opened reaches it.
    pub async fn follow_account(&self, account_id: &AccountId) -> AccountStream {
        let (events, subscribed) = {
            let mut local = self.local();
            let followers = local
                .accounts
                .entry(account_id.to_string())
                .or_insert_with(|| AccountFollowers {
                    sender: broadcast::channel(ACCOUNT_BUFFER).0,
                    count: 0,
                });
            followers.count += 1;
            let events = followers.sender.subscribe();
            let first = followers.count == 1;
            // Asked under the lock, so subscribes and unsubscribes keep their order.
            let channel = account_channel(account_id.as_str());
            (events, first.then(|| self.subscribe(channel)).flatten())
        };
        if !Hub::subscribed(subscribed).await {
            tracing::warn!(
                account_id = %account_id,
                "no Redis subscription for an account stream; it catches up by re-reading"
            );
        }
        AccountStream {
            hub: self.clone(),
            account_id: account_id.to_string(),
            events,
        }
    }

    fn unfollow(&self, account_id: &str) {
        let mut local = self.local();
        let Some(followers) = local.accounts.get_mut(account_id) else {
            return;
        };
        followers.count = followers.count.saturating_sub(1);
        if followers.count == 0 {
            local.accounts.remove(account_id);
            self.unsubscribe(account_channel(account_id));
        }
    }

    /// With Redis, asks the listener to subscribe `channel`; the answer says whether it did.
    /// Called under the `local` lock, so subscribes and unsubscribes keep their order.
    fn subscribe(&self, channel: String) -> Option<oneshot::Receiver<bool>> {
        let Bus::Redis(bus) = &self.inner.bus else {
            return None;
        };
        let (ack, acked) = oneshot::channel();
        bus.commands
            .send(Command::Subscribe(channel, ack))
            .ok()
            .map(|()| acked)
    }

    /// With Redis, asks the listener to unsubscribe `channel` (under the `local` lock).
    fn unsubscribe(&self, channel: String) {
        if let Bus::Redis(bus) = &self.inner.bus {
            let _ = bus.commands.send(Command::Unsubscribe(channel));
        }
    }

    /// Waits up to [`SUBSCRIBE_TIMEOUT`] for a subscription asked with [`Hub::subscribe`];
    /// whether it holds (none asked: it does).
    async fn subscribed(acked: Option<oneshot::Receiver<bool>>) -> bool {
        let Some(acked) = acked else {
            return true;
        };
        matches!(
            tokio::time::timeout(SUBSCRIBE_TIMEOUT, acked).await,
            Ok(Ok(true))
        )
    }

    /// Hands `event` to this replica's followers of `account_id`.
    fn deliver_to_account(&self, account_id: &str, event: AccountEvent) {
        if let Some(followers) = self.local().accounts.get(account_id) {
            // No receiver left is fine: the last follower is closing.
            let _ = followers.sender.send(event);
        }
    }

    /// Tells every follower of `account_id`, on any replica, about `event`. A hint: failures
    /// are logged, and followers re-read now and then anyway.
    pub async fn publish_account(&self, account_id: &AccountId, event: AccountEvent) {
        match &self.inner.bus {
            Bus::InProcess => self.deliver_to_account(account_id.as_str(), event),
            Bus::Redis(bus) => {
                let published = match serde_json::to_string(&event) {
                    Ok(payload) => bus
                        .query::<i64>(
                            redis::cmd("PUBLISH")
                                .arg(account_channel(account_id.as_str()))
                                .arg(payload),
                        )
                        .await
                        .map(drop),
                    Err(error) => Err(ApiError::from(error)),
                };
                if let Err(error) = published {
                    tracing::warn!(account_id = %account_id, %error, "account event not sent");
                }
            }
        }
    }

    /// Checks the bus answers: always in process, a `PING` with Redis.
    ///
    /// # Errors
    /// `unavailable` when Redis does not answer.
    pub async fn ping(&self) -> Result<(), ApiError> {
        match &self.inner.bus {
            Bus::InProcess => Ok(()),
            Bus::Redis(bus) => bus.query::<String>(&redis::cmd("PING")).await.map(drop),
        }
    }

    /// How many devices have an open stream on this replica.
    pub fn local_stream_count(&self) -> usize {
        self.local().streams.len()
    }

    /// Whether this replica holds an open stream of `device_id`.
    pub fn holds_stream(&self, device_id: &DeviceId) -> bool {
        self.local().streams.contains_key(device_id.as_str())
    }

    /// Hands `frame` to this replica's streams of `device_id`; returns how many took it.
    fn deliver(&self, device_id: &str, frame: &ServerFrame) -> usize {
        let local = self.local();
        let Some(streams) = local.streams.get(device_id) else {
            return 0;
        };
        let mut delivered = 0;
        for (_, mailbox) in streams {
            if mailbox.offer(frame.clone()) {
                delivered += 1;
            } else {
                tracing::warn!(device_id, "event stream buffer full; frame dropped");
            }
        }
        delivered
    }

    /// Sends `frame` to every open stream of `device_id`, on any replica. Returns how many
    /// receivers took it (in process: streams; with Redis: replicas); 0 means the device has
    /// no open stream.
    ///
    /// # Errors
    /// 503 `unavailable` when Redis cannot be reached.
    pub async fn send(&self, device_id: &DeviceId, frame: &ServerFrame) -> Result<usize, ApiError> {
        match &self.inner.bus {
            Bus::InProcess => Ok(self.deliver(device_id.as_str(), frame)),
            Bus::Redis(bus) => {
                let payload = serde_json::to_string(frame)?;
                let receivers: i64 = bus
                    .query(
                        redis::cmd("PUBLISH")
                            .arg(device_channel(device_id.as_str()))
                            .arg(payload),
                    )
                    .await?;
                Ok(usize::try_from(receivers).unwrap_or(0))
            }
        }
    }

    /// Like [`Hub::send`] for a hint whose loss costs only latency: failures are logged.
    pub async fn notify(&self, device_id: &DeviceId, frame: ServerFrame) {
        if let Err(error) = self.send(device_id, &frame).await {
            tracing::warn!(device_id = %device_id, %error, "frame not sent");
        }
    }

    /// Wakes every device of `account_id` with queued work (a run slot of the account freed).
    pub async fn wake_queued(&self, store: &Store, account_id: &AccountId) {
        match job_rows::devices_with_queued_work(store, account_id).await {
            Ok(devices) => {
                for device_id in &devices {
                    self.notify(device_id, ServerFrame::Wake).await;
                }
            }
            Err(error) => tracing::warn!(account_id = %account_id, %error, "no wake-ups sent"),
        }
    }

    /// Relays a `file.request` to the device and waits up to `timeout` for its answer.
    ///
    /// # Errors
    /// 409 `device_offline` when the device has no open stream, 504 `device_timeout` when it
    /// does not answer in time, 503 `unavailable` when Redis cannot be reached.
    pub async fn request_file(
        &self,
        device_id: &DeviceId,
        job_id: &JobId,
        op: FileOp,
        path: String,
        against: Option<DiffAgainst>,
        timeout: Duration,
    ) -> Result<FileAnswer, ApiError> {
        let id = credentials::random_token("frq_");
        let frame = ServerFrame::FileRequest {
            id: id.clone(),
            job_id: job_id.clone(),
            op,
            path,
            // The device stops working on the request by then.
            timeout_ms: Some(timeout_ms(timeout)),
            against,
        };
        match self
            .relay(device_id, &id, Bound::Nothing, &frame, timeout)
            .await?
        {
            Answer::File(answer) => Ok(answer),
            _ => Err(ApiError::internal(&"another answer to a file request")),
        }
    }

    /// Relays an `evidence.request` under a fresh single-use upload id bound to `binding`,
    /// and waits up to `timeout` for the device's upload to be taken care of.
    ///
    /// # Errors
    /// As [`Hub::request_file`].
    pub async fn request_evidence(
        &self,
        device_id: &DeviceId,
        binding: UploadBinding,
        timeout: Duration,
    ) -> Result<EvidenceAnswer, ApiError> {
        let upload_id = credentials::random_token("eup_");
        let frame = ServerFrame::EvidenceRequest {
            id: credentials::random_token("erq_"),
            job_id: binding.job_id.clone(),
            evidence_id: binding.evidence_id.clone(),
            action: binding.action,
            upload_id: upload_id.clone(),
            timeout_ms: Some(timeout_ms(timeout)),
        };
        let answer = self
            .relay(
                device_id,
                &upload_id,
                Bound::Upload(binding),
                &frame,
                timeout,
            )
            .await?;
        match answer {
            Answer::Evidence(answer) => Ok(answer),
            _ => Err(ApiError::internal(&"another answer to an evidence request")),
        }
    }

    /// Relays a `session.delete` under a fresh single-use request id bound to `binding`,
    /// and waits up to `timeout` for the device's answer.
    ///
    /// # Errors
    /// As [`Hub::request_file`].
    pub async fn request_deletion(
        &self,
        device_id: &DeviceId,
        binding: DeletionBinding,
        timeout: Duration,
    ) -> Result<SessionDeletion, ApiError> {
        let id = credentials::random_token("sdl_");
        let frame = ServerFrame::SessionDelete {
            id: id.clone(),
            job_id: binding.job_id.clone(),
            timeout_ms: Some(timeout_ms(timeout)),
        };
        let answer = self
            .relay(device_id, &id, Bound::Deletion(binding), &frame, timeout)
            .await?;
        match answer {
            Answer::Deletion(answer) => Ok(answer),
            _ => Err(ApiError::internal(&"another answer to a session deletion")),
        }
    }

    /// Registers the waiting request `id` (with its Redis ticket), sends `frame` and waits
    /// up to `timeout` for the answer.
    async fn relay(
        &self,
        device_id: &DeviceId,
        id: &str,
        bound: Bound,
        frame: &ServerFrame,
        timeout: Duration,
    ) -> Result<Answer, ApiError> {
        let (answer, answered) = oneshot::channel();
        let (upload, deletion) = match bound {
            Bound::Nothing => (None, None),
            Bound::Upload(binding) => (Some(binding), None),
            Bound::Deletion(binding) => (None, Some(binding)),
        };
        let gone_for = (upload.is_some() || deletion.is_some()).then_some(device_id);
        self.local().waiting.insert(
            id.to_owned(),
            Waiter {
                device_id: device_id.to_string(),
                answer,
                upload: upload.clone(),
                deletion: deletion.clone(),
            },
        );
        let _guard = WaitGuard {
            hub: self,
            id: id.to_owned(),
        };
        if let Bus::Redis(bus) = &self.inner.bus {
            let ticket = serde_json::to_string(&RelayTicket {
                device: device_id.to_string(),
                replica: self.inner.replica.clone(),
                upload,
                deletion,
            })?;
            let ttl = timeout.as_secs().saturating_add(5);
            let set: Option<String> = bus
                .query(
                    redis::cmd("SET")
                        .arg(relay_key(id))
                        .arg(ticket)
                        .arg("NX")
                        .arg("EX")
                        .arg(ttl),
                )
                .await?;
            if set.is_none() {
                return Err(ApiError::internal(&"relay id collision"));
            }
        }
        let receivers = self.send(device_id, frame).await?;
        if receivers == 0 {
            self.forget_ticket(id, gone_for).await;
            return Err(ApiError::new(
                Code::DeviceOffline,
                "The computer is not connected; try again when it is online.",
            ));
        }
        match tokio::time::timeout(timeout, answered).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) | Err(_) => {
                self.forget_ticket(id, gone_for).await;
                Err(ApiError::new(
                    Code::DeviceTimeout,
                    "The computer did not answer in time.",
                ))
            }
        }
    }

    /// Deletes a relay ticket; for an upload id (`gone_for` its device) remembers it gone.
    async fn forget_ticket(&self, id: &str, gone_for: Option<&DeviceId>) {
        if let Bus::Redis(bus) = &self.inner.bus {
            let deleted: Result<i64, ApiError> =
                bus.query(redis::cmd("DEL").arg(relay_key(id))).await;
            if let Err(error) = deleted {
                tracing::warn!(%error, "relay key not deleted; it expires by itself");
            }
            if let Some(device_id) = gone_for {
                bus.remember_gone(id, device_id.as_str()).await;
            }
        }
    }

    /// The device's answer to relayed request `request_id`, posted to any replica: completes
    /// the web request waiting for it, once.
    ///
    /// # Errors
    /// 404 `not_found` for an unknown, answered or timed-out request, or one asked of another
    /// device; 503 `unavailable` when Redis cannot be reached.
    pub async fn answer_file(
        &self,
        device_id: &DeviceId,
        request_id: &str,
        answer: FileAnswer,
    ) -> Result<(), ApiError> {
        let unknown = || ApiError::not_found("file request");
        let answer = Answer::File(answer);
        let Bus::Redis(bus) = &self.inner.bus else {
            return self.complete_locally(Some(device_id.as_str()), request_id, answer);
        };
        if request_id.len() > 100 {
            return Err(unknown());
        }
        // Read first: another device's answer must not consume the request.
        let ticket: Option<String> = bus
            .query(redis::cmd("GET").arg(relay_key(request_id)))
            .await?;
        let ticket: RelayTicket = ticket
            .and_then(|json| serde_json::from_str(&json).ok())
            .filter(|ticket: &RelayTicket| {
                ticket.device == device_id.as_str()
                    && ticket.upload.is_none()
                    && ticket.deletion.is_none()
            })
            .ok_or_else(unknown)?;
        let taken: Option<String> = bus
            .query(redis::cmd("GETDEL").arg(relay_key(request_id)))
            .await?;
        if taken.is_none() {
            return Err(unknown());
        }
        if ticket.replica == self.inner.replica {
            return self.complete_locally(None, request_id, answer);
        }
        let envelope = serde_json::to_string(&RelayEnvelope {
            id: request_id.to_owned(),
            answer,
        })?;
        let receivers: i64 = bus
            .query(
                redis::cmd("PUBLISH")
                    .arg(replica_channel(&ticket.replica))
                    .arg(envelope),
            )
            .await?;
        if receivers == 0 {
            return Err(unknown());
        }
        Ok(())
    }

    /// Hands `answer` to the request this replica waits on. `device_id` is checked when
    /// given (in process, with the kind of request); a Redis ticket was checked already.
    fn complete_locally(
        &self,
        device_id: Option<&str>,
        request_id: &str,
        answer: Answer,
    ) -> Result<(), ApiError> {
        let waiter = {
            let mut local = self.local();
            let mine = local.waiting.get(request_id).is_some_and(|waiter| {
                device_id.is_none_or(|device| waiter.device_id == device && waiter.takes(&answer))
            });
            if mine {
                local.waiting.remove(request_id)
            } else {
                None
            }
        };
        let waiter = waiter.ok_or_else(|| ApiError::not_found("file request"))?;
        waiter
            .answer
            .send(answer)
            .map_err(|_| ApiError::not_found("file request"))
    }

    /// What upload id `upload_id` is bound to, when `device_id` may use it now; nothing is
    /// taken (the upload is checked first).
    ///
    /// # Errors
    /// 404 `not_found` for an unknown id or another device's, 410 `upload_gone` for one used
    /// already or whose request gave up; 503 `unavailable` when Redis cannot be reached.
    pub async fn upload_ticket(
        &self,
        device_id: &DeviceId,
        upload_id: &str,
    ) -> Result<UploadBinding, ApiError> {
        let Bus::Redis(bus) = &self.inner.bus else {
            let local = self.local();
            let binding = local
                .waiting
                .get(upload_id)
                .filter(|waiter| waiter.device_id == device_id.as_str())
                .and_then(|waiter| waiter.upload.clone());
            return binding.ok_or_else(|| unusable_here(&local, device_id, upload_id));
        };
        if upload_id.len() > 100 {
            return Err(ApiError::not_found("upload"));
        }
        let ticket: Option<String> = bus
            .query(redis::cmd("GET").arg(relay_key(upload_id)))
            .await?;
        let binding = ticket
            .and_then(|json| serde_json::from_str::<RelayTicket>(&json).ok())
            .filter(|ticket| ticket.device == device_id.as_str())
            .and_then(|ticket| ticket.upload);
        match binding {
            Some(binding) => Ok(binding),
            None => Err(bus.unusable(device_id, upload_id).await?),
        }
    }

    /// Takes upload id `upload_id` for `device_id`: from now on it is gone for every other
    /// use. The answer then goes through [`Hub::deliver_upload`].
    ///
    /// # Errors
    /// As [`Hub::upload_ticket`].
    pub async fn take_upload(
        &self,
        device_id: &DeviceId,
        upload_id: &str,
    ) -> Result<TakenUpload, ApiError> {
        let Bus::Redis(bus) = &self.inner.bus else {
            return self.take_here(Some(device_id), upload_id, |waiter| waiter.upload.is_some());
        };
        // Checked before it is taken: another device's upload must not consume it.
        self.upload_ticket(device_id, upload_id).await?;
        let taken: Option<String> = bus
            .query(redis::cmd("GETDEL").arg(relay_key(upload_id)))
            .await?;
        let Some(ticket) = taken.and_then(|json| serde_json::from_str::<RelayTicket>(&json).ok())
        else {
            return Err(bus.unusable(device_id, upload_id).await?);
        };
        bus.remember_gone(upload_id, device_id.as_str()).await;
        if ticket.replica == self.inner.replica {
            return self.take_here(None, upload_id, |waiter| waiter.upload.is_some());
        }
        Ok(TakenUpload {
            id: upload_id.to_owned(),
            to: Destination::Replica(ticket.replica),
        })
    }

    /// Takes the waiting request of `upload_id` on this replica, when it is `of_kind`
    /// (`device_id` checked when given).
    fn take_here(
        &self,
        device_id: Option<&DeviceId>,
        upload_id: &str,
        of_kind: fn(&Waiter) -> bool,
    ) -> Result<TakenUpload, ApiError> {
        let mut local = self.local();
        let mine = local.waiting.get(upload_id).is_some_and(|waiter| {
            of_kind(waiter) && device_id.is_none_or(|device| waiter.device_id == device.as_str())
        });
        let Some(waiter) = mine.then(|| local.waiting.remove(upload_id)).flatten() else {
            return Err(match device_id {
                Some(device_id) => unusable_here(&local, device_id, upload_id),
                None => upload_gone(),
            });
        };
        remember_gone(&mut local, upload_id, waiter.device_id);
        Ok(TakenUpload {
            id: upload_id.to_owned(),
            to: Destination::Here(waiter.answer),
        })
    }

    /// Hands the outcome of a taken upload to the request waiting for it, on any replica.
    ///
    /// # Errors
    /// 410 `upload_gone` when that request gave up meanwhile; 503 `unavailable` when Redis
    /// cannot be reached.
    pub async fn deliver_upload(
        &self,
        taken: TakenUpload,
        answer: EvidenceAnswer,
    ) -> Result<(), ApiError> {
        self.deliver_taken(taken, Answer::Evidence(answer)).await
    }

    /// What session deletion `request_id` is bound to, taken for `device_id`: from now on it
    /// is gone for every other use. The answer then goes through [`Hub::deliver_deletion`].
    ///
    /// # Errors
    /// 404 `not_found` for an unknown id or another device's, 410 `upload_gone` for one
    /// answered already or whose request gave up; 503 `unavailable` when Redis cannot be
    /// reached.
    pub async fn take_deletion(
        &self,
        device_id: &DeviceId,
        request_id: &str,
    ) -> Result<(DeletionBinding, TakenUpload), ApiError> {
        let deletion = |waiter: &Waiter| waiter.deletion.is_some();
        let Bus::Redis(bus) = &self.inner.bus else {
            let binding = self
                .local()
                .waiting
                .get(request_id)
                .filter(|waiter| waiter.device_id == device_id.as_str())
                .and_then(|waiter| waiter.deletion.clone());
            let taken = self
                .take_here(Some(device_id), request_id, deletion)
                .map_err(as_deletion)?;
            let binding = binding.ok_or_else(|| as_deletion(upload_gone()))?;
            return Ok((binding, taken));
        };
        if request_id.len() > 100 {
            return Err(as_deletion(ApiError::not_found("upload")));
        }
        // Read first: another device's answer must not consume it.
        let ticket: Option<String> = bus
            .query(redis::cmd("GET").arg(relay_key(request_id)))
            .await?;
        let binding = ticket
            .and_then(|json| serde_json::from_str::<RelayTicket>(&json).ok())
            .filter(|ticket| ticket.device == device_id.as_str())
            .and_then(|ticket| ticket.deletion);
        let Some(binding) = binding else {
            return Err(as_deletion(bus.unusable(device_id, request_id).await?));
        };
        let taken: Option<String> = bus
            .query(redis::cmd("GETDEL").arg(relay_key(request_id)))
            .await?;
        let Some(ticket) = taken.and_then(|json| serde_json::from_str::<RelayTicket>(&json).ok())
        else {
            return Err(as_deletion(bus.unusable(device_id, request_id).await?));
        };
        bus.remember_gone(request_id, device_id.as_str()).await;
        if ticket.replica == self.inner.replica {
            let taken = self
                .take_here(None, request_id, deletion)
                .map_err(as_deletion)?;
            return Ok((binding, taken));
        }
        let to = Destination::Replica(ticket.replica);
        let id = request_id.to_owned();
        Ok((binding, TakenUpload { id, to }))
    }

    /// Hands the device's answer to a taken session deletion to the request waiting for
    /// it, on any replica.
    ///
    /// # Errors
    /// As [`Hub::deliver_upload`].
    pub async fn deliver_deletion(
        &self,
        taken: TakenUpload,
        answer: SessionDeletion,
    ) -> Result<(), ApiError> {
        self.deliver_taken(taken, Answer::Deletion(answer))
            .await
            .map_err(as_deletion)
    }

    async fn deliver_taken(&self, taken: TakenUpload, answer: Answer) -> Result<(), ApiError> {
        match (taken.to, &self.inner.bus) {
            (Destination::Here(sender), _) => sender.send(answer).map_err(|_| upload_gone()),
            (Destination::Replica(replica), Bus::Redis(bus)) => {
                let envelope = serde_json::to_string(&RelayEnvelope {
                    id: taken.id,
                    answer,
                })?;
                let receivers: i64 = bus
                    .query(
                        redis::cmd("PUBLISH")
                            .arg(replica_channel(&replica))
                            .arg(envelope),
                    )
                    .await?;
                if receivers == 0 {
                    return Err(upload_gone());
                }
                Ok(())
            }
            (Destination::Replica(_), Bus::InProcess) => Err(upload_gone()),
        }
    }

    /// Runs one Redis command when this hub has Redis (`None` in process), for parts of
    /// this replica that keep short-lived data there (previews).
    pub async fn redis_query<T: redis::FromRedisValue>(
        &self,
        command: &redis::Cmd,
    ) -> Option<Result<T, ApiError>> {
        match &self.inner.bus {
            Bus::InProcess => None,
            Bus::Redis(bus) => Some(bus.query(command).await),
        }
    }

    /// Runs the Redis subscriber until the task is dropped: delivers frames published for the
    /// devices whose streams this replica holds and answers for the requests it waits on, and
    /// reconnects (resubscribing) after Redis goes away. In process it just waits forever.
    ///
    /// # Errors
    /// Never returns on its own; the result type lets `run_until_stopped` select over it.
    pub async fn listen(self) -> anyhow::Result<()> {
        let Bus::Redis(bus) = &self.inner.bus else {
            std::future::pending::<()>().await;
            return Ok(());
        };
        let queue = bus
            .command_queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        let Some(mut commands) = queue else {
            anyhow::bail!("the hub's listener already runs");
        };
        loop {
            if let Err(error) = self.listen_once(bus, &mut commands).await {
                tracing::warn!(%error, "Redis subscriber lost; reconnecting");
            }
            // Token changes published meanwhile would be missed.
            self.inner.memories.set_trusted(false);
            tokio::time::sleep(RECONNECT_PAUSE).await;
        }
    }

    async fn listen_once(
        &self,
        bus: &RedisBus,
        commands: &mut mpsc::UnboundedReceiver<Command>,
    ) -> anyhow::Result<()> {
        let (mut sink, mut messages) = bus.client.get_async_pubsub().await?.split();
        let mut channels = vec![replica_channel(&self.inner.replica), tokens_channel()];
        {
            let local = self.local();
            channels.extend(local.streams.keys().map(|id| device_channel(id)));
            channels.extend(local.accounts.keys().map(|id| account_channel(id)));
            channels.extend(local.jobs.keys().map(|id| job_channel(id)));
            channels.extend(local.pipes.keys().map(|name| pipe_channel(name)));
        }
        sink.subscribe(&channels).await?;
        self.inner.memories.set_trusted(true);
        tracing::info!(n_channels = channels.len(), "Redis subscriber ready");
        loop {
            tokio::select! {
                command = commands.recv() => match command {
                    Some(Command::Subscribe(channel, ack)) => {
                        let subscribed = sink.subscribe(&channel).await;
                        let _ = ack.send(subscribed.is_ok());
                        subscribed?;
                    }
                    Some(Command::Unsubscribe(channel)) => sink.unsubscribe(&channel).await?,
                    None => return Ok(()),
                },
                message = messages.next() => {
                    let Some(message) = message else {
                        anyhow::bail!("the subscriber connection closed");
                    };
                    self.on_message(message.get_channel_name(), message.get_payload_bytes());
                }
            }
        }
    }

    fn on_message(&self, channel: &str, payload: &[u8]) {
        let Some(name) = channel.strip_prefix(KEY_PREFIX) else {
            return;
        };
        if let Some(device_id) = name.strip_prefix("dev:") {
            match serde_json::from_slice::<ServerFrame>(payload) {
                Ok(frame) => {
                    self.deliver(device_id, &frame);
                }
                Err(error) => tracing::warn!(%error, "undecodable frame on Redis"),
            }
        } else if let Some(account_id) = name.strip_prefix("acct:") {
            match serde_json::from_slice::<AccountEvent>(payload) {
                Ok(event) => self.deliver_to_account(account_id, event),
                Err(error) => tracing::warn!(%error, "undecodable account event on Redis"),
            }
        } else if let Some(job_id) = name.strip_prefix("job:") {
            self.deliver_job_message(job_id, payload);
        } else if let Some(pipe) = name.strip_prefix("pipe:") {
            self.deliver_to_pipe(pipe, payload);
        } else if name == "tokens" {
            match std::str::from_utf8(payload) {
                Ok(owner) => self.inner.memories.forget(owner),
                // Cannot tell whose token ended: forget them all.
                Err(_) => self.inner.memories.set_trusted(true),
            }
        } else if name.starts_with("replica:") {
            match serde_json::from_slice::<RelayEnvelope>(payload) {
                Ok(envelope) => {
                    // The web request may have given up meanwhile; that is fine.
                    let _ = self.complete_locally(None, &envelope.id, envelope.answer);
                }
                Err(error) => tracing::warn!(%error, "undecodable relay answer on Redis"),
            }
        }
    }
}

impl RedisBus {
    /// Remembers upload id `id` of `device` as gone on every replica; a hint (logged).
    async fn remember_gone(&self, id: &str, device: &str) {
        let set: Result<Option<String>, ApiError> = self
            .query(
                redis::cmd("SET")
                    .arg(gone_key(id))
                    .arg(device)
                    .arg("EX")
                    .arg(GONE_TTL.as_secs()),
            )
            .await;
        if let Err(error) = set {
            tracing::warn!(%error, "a used upload id is not remembered; its reuse reads 404");
        }
    }

    /// 410 for an upload id of `device_id` remembered gone, else 404.
    async fn unusable(&self, device_id: &DeviceId, upload_id: &str) -> Result<ApiError, ApiError> {
        let gone: Option<String> = self
            .query(redis::cmd("GET").arg(gone_key(upload_id)))
            .await?;
        Ok(if gone.as_deref() == Some(device_id.as_str()) {
            upload_gone()
        } else {
            ApiError::not_found("upload")
        })
    }

    /// Runs one command on the shared connection, reconnecting once it failed.
    async fn query<T: redis::FromRedisValue>(&self, command: &redis::Cmd) -> Result<T, ApiError> {
        let cached = self
            .publisher
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let mut connection = match cached {
            Some(connection) => connection,
            None => {
                let connection = self
                    .client
                    .get_multiplexed_async_connection_with_config(&connection_config())
                    .await
                    .map_err(redis_unavailable)?;
                *self
                    .publisher
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(connection.clone());
                connection
            }
        };
        command.query_async(&mut connection).await.map_err(|error| {
            if error.is_io_error() || error.is_connection_dropped() || error.is_timeout() {
                *self
                    .publisher
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
            }
            redis_unavailable(error)
        })
    }
}

fn connection_config() -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(5)))
        .set_response_timeout(Some(Duration::from_secs(5)))
}

fn redis_unavailable(error: redis::RedisError) -> ApiError {
    tracing::warn!(%error, "Redis call failed");
    ApiError::new(
        Code::Unavailable,
        "The relay service is unavailable; try again.",
    )
}

fn device_channel(device_id: &str) -> String {
    format!("{KEY_PREFIX}dev:{device_id}")
}

fn account_channel(account_id: &str) -> String {
    format!("{KEY_PREFIX}acct:{account_id}")
}

/// The Redis channel of a job's news ([`Hub::follow_job`]).
fn job_channel(job_id: &str) -> String {
    format!("{KEY_PREFIX}job:{job_id}")
}

/// The Redis channel of pipe `name` ([`Hub::open_pipe`]).
fn pipe_channel(name: &str) -> String {
    format!("{KEY_PREFIX}pipe:{name}")
}

/// The accounts a replica found with no browser that wants to hear of ended jobs.
pub type QuietAccounts = ReplicaMemory<AccountId>;

/// This replica's memories that `tether:tokens` clears; owners (device, user and account
/// ids) never collide, so a forget is applied to all of them.
struct Memories {
    devices: DeviceTokens,
    api: ApiTokens,
    quiet: QuietAccounts,
}

impl Memories {
    fn new(trusted: bool) -> Memories {
        Memories {
            devices: DeviceTokens::new(trusted),
            api: ApiTokens::new(trusted),
            quiet: QuietAccounts::new(trusted),
        }
    }

    fn forget(&self, owner: &str) {
        self.devices.forget(owner);
        self.api.forget(owner);
        self.quiet.forget(owner);
    }

    fn set_trusted(&self, trusted: bool) {
        self.devices.set_trusted(trusted);
        self.api.set_trusted(trusted);
        self.quiet.set_trusted(trusted);
    }
}

fn tokens_channel() -> String {
    format!("{KEY_PREFIX}tokens")
}

fn replica_channel(replica: &str) -> String {
    format!("{KEY_PREFIX}replica:{replica}")
}

fn relay_key(request_id: &str) -> String {
    format!("{KEY_PREFIX}relay:{request_id}")
}

/// 410 for an upload id of `device_id` remembered gone here, else 404.
fn unusable_here(local: &Local, device_id: &DeviceId, upload_id: &str) -> ApiError {
    let gone = local
        .gone
        .get(upload_id)
        .is_some_and(|(device, until)| device == device_id.as_str() && *until > Instant::now());
    if gone {
        upload_gone()
    } else {
        ApiError::not_found("upload")
    }
}

fn gone_key(upload_id: &str) -> String {
    format!("{KEY_PREFIX}relay-gone:{upload_id}")
}

/// An upload id's error, said of a session deletion's request id.
fn as_deletion(error: ApiError) -> ApiError {
    match error.code() {
        Code::NotFound => ApiError::not_found("session deletion"),
        Code::UploadGone => ApiError::new(
            Code::UploadGone,
            "This session deletion was answered already, or the request that asked for it gave up.",
        ),
        _ => error,
    }
}

fn upload_gone() -> ApiError {
    ApiError::new(
        Code::UploadGone,
        "This upload id was used already, or the request that asked for it gave up.",
    )
}

fn timeout_ms(timeout: Duration) -> u64 {
    u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    fn cancels(n: usize) -> Vec<ServerFrame> {
        (0..n)
            .map(|_| ServerFrame::JobCancel {
                job_id: JobId::generate(),
            })
            .collect()
    }

    #[tokio::test]
    async fn a_stream_gets_its_frames_in_order_and_drops_them_past_its_buffer() {
        let hub = Hub::in_process();
        let device_id = DeviceId::generate();
        let stream = hub.open_stream(&device_id).await;
        let frames = cancels(STREAM_BUFFER + 1);
        for frame in &frames[..STREAM_BUFFER] {
            assert_eq!(hub.send(&device_id, frame).await.ok(), Some(1));
        }
        assert_eq!(
            hub.send(&device_id, &frames[STREAM_BUFFER]).await.ok(),
            Some(0)
        );
        for frame in &frames[..STREAM_BUFFER] {
            assert_eq!(&stream.next_frame().await, frame);
        }
        assert_eq!(hub.send(&device_id, &ServerFrame::Wake).await.ok(), Some(1));
        assert_eq!(stream.next_frame().await, ServerFrame::Wake);
    }

    #[tokio::test]
    async fn a_waiting_stream_wakes_for_a_frame_and_a_closed_one_takes_none() {
        let hub = Hub::in_process();
        let device_id = DeviceId::generate();
        let stream = hub.open_stream(&device_id).await;
        let reader = tokio::spawn(async move { (stream.next_frame().await, stream) });
        // The reader runs until it waits for a frame.
        tokio::task::yield_now().await;
        assert_eq!(hub.send(&device_id, &ServerFrame::Wake).await.ok(), Some(1));
        let Ok(Ok((frame, stream))) = tokio::time::timeout(Duration::from_secs(5), reader).await
        else {
            panic!("the waiting reader did not wake and finish");
        };
        assert_eq!(frame, ServerFrame::Wake);
        assert!(hub.holds_stream(&device_id));
        drop(stream);
        assert!(!hub.holds_stream(&device_id));
        assert_eq!(hub.send(&device_id, &ServerFrame::Wake).await.ok(), Some(0));
    }
}
