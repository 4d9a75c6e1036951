//! What follows an answer on the HTTP door: a call's database rows and the next job's files
//! ([`after_answer`]), done on the connection's own thread right after the answer's first bytes are
//! written, as the socket door does after writing its reply: no client waits on them, and no other
//! thread is woken to do them (a hand-off to the blocking pool cost each call a wake-up).
//!
//! The request's handler leaves the work in its connection's [`Slot`] (reached through a task-local,
//! [`leave`]); [`AfterWrite`], the connection's stream, does it once a write has succeeded, or when the
//! connection ends without one. Work left outside a connection's task (an event-stream answer's own
//! thread) goes to the blocking pool as before.

use crate::kernel::Kernel;
use crate::sessions::session::Session;
use crate::transport::socket::after_answer;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

type Work = (Arc<Kernel>, Arc<Session>);

/// One connection's pending after-answer work.
#[derive(Clone, Default)]
pub(super) struct Slot(Arc<Mutex<Option<Work>>>);

impl Slot {
    /// Do the pending work, if any.
    fn run(&self) {
        let work = self.0.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some((kernel, s)) = work {
            after_answer(&kernel, &s);
        }
    }
}

tokio::task_local! {
    static SLOT: Slot;
}

/// Serve a connection with `slot` reachable by [`leave`] from its handlers.
pub(super) async fn scope<F: std::future::Future>(slot: Slot, served: F) -> F::Output {
    SLOT.scope(slot, served).await
}

/// Leave `s`'s after-answer work to follow the answer being built: on this connection's next write, or
/// on the blocking pool when called outside a connection's task. Work an earlier answer left and no
/// write took yet is done now.
pub(super) fn leave(kernel: &Arc<Kernel>, s: Arc<Session>) {
    let work = (kernel.clone(), s);
    let earlier = SLOT.try_with(|slot| slot.0.lock().unwrap_or_else(|e| e.into_inner()).replace(work.clone()));
    match earlier {
        Ok(Some((k, s))) => after_answer(&k, &s),
        Ok(None) => {}
        Err(_) => {
            tokio::task::spawn_blocking(move || after_answer(&work.0, &work.1));
        }
    }
}

/// A connection's stream that does its [`Slot`]'s work after each successful write.
pub(super) struct AfterWrite<S> {
    pub io: S,
    pub slot: Slot,
}

impl<S> Drop for AfterWrite<S> {
    fn drop(&mut self) {
        // The answer was never written (the client left): the rows are still due.
        self.slot.run();
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for AfterWrite<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for AfterWrite<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.slot.run();
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.slot.run();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
