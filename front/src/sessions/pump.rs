//! The pump: one thread that moves every live session's events out of shared memory.
//!
//! While anything arrived recently (within [`SPIN`]) it keeps polling the rings with no system call
//! per message: a pass pops each session's waiting frames (bounded per session, so one busy session
//! cannot starve the others), and an empty pass spins (`spin_loop`, a `yield` every few dozen
//! rounds). It does not spin after a pass that fed subscribers: their readers need the CPU now
//! (capture latency), and a continuous stream keeps the pump busy without spinning anyway. When the
//! spin runs out (or is skipped) it flushes buffered output to disk and parks: `park_prepare` on
//! every consumer — if any finds data it un-parks the others and goes back to polling — then one
//! `poll` on every session's `evt_data` eventfd plus the pump's own wake eventfd (rung when sessions are
//! added or removed). On waking it clears every parked word and drains the doorbells that rang.
//!
//! After popping, a session whose worker is parked on a full event ring gets its `evt_space` rung.
//! A corrupt ring marks its session lost (see [`Session::drain_events`]), drops it from the pump, and
//! asks the supervisor, from a short-lived thread, to kill what remains of it.
//!
//! ```no_run
//! # fn demo(link: std::sync::Arc<dyn front::sessions::supervisor::SupervisorLink>) {
//! let pump = front::sessions::pump::Pump::start(link).unwrap();
//! // pump.add(session, event_end); … pump.remove(serial);
//! pump.stop();
//! # }
//! ```

use crate::sessions::session::{Drained, EventEnd, Session};
use crate::sessions::supervisor::SupervisorLink;
use crossbeam_channel::{unbounded, Receiver, Sender};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use shm_proto::sys::EventFd;
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long the pump keeps polling after the last frame before it parks.
pub const SPIN: Duration = Duration::from_micros(75);
/// Empty polling rounds between two `yield`s while spinning.
const YIELD_EVERY: u32 = 64;

enum Msg {
    Add(Arc<Session>, EventEnd),
    Remove(u64),
    Stop,
}

struct Entry {
    session: Arc<Session>,
    end: EventEnd,
}

impl std::fmt::Debug for Pump {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pump").finish_non_exhaustive()
    }
}

/// Handle to the pump thread.
pub struct Pump {
    tx: Sender<Msg>,
    wake: Arc<EventFd>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Pump {
    /// Start the pump thread.
    pub fn start(link: Arc<dyn SupervisorLink>) -> std::io::Result<Pump> {
        let (tx, rx) = unbounded();
        let wake = Arc::new(EventFd::new()?);
        let state =
            PumpThread { rx, wake: wake.clone(), link, entries: Vec::new(), scratch: Vec::new(), rung: Vec::new() };
        let thread = std::thread::Builder::new().name("pump".into()).spawn(move || state.run())?;
        Ok(Pump { tx, wake, thread: Mutex::new(Some(thread)) })
    }

    fn send(&self, msg: Msg) {
        if self.tx.send(msg).is_ok() {
            let _ = self.wake.notify();
        }
    }

    /// Start reading a session's events.
    pub fn add(&self, session: Arc<Session>, end: EventEnd) {
        self.send(Msg::Add(session, end));
    }

    /// Stop reading the session of this serial (its event ring end is dropped).
    pub fn remove(&self, serial: u64) {
        self.send(Msg::Remove(serial));
    }

    /// Stop the thread and wait for it (it flushes every session's output first).
    pub fn stop(&self) {
        self.send(Msg::Stop);
        if let Some(t) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = t.join();
        }
    }
}

struct PumpThread {
    rx: Receiver<Msg>,
    wake: Arc<EventFd>,
    link: Arc<dyn SupervisorLink>,
    entries: Vec<Entry>,
    scratch: Vec<u8>,
    /// Sessions whose doorbell woke the last park, drained after the next pass.
    rung: Vec<u64>,
}

impl PumpThread {
    fn run(mut self) {
        let mut last_busy = Instant::now();
        let (mut rounds, mut live) = (0u32, false);
        while self.take_messages() {
            let (busy, notified) = self.pass();
            self.drain_rung();
            if busy {
                last_busy = Instant::now();
                rounds = 0;
                live = notified;
                continue;
            }
            // A subscriber's reader was just handed a notification: on a 2-core host our spinning
            // would keep it off a CPU (measured: +70 µs at p50), so sleep at once instead.
            if !live && last_busy.elapsed() < SPIN {
                rounds += 1;
                if rounds % YIELD_EVERY == 0 {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
                continue;
            }
            self.park();
            last_busy = Instant::now();
            live = false;
        }
        for e in &self.entries {
            e.session.flush();
        }
    }

    /// Apply queued add/remove messages; false on `Stop`.
    fn take_messages(&mut self) -> bool {
        while let Ok(msg) = self.rx.try_recv() {
            match msg {
                // A session lost before the pump saw it (its worker died during open) is not read.
                Msg::Add(session, _) if session.is_lost() => {}
                Msg::Add(session, end) => self.entries.push(Entry { session, end }),
                Msg::Remove(serial) => self.entries.retain(|e| e.session.spec().serial != serial),
                Msg::Stop => return false,
            }
        }
        true
    }

    /// One polling pass over every session: whether any frame was consumed, and whether any was
    /// consumed in a session with subscribers.
    fn pass(&mut self) -> (bool, bool) {
        let (mut busy, mut live) = (false, false);
        let mut i = 0;
        while i < self.entries.len() {
            let Entry { session, end } = &mut self.entries[i];
            match session.drain_events(end, &mut self.scratch) {
                Drained::Empty => {}
                Drained::Some => busy = true,
                Drained::Live => (busy, live) = (true, true),
                Drained::Corrupt => {
                    let gone = self.entries.swap_remove(i);
                    self.close_in_background(gone.session);
                    continue;
                }
            }
            i += 1;
        }
        (busy, live)
    }

    fn close_in_background(&self, session: Arc<Session>) {
        let link = self.link.clone();
        let spawned = std::thread::Builder::new().name("close-corrupt".into()).spawn(move || {
            if let Err(e) = link.close_session(session.name()) {
                tracing::warn!("closing corrupt session '{}' failed: {e}", session.name());
            }
        });
        if let Err(e) = spawned {
            tracing::warn!("could not start a thread to close a corrupt session: {e}");
        }
    }

    /// A session whose doorbell cannot be polled would make every park return at once: drop it.
    fn drop_broken(&mut self, serial: u64) {
        let Some(i) = self.entries.iter().position(|e| e.session.spec().serial == serial) else { return };
        let gone = self.entries.swap_remove(i);
        let note = "the session's event doorbell failed, so its worker can no longer be heard".to_owned();
        tracing::info!("session '{}': {note}", gone.session.name());
        gone.session.mark_lost(note, Vec::new());
        self.close_in_background(gone.session);
    }

    /// Flush output, advertise that we are parked, and sleep until a doorbell rings.
    fn park(&mut self) {
        for e in &self.entries {
            e.session.flush();
        }
        let mut prepared = 0;
        while prepared < self.entries.len() && self.entries[prepared].end.consumer.park_prepare() {
            prepared += 1;
        }
        if prepared < self.entries.len() || !self.rx.is_empty() {
            for e in &self.entries[..prepared] {
                e.end.consumer.park_done();
            }
            return;
        }
        let mut fds = Vec::with_capacity(self.entries.len() + 1);
        fds.push(PollFd::new(self.wake.as_fd(), PollFlags::POLLIN));
        fds.extend(self.entries.iter().map(|e| PollFd::new(e.end.evt_data.as_fd(), PollFlags::POLLIN)));
        if let Err(e) = poll(&mut fds, PollTimeout::NONE) {
            if e != nix::errno::Errno::EINTR {
                tracing::warn!("pump poll failed: {e}");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let revents: Vec<PollFlags> = fds.iter().map(|f| f.revents().unwrap_or(PollFlags::empty())).collect();
        drop(fds);
        if !revents[0].is_empty() {
            let _ = self.wake.drain();
        }
        let mut broken = Vec::new();
        for (e, rev) in self.entries.iter().zip(&revents[1..]) {
            e.end.consumer.park_done();
            if rev.intersects(PollFlags::POLLERR | PollFlags::POLLNVAL) {
                broken.push(e.session.spec().serial);
            } else if !rev.is_empty() {
                self.rung.push(e.session.spec().serial);
            }
        }
        for serial in broken {
            self.drop_broken(serial);
        }
    }

    /// Drain the doorbells that woke the last park. Done after the first pass, so the `read` is not
    /// between the wake-up and the frames (the parked words are clear by then: no new rings race it).
    fn drain_rung(&mut self) {
        for serial in self.rung.drain(..) {
            if let Some(e) = self.entries.iter().find(|e| e.session.spec().serial == serial) {
                let _ = e.end.evt_data.drain();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::Harness;
    use serde_json::json;
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    #[test]
    fn many_sessions_stream_at_once_without_loss() {
        let h = Harness::new();
        let names: Vec<String> = (0..6).map(|i| format!("p{i}")).collect();
        for n in &names {
            h.open(n);
        }
        std::thread::scope(|scope| {
            for n in &names {
                let h = &h;
                scope.spawn(move || {
                    let r = h.run(n, "lines 3000", 60_000);
                    let expect: u64 = (0..3000).map(|i: u64| format!("line {i}\n").len() as u64).sum();
                    assert_eq!((r["state"].as_str(), r["stdout_bytes"].as_u64()), (Some("exited"), Some(expect)));
                    assert!(r["view"].as_str().unwrap().ends_with("line 2999\n"));
                });
            }
        });
    }

    #[test]
    fn an_undecodable_frame_is_skipped_and_the_session_goes_on() {
        let h = Harness::new();
        h.open("demo");
        let r = h.run("demo", "garbage", 5000);
        assert_eq!((r["state"].as_str(), r["exit_code"].as_i64()), (Some("exited"), Some(0)));
        assert_eq!(h.run("demo", "echo still here", 5000)["view"], "still here\n");
    }

    #[test]
    fn an_idle_pump_parks_and_a_worker_wakes_it() {
        let h = Harness::new();
        h.open("demo");
        std::thread::sleep(Duration::from_millis(50));
        let before = h.sup.wakes.load(Ordering::SeqCst);
        assert_eq!(h.run("demo", "echo x", 5000)["view"], "x\n");
        assert!(h.sup.wakes.load(Ordering::SeqCst) > before, "the pump was parked, so the worker had to ring");
        // Sessions added while the pump sleeps are picked up (the pump's own doorbell).
        std::thread::sleep(Duration::from_millis(50));
        h.open("late");
        assert_eq!(h.run("late", "echo y", 5000)["view"], "y\n");
        h.ok("session.close", json!({"session": "late"}));
    }
}
