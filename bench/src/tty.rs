//! `tty`: interactive jobs. Keystroke echo latency — a `write` of one character to a `cat` on a PTY job
//! until the call returns with the screen showing it (`quiet_ms: 0`: at the first output after the
//! write) — vs a raw PTY round trip with the same program (`cat` on a PTY this process opens: write one
//! byte to the master, read its echo), interleaved in one run. And the headless emulator's cost per MiB
//! of `ls --color=always -R /usr` vs a copy of the same bytes.

use anyhow::{Context, Result};
use heddle_bench::{report, time_us, Summary};
use heddle_tests::Heddle;
use serde_json::json;
use std::io::{Read, Write};
use std::process::{Command, Stdio};

pub fn run(iterations: usize, mib: usize) -> Result<()> {
    echo_latency(iterations)?;
    emulator_cost(mib)
}

fn echo_latency(iterations: usize) -> Result<()> {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = c.call("run", json!({"session": s, "cmd": "cat", "tty": {"rows": 24, "cols": 80}, "yield_ms": 200}))?;
    let job = r["job"].clone();
    // The baseline: `cat` on a PTY of our own, its echo read straight off the master.
    let pty = nix::pty::openpty(None, None).context("openpty")?;
    let slave_in = pty.slave.try_clone()?;
    let mut cat = Command::new("cat").stdin(Stdio::from(slave_in)).stdout(Stdio::from(pty.slave)).spawn()?;
    let mut master = std::fs::File::from(pty.master);
    let (mut heddle_us, mut raw_us) = (Vec::new(), Vec::new());
    let mut buf = [0u8; 256];
    for i in 0..iterations + 20 {
        // A line at a time, so neither screen nor line buffer grows without end.
        let (text, keys) = if i % 60 == 59 { ("", json!(["Enter"])) } else { ("a", json!([])) };
        let t = time_us(|| {
            let r = c
                .call(
                    "write",
                    json!({"session": s, "job": job, "text": text, "keys": keys, "quiet_ms": 0, "yield_ms": 5000}),
                )
                .expect("write");
            assert_eq!(r["settled"], true, "the echo arrived: {r}");
        });
        let byte: &[u8] = if i % 60 == 59 { b"\r" } else { b"a" };
        let u = time_us(|| {
            master.write_all(byte).expect("write to the master");
            let n = master.read(&mut buf).expect("read the echo");
            assert!(n > 0);
        });
        if i >= 20 {
            heddle_us.push(t);
            raw_us.push(u);
        }
        if i % 60 == 59 {
            // cat's copy of the line follows the echo on both sides; let it arrive before the next key.
            std::thread::sleep(std::time::Duration::from_millis(5));
            let _ = c.call("output", json!({"session": s, "job": job, "screen": true}));
            let _ = nix::fcntl::fcntl(&master, nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK));
            while master.read(&mut buf).is_ok_and(|n| n > 0) {}
            let _ = nix::fcntl::fcntl(&master, nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::empty()));
        }
    }
    let _ = cat.kill();
    let _ = cat.wait();
    report(
        "keystroke echo: write 1 char → screen shows it, vs raw PTY round trip (cat)",
        "raw PTY: write master, read echo",
        Summary::of(raw_us),
        "heddle write {quiet_ms: 0} → screen",
        Summary::of(heddle_us),
    );
    Ok(())
}

fn emulator_cost(mib: usize) -> Result<()> {
    let out = Command::new("ls").args(["--color=always", "-R", "/usr"]).stderr(Stdio::null()).output()?;
    let mut data = out.stdout;
    data.truncate(mib << 20);
    let size_mib = data.len() as f64 / f64::from(1u32 << 20);
    let (mut emu, mut copy) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        let mut term = front::terminal::Terminal::new(24, 80);
        emu.push(time_us(|| data.chunks(64 << 10).for_each(|c| term.feed(c))) / size_mib);
        let mut sink = Vec::with_capacity(data.len());
        copy.push(time_us(|| data.chunks(64 << 10).for_each(|c| sink.extend_from_slice(c))) / size_mib);
        assert_eq!(sink.len(), data.len());
    }
    println!("ls --color=always -R /usr: {size_mib:.1} MiB, 5 rounds, µs per MiB");
    report("headless terminal (vt100) per MiB vs a copy", "copy", Summary::of(copy), "vt100 feed", Summary::of(emu));
    Ok(())
}
