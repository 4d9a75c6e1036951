//! Would a shared-memory subscription beat the socket one? (issue 27, item 6.)
//!
//! The idea evaluated: the front hands a local subscriber a ring of a job's output (a memfd passed with
//! `SCM_RIGHTS`, parked and woken as the worker's rings are) instead of writing JSON notifications to
//! its socket. Only the last hop changes (front pump → client), so that hop is measured both ways, in
//! one run, between two processes, interleaved sample by sample:
//! - socket: the stand-in pump builds an `output` notification (JSON, as the front does) and writes it
//!   to a connected Unix stream socket; the client blocks in `read`;
//! - shm: it pushes an `Event::Output` frame (postcard) into a real `shm_proto` region's ring received
//!   by the client over `SCM_RIGHTS`, and rings the client's eventfd when the client advertised it is
//!   parked; the client pops until empty, then `park_prepare` + `poll` on the eventfd.
//!
//! Each sample is stamped with `CLOCK_MONOTONIC` right before the pump starts building it and timed by
//! the client right after it has it decoded. heddle's own subscription (a stamping job, read time →
//! client) runs in the same rounds for scale.

use anyhow::{ensure, Context, Result};
use heddle_bench::Summary;
use serde_json::json;
use shm_proto::msg::{Event, Stream};
use shm_proto::region::{Region, RegionConfig};
use shm_proto::sys::{monotonic_ns, recv_with_fds, send_with_fds, EventFd};
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The chunk each sample carries (a typical short line of output).
const LINE: &[u8] = b"   Compiling heddle-front v0.1.0 (/src/front)\n";

/// The pause between two samples of one transport: an agent-paced stream, so the client is parked.
const PAUSE: Duration = Duration::from_millis(2);

/// The `output` notification the front writes for a chunk, with its stamp in `read_mono_ns`.
fn notification(seq: u64, stamp: u64) -> Vec<u8> {
    let text = std::str::from_utf8(LINE).unwrap_or_default();
    let v = json!({"jsonrpc": "2.0", "method": "output", "params": {
        "subscription": 1, "seq": seq, "session": "bench", "job": 1, "stream": "stdout",
        "offset": seq * LINE.len() as u64, "len": LINE.len(), "at_unix_ns": 0,
        "read_mono_ns": stamp, "read_unix_ns": 0, "lines": [], "data": text, "encoding": "utf8"}});
    let mut out = serde_json::to_vec(&v).unwrap_or_default();
    out.push(b'\n');
    out
}

/// `heddle-bench shm-sub`: `n` samples of each transport, then heddle's subscription for scale.
pub fn run(n: usize, heddle_lines: usize) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("sub.sock");
    let listener = UnixListener::bind(&path)?;
    let exe = std::env::current_exe()?;
    let child = Command::new(exe)
        .arg("shm-sub-child")
        .arg(&path)
        .stdout(Stdio::piped())
        .spawn()
        .context("starting the subscriber process")?;
    let (mut sock, _) = listener.accept()?;
    let (region, memfd) = Region::create(RegionConfig { cmd_capacity: 4096, evt_capacity: 1 << 20 })?;
    let doorbell = EventFd::new()?;
    send_with_fds(sock.as_fd(), b"f", &[memfd.as_fd(), doorbell.as_fd()])?;
    let mut ready = [0u8; 1];
    std::io::Read::read_exact(&mut sock, &mut ready)?;
    let mut ring = region.evt_producer();
    let (mut scratch, mut wakes) = (Vec::new(), 0usize);
    let (mut sock_send, mut shm_send) = (Vec::new(), Vec::new());
    for seq in 1..=n as u64 + 1 {
        // The last round (stamp 0) tells the client to stop.
        let last = seq == n as u64 + 1;
        std::thread::sleep(PAUSE);
        let stamp = if last { 0 } else { monotonic_ns() };
        sock.write_all(&notification(seq, stamp))?;
        if !last {
            sock_send.push(monotonic_ns().saturating_sub(stamp) as f64 / 1e3);
        }
        std::thread::sleep(PAUSE);
        let stamp = if last { 0 } else { monotonic_ns() };
        let ev =
            Event::Output { job: 1, stream: Stream::Stdout, read_mono_ns: stamp, read_unix_ns: 0, data: LINE.to_vec() };
        ring.push_msg(&ev, &mut scratch).map_err(|e| anyhow::anyhow!("ring push: {e}"))?;
        if ring.wake_needed() {
            doorbell.notify()?;
            wakes += usize::from(!last);
        }
        if !last {
            shm_send.push(monotonic_ns().saturating_sub(stamp) as f64 / 1e3);
        }
    }
    let out = child.wait_with_output()?;
    ensure!(out.status.success(), "the subscriber process failed");
    let text = String::from_utf8_lossy(&out.stdout);
    let samples = |name: &str| -> Vec<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|l| l.split_whitespace().filter_map(|v| v.parse().ok()).collect())
            .unwrap_or_default()
    };
    let (sock_hop, shm_hop) = (samples("sock "), samples("shm "));
    ensure!(
        sock_hop.len() == n && shm_hop.len() == n,
        "the client timed {} and {} of {n}",
        sock_hop.len(),
        shm_hop.len()
    );

    // heddle's own subscription, for scale: the hop above is its last part.
    let h = heddle_tests::Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let mut sub = h.client();
    sub.call("subscribe", json!({"session": s, "raw": true}))?;
    let mut hd = crate::output::HeddleSamples::default();
    let mut left = heddle_lines;
    while left > 0 {
        let k = left.min(100);
        crate::output::heddle_batch(&mut c, &mut sub, &s, k, &mut hd)?;
        left -= k;
    }

    let show = |name: &str, s: Summary| println!("{name:<58} {:>8.1} {:>8.1} {:>8.1}", s.p50, s.p99, s.p999);
    println!(
        "== shared-memory subscription vs socket: front pump → local client (µs), {n} samples each, one per ~2 ms"
    );
    println!("{:<58} {:>8} {:>8} {:>8}", "", "p50", "p99", "p99.9");
    let (so, sh) = (Summary::of(sock_hop), Summary::of(shm_hop));
    show("socket: JSON notification → Unix stream → client", so);
    show("shm: postcard frame → ring (memfd) + eventfd → client", sh);
    show("  pump's cost to publish, socket (build + write)", Summary::of(sock_send));
    show("  pump's cost to publish, shm (encode + push + wake)", Summary::of(shm_send));
    println!(
        "{:<58} {:>8.2} {:>8.2} {:>8.2}",
        "ratio shm / socket",
        sh.p50 / so.p50,
        sh.p99 / so.p99,
        sh.p999 / so.p999
    );
    println!("(the client was parked for {wakes} of {n} shm samples: each needed its eventfd rung)");
    println!("-- for scale, heddle's subscription in the same run ({heddle_lines} lines, one per ~2 ms):");
    show("heddle: worker read → subscriber (socket)", Summary::of(hd.read_to_client));
    show("heddle: front pump → subscriber (socket, wall clocks)", Summary::of(hd.from_front));
    show("heddle: job's write → subscriber", Summary::of(hd.total));
    let figure = "front → local client hop: shm ring + eventfd";
    heddle_bench::record(figure, "the same hop as a socket notification", so.p50, sh.p50, Some(sh.p99 / so.p99), "µs");
    Ok(())
}

/// The subscriber process: receives the region and the doorbell, times both transports on two threads
/// (each blocks on its own transport, as a client's reader would), prints `sock …` and `shm …` (µs).
pub fn child(path: &Path) -> Result<()> {
    let sock = UnixStream::connect(path)?;
    let mut one = [0u8; 1];
    let (got, fds, _) = recv_with_fds(sock.as_fd(), &mut one)?;
    ensure!(got == 1 && fds.len() == 2, "expected the region and its doorbell");
    let mut fds = fds.into_iter();
    let (memfd, bell) = (fds.next().context("memfd")?, fds.next().context("eventfd")?);
    let region = Region::attach(memfd.as_fd())?;
    let doorbell = EventFd::from_owned(bell);
    let shm = std::thread::spawn(move || -> Result<Vec<f64>> {
        let mut ring = region.evt_consumer();
        let (mut buf, mut out) = (Vec::new(), Vec::new());
        loop {
            match ring.pop_msg::<Event>(&mut buf).map_err(|e| anyhow::anyhow!("ring pop: {e}"))? {
                Some(Event::Output { read_mono_ns: 0, .. }) => return Ok(out),
                Some(Event::Output { read_mono_ns, data, .. }) => {
                    let now = monotonic_ns();
                    std::hint::black_box(data);
                    out.push(now.saturating_sub(read_mono_ns) as f64 / 1e3);
                }
                Some(other) => anyhow::bail!("unexpected frame {other:?}"),
                None => {
                    if ring.park_prepare() {
                        doorbell.wait(-1)?;
                        ring.park_done();
                        doorbell.drain()?;
                    }
                }
            }
        }
    });
    let mut writer = sock.try_clone()?;
    writer.write_all(b"r")?;
    let mut sock_hop = Vec::new();
    for line in BufReader::new(sock).lines() {
        let v: serde_json::Value = serde_json::from_str(&line?)?;
        let now = monotonic_ns();
        let stamp = v["params"]["read_mono_ns"].as_u64().context("a stamp")?;
        if stamp == 0 {
            break;
        }
        std::hint::black_box(&v["params"]["data"]);
        sock_hop.push(now.saturating_sub(stamp) as f64 / 1e3);
    }
    let shm_hop = shm.join().map_err(|_| anyhow::anyhow!("the ring reader panicked"))??;
    let fmt = |v: &[f64]| v.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>().join(" ");
    println!("sock {}", fmt(&sock_hop));
    println!("shm {}", fmt(&shm_hop));
    Ok(())
}
