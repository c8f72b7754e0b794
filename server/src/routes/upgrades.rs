//! Requests that upgrade their connection (the WebSocket routes: a device's event stream,
//! the console), served off actix-http's connection dispatcher.
//!
//! The dispatcher hands such a request over with its connection ([`Upgrades`]). It goes
//! through the same `App` as every request (routing, authentication, middlewares); the answer
//! is written with the dispatcher's own codec. A `101 Switching Protocols` is then served by
//! [`relay`]: the answer's body is written to the socket as it comes, and what the socket
//! brings is fed to the request's payload, as the dispatcher does, but without keeping its
//! two 8 KiB buffers: a connected device sends a few small frames a minute, and the
//! dispatcher's buffers were most of what it cost. Any other answer is written whole and
//! the connection closed (the client asked for a new protocol, not a kept-alive HTTP one).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::poll_fn;
use std::marker::PhantomData;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use actix_codec::{Encoder, Framed};
use actix_http::body::{BodySize, BoxBody, MessageBody};
use actix_http::error::PayloadError;
use actix_http::h1::{Codec, Message};
use actix_http::{ConnectionType, Payload, Request, Response, StatusCode};
use actix_service::{Service, ServiceFactory};
use actix_web::dev::AppConfig;
use actix_web::web::{Bytes, BytesMut};
use futures_util::future::{ready, LocalBoxFuture, Ready};
use futures_util::Stream;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::edge::Connections;

/// The most a single read takes off the socket (read into the stack, then copied out).
const READ_CHUNK: usize = 4096;
/// Bytes read and not yet taken by the payload's reader past which reading pauses (as
/// actix-http's payload does).
const MAX_UNTAKEN: usize = 32 * 1024;

/// A connection handed over with its upgrade request.
type Upgrade = (Request, Framed<TcpStream, Codec>);

/// Builds, per worker, the service that answers upgrade requests through `app`, whose
/// answers have bodies of type `B`.
pub struct Upgrades<S, B> {
    app: S,
    config: AppConfig,
    connections: Connections,
    body: PhantomData<fn() -> B>,
}

impl<S, B> Upgrades<S, B> {
    pub fn new(app: S, config: AppConfig, connections: Connections) -> Upgrades<S, B> {
        Upgrades {
            app,
            config,
            connections,
            body: PhantomData,
        }
    }
}

impl<S, B> ServiceFactory<Upgrade> for Upgrades<S, B>
where
    S: ServiceFactory<Request, Config = AppConfig>,
    S::Future: 'static,
    S::Service: 'static,
    S::Error: Into<actix_web::Error> + 'static,
    S::InitError: std::fmt::Debug,
    S::Response: Into<Response<B>> + 'static,
    <S::Service as Service<Request>>::Future: 'static,
    B: MessageBody + 'static,
{
    type Response = ();
    type Error = actix_web::Error;
    type Config = ();
    type Service = UpgradeService<S::Service, B>;
    type InitError = ();
    type Future = LocalBoxFuture<'static, Result<Self::Service, ()>>;

    fn new_service(&self, (): ()) -> Self::Future {
        let creating = self.app.new_service(self.config.clone());
        let connections = self.connections.clone();
        Box::pin(async move {
            match creating.await {
                Ok(app) => Ok(UpgradeService {
                    app: Rc::new(app),
                    connections,
                    body: PhantomData,
                }),
                Err(err) => {
                    tracing::error!(?err, "the app for upgrade requests could not be built");
                    Err(())
                }
            }
        })
    }
}

/// Answers one worker's upgrade requests.
pub struct UpgradeService<S, B> {
    app: Rc<S>,
    connections: Connections,
    body: PhantomData<fn() -> B>,
}

impl<S, B> Service<Upgrade> for UpgradeService<S, B>
where
    S: Service<Request> + 'static,
    S::Error: Into<actix_web::Error>,
    S::Response: Into<Response<B>>,
    B: MessageBody + 'static,
{
    type Response = ();
    type Error = actix_web::Error;
    type Future = Ready<Result<(), actix_web::Error>>;

    actix_service::always_ready!();

    /// Serves the connection on a task of its own and lets the dispatcher end at once: it
    /// has swapped in a fresh codec, whose date clock ticks twice a second for as long as
    /// the dispatcher lives. The connection's slot (`edge`) is taken again for the task.
    fn call(&self, (request, framed): Upgrade) -> Self::Future {
        let app = self.app.clone();
        let slot = self.connections.slot();
        actix_web::rt::spawn(async move {
            if let Err(err) = serve(app, request, framed).await {
                tracing::debug!(%err, "an upgraded connection ended");
            }
            drop(slot);
        });
        ready(Ok(()))
    }
}

/// One upgrade request: through the app, then its answer.
async fn serve<S, B>(
    app: Rc<S>,
    request: Request,
    framed: Framed<TcpStream, Codec>,
) -> std::io::Result<()>
where
    S: Service<Request>,
    S::Error: Into<actix_web::Error>,
    S::Response: Into<Response<B>>,
    B: MessageBody + 'static,
{
    let (sender, payload) = inbound();
    let (request, _) = request.replace_payload(payload);
    let response: Response<BoxBody> = match app.call(request).await {
        Ok(response) => response.into().map_into_boxed_body(),
        Err(err) => {
            let err: actix_web::Error = err.into();
            Response::from(err)
        }
    };
    drop(app);
    let (head, body) = response.into_parts();
    let (mut io, mut codec, unread) = release(framed);
    if head.status() != StatusCode::SWITCHING_PROTOCOLS {
        return refuse(io, codec, head, body).await;
    }
    let mut out = BytesMut::new();
    codec.encode(Message::Item((head, body.size())), &mut out)?;
    drop(codec);
    io.write_all(&out).await?;
    drop(out);
    if !unread.is_empty() {
        // What the client sent right behind its handshake.
        sender.feed(unread);
    }
    relay(io, body, sender).await
}

/// The dispatcher's socket and codec, its read and write buffers released; what the client
/// sent behind the request's head is copied out.
fn release(framed: Framed<TcpStream, Codec>) -> (TcpStream, Codec, Bytes) {
    let mut parts = framed.into_parts();
    let unread = Bytes::copy_from_slice(&parts.read_buf);
    parts.read_buf = BytesMut::new();
    parts.write_buf = BytesMut::new();
    (parts.io, parts.codec, unread)
}

/// Anything but a switch (a refusal before the upgrade): written whole with the connection's
/// codec, then the connection closes.
async fn refuse(
    mut io: TcpStream,
    mut codec: Codec,
    mut head: Response<()>,
    mut body: BoxBody,
) -> std::io::Result<()> {
    head.head_mut().set_connection_type(ConnectionType::Close);
    let mut out = BytesMut::new();
    let size = body.size();
    codec.encode(Message::Item((head, size)), &mut out)?;
    if !matches!(size, BodySize::None) {
        while let Some(chunk) = next_chunk(&mut body).await {
            let chunk = chunk.map_err(|_| std::io::ErrorKind::InvalidData)?;
            codec.encode(Message::Chunk(Some(chunk)), &mut out)?;
        }
        codec.encode(Message::Chunk(None), &mut out)?;
    }
    io.write_all(&out).await?;
    io.shutdown().await
}

/// A switched connection: the body out to the socket, the socket in to the payload, until
/// the body ends (or the socket cannot be written). Nothing is buffered between reads: a
/// read goes through the stack into a `Bytes` of its own size.
async fn relay(
    mut io: TcpStream,
    mut body: BoxBody,
    payload: InboundSender,
) -> std::io::Result<()> {
    let mut reading = true;
    loop {
        tokio::select! {
            chunk = next_chunk(&mut body) => match chunk {
                Some(Ok(bytes)) => io.write_all(&bytes).await?,
                Some(Err(_)) | None => break,
            },
            wanted = readable(&payload, &io), if reading => {
                reading = wanted && read_into(&io, &payload);
            }
        }
    }
    io.shutdown().await
}

async fn next_chunk(body: &mut BoxBody) -> Option<Result<Bytes, Box<dyn std::error::Error>>> {
    poll_fn(|cx| Pin::new(&mut *body).poll_next(cx)).await
}

/// Waits until the payload's reader wants more and the socket has some; false once the
/// reader is gone.
async fn readable(payload: &InboundSender, io: &TcpStream) -> bool {
    poll_fn(|cx| payload.poll_wanted(cx)).await && io.readable().await.is_ok()
}

/// Moves what the socket holds into the payload; false once the socket is done.
fn read_into(io: &TcpStream, payload: &InboundSender) -> bool {
    let mut chunk = [0u8; READ_CHUNK];
    match io.try_read(&mut chunk) {
        Ok(0) => {
            payload.end(None);
            false
        }
        Ok(read) => {
            payload.feed(Bytes::copy_from_slice(&chunk[..read]));
            true
        }
        Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => true,
        Err(err) => {
            payload.end(Some(PayloadError::Io(err)));
            false
        }
    }
}

/// What the socket brought and the payload's reader has not taken yet, shared by the two
/// (on one worker thread).
#[derive(Default)]
struct Inbound {
    chunks: VecDeque<Bytes>,
    untaken: usize,
    /// Set once the socket is done: cleanly (`None`), or with the error the reader gets.
    ended: Option<Option<PayloadError>>,
    reader_gone: bool,
    /// Woken when a chunk arrives or the socket is done.
    reader: Option<Waker>,
    /// Woken when the reader took something or went away.
    relay: Option<Waker>,
}

/// A request payload fed from the socket, and its feeding end.
fn inbound() -> (InboundSender, Payload) {
    let shared = Rc::new(RefCell::new(Inbound::default()));
    let reader = InboundReader(shared.clone());
    (
        InboundSender(shared),
        Payload::Stream {
            payload: Box::pin(reader),
        },
    )
}

struct InboundSender(Rc<RefCell<Inbound>>);

impl InboundSender {
    fn feed(&self, chunk: Bytes) {
        let mut inbound = self.0.borrow_mut();
        inbound.untaken += chunk.len();
        inbound.chunks.push_back(chunk);
        wake(&mut inbound.reader);
    }

    fn end(&self, error: Option<PayloadError>) {
        let mut inbound = self.0.borrow_mut();
        inbound.ended.get_or_insert(error);
        wake(&mut inbound.reader);
    }

    /// Ready with true while the reader wants more, false once it is gone.
    fn poll_wanted(&self, cx: &mut Context<'_>) -> Poll<bool> {
        let mut inbound = self.0.borrow_mut();
        if inbound.reader_gone {
            Poll::Ready(false)
        } else if inbound.untaken < MAX_UNTAKEN {
            Poll::Ready(true)
        } else {
            inbound.relay = Some(cx.waker().clone());
            Poll::Pending
        }
    }
}

impl Drop for InboundSender {
    /// A connection dropped before its socket was done: the reader sees it cut short.
    fn drop(&mut self) {
        self.end(Some(PayloadError::Incomplete(None)));
    }
}

struct InboundReader(Rc<RefCell<Inbound>>);

impl Stream for InboundReader {
    type Item = Result<Bytes, PayloadError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut inbound = self.0.borrow_mut();
        if let Some(chunk) = inbound.chunks.pop_front() {
            inbound.untaken -= chunk.len();
            wake(&mut inbound.relay);
            return Poll::Ready(Some(Ok(chunk)));
        }
        match &mut inbound.ended {
            None => {
                inbound.reader = Some(cx.waker().clone());
                Poll::Pending
            }
            Some(error) => Poll::Ready(error.take().map(Err)),
        }
    }
}

impl Drop for InboundReader {
    fn drop(&mut self) {
        let mut inbound = self.0.borrow_mut();
        inbound.reader_gone = true;
        wake(&mut inbound.relay);
    }
}

fn wake(waker: &mut Option<Waker>) {
    if let Some(waker) = waker.take() {
        waker.wake();
    }
}
