//! Frame encoding: postcard bodies inside ring frames.
//!
//! The ring itself frames bytes (a `u32` length prefix, padded to [`crate::ring::FRAME_ALIGN`]); this
//! module turns messages into those bodies and back. Decoding untrusted bytes returns
//! [`FrameError::Decode`] for anything that is not a whole, valid message.

use serde::{de::DeserializeOwned, Serialize};

/// Errors turning a message into a frame body or back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    #[error("message could not be encoded")]
    Encode(#[source] postcard::Error),
    #[error("frame body is not a valid message")]
    Decode(#[source] postcard::Error),
    #[error("frame body has {0} trailing bytes after the message")]
    Trailing(usize),
}

/// Encode `msg` into `buf` (cleared first).
pub fn encode<T: Serialize>(msg: &T, buf: &mut Vec<u8>) -> Result<(), FrameError> {
    buf.clear();
    let out = std::mem::take(buf);
    *buf = postcard::to_extend(msg, out).map_err(FrameError::Encode)?;
    Ok(())
}

/// Decode one whole message from `body`; trailing bytes are an error.
pub fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T, FrameError> {
    let (msg, rest) = postcard::take_from_bytes(body).map_err(FrameError::Decode)?;
    if !rest.is_empty() {
        return Err(FrameError::Trailing(rest.len()));
    }
    Ok(msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::msg::{Command, Event, RunSpec, StdinMode, Stream};
    use proptest::prelude::*;

    #[test]
    fn command_round_trips() {
        let cmd = Command::Run(RunSpec {
            persistent: false,
            state_env: Vec::new(),
            capture_only: None,
            effects: Default::default(),
            state_cwd: Some(b"/x".to_vec()),
            job: 7,
            cmd: "echo 'hi'\n$HOME".into(),
            cwd: b"/tmp/\xff dir".to_vec(),
            env: vec![("A".into(), "b".into())],
            stdin: StdinMode::Null,
            state: Some(b"builtin cd -- '/x'\n".to_vec()),
            files: vec![crate::msg::FileSpec { path: b"/p/\xff".to_vec(), content: b"\0EOF\n".to_vec(), mode: None }],
        });
        let mut buf = Vec::new();
        encode(&cmd, &mut buf).unwrap();
        assert_eq!(decode::<Command>(&buf).unwrap(), cmd);
    }

    #[test]
    fn trailing_bytes_are_an_error() {
        let mut buf = Vec::new();
        encode(&Command::Shutdown, &mut buf).unwrap();
        buf.push(0);
        assert!(matches!(decode::<Command>(&buf), Err(FrameError::Trailing(1))));
    }

    proptest! {
        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode::<Command>(&bytes);
            let _ = decode::<Event>(&bytes);
            let _ = decode::<crate::control::ToSupervisor>(&bytes);
            let _ = decode::<crate::control::FromSupervisor>(&bytes);
        }

        /// A `WorkerDied` round-trips with its teardown's outcome (the last field). Cut short anywhere — as
        /// one from a build without `verified_empty` would look — it does not decode, and a last byte that
        /// is not a bool is refused: the front never reads a death's outcome the supervisor did not send.
        #[test]
        fn worker_died_round_trips_and_a_cut_or_bad_outcome_is_refused(
            session in "[a-z0-9-]{1,64}",
            code in any::<Option<i32>>(),
            signal in any::<Option<i32>>(),
            pids in proptest::collection::vec(any::<u32>(), 0..8),
            verified_empty in any::<bool>(),
            at in any::<prop::sample::Index>(),
            bad in 2u8..,
        ) {
            use crate::control::{FromSupervisor, ProcInfo};
            let killed = pids.iter().map(|&pid| ProcInfo { pid, cmdline: "sleep 1".into(), cgroup: "slot-1".into() });
            let msg = FromSupervisor::WorkerDied {
                session, code, signal, killed: crate::procs::ProcList::new(killed.collect()), verified_empty,
            };
            let mut buf = Vec::new();
            encode(&msg, &mut buf).unwrap();
            prop_assert_eq!(buf.last().copied(), Some(u8::from(verified_empty)), "the outcome is the last byte");
            prop_assert_eq!(decode::<FromSupervisor>(&buf).unwrap(), msg);
            let cut = at.index(buf.len());
            prop_assert!(decode::<FromSupervisor>(&buf[..cut]).is_err(), "cut at {} of {} decoded", cut, buf.len());
            let last = buf.len() - 1;
            buf[last] = bad;
            prop_assert!(decode::<FromSupervisor>(&buf).is_err(), "an outcome byte {} decoded", bad);
        }

        /// Garbage behind the `Output` variant's tag (3): the job, stream, read times and length are all
        /// read from hostile bytes.
        #[test]
        fn garbage_output_bodies_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut body = vec![3u8];
            body.extend_from_slice(&bytes);
            let _ = decode::<Event>(&body);
        }

        #[test]
        fn output_round_trips(
            job in any::<u64>(),
            read_mono_ns in any::<u64>(),
            read_unix_ns in any::<u64>(),
            data in proptest::collection::vec(any::<u8>(), 0..4096),
        ) {
            let ev = Event::Output { job, stream: Stream::Stderr, read_mono_ns, read_unix_ns, data };
            let mut buf = Vec::new();
            encode(&ev, &mut buf).unwrap();
            prop_assert_eq!(decode::<Event>(&buf).unwrap(), ev);
        }

        /// An output frame damaged anywhere (a byte changed, cut short, bytes appended) decodes to an
        /// error or to some whole event, never a panic; cut inside its times or data it is an error.
        #[test]
        fn damaged_output_frames_never_panic(
            job in any::<u64>(),
            read_mono_ns in any::<u64>(),
            read_unix_ns in any::<u64>(),
            data in proptest::collection::vec(any::<u8>(), 1..256),
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
            tail in proptest::collection::vec(any::<u8>(), 1..16),
        ) {
            let ev = Event::Output { job, stream: Stream::Stdout, read_mono_ns, read_unix_ns, data };
            let mut buf = Vec::new();
            encode(&ev, &mut buf).unwrap();
            let mut flipped = buf.clone();
            let i = at.index(flipped.len());
            flipped[i] = byte;
            let _ = decode::<Event>(&flipped);
            let cut = at.index(buf.len());
            prop_assert!(decode::<Event>(&buf[..cut]).is_err(), "a frame cut at {} of {} decoded", cut, buf.len());
            let mut longer = buf.clone();
            longer.extend_from_slice(&tail);
            prop_assert!(matches!(decode::<Event>(&longer), Err(FrameError::Trailing(n)) if n == tail.len()));
        }

    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Any survivor listing a job can produce (any count, any command line) encodes within the
        /// smallest event frame the worker may have (1 MiB for the default 4 MiB ring; 64 KiB checked),
        /// and the supervisor's notices listing the same processes within one control packet.
        #[test]
        fn any_survivor_listing_fits_a_frame_and_a_packet(
            n in 0usize..400,
            len in prop_oneof![0usize..600, 100_000usize..131_072],
            cgroup_len in prop_oneof![1usize..16, 200usize..4096],
            ch in proptest::char::any(),
            job in any::<u64>(),
            verified_empty in any::<bool>(),
        ) {
            use crate::control::{FromSupervisor, KeptInfo, ProcInfo, MAX_CONTROL_PACKET};
            use crate::msg::ProcStat;
            use crate::procs::ProcList;
            let cmdline: String = std::iter::repeat_n(ch, len / ch.len_utf8().max(1)).collect();
            let stats = (0..n).map(|i| ProcStat {
                pid: u32::MAX - i as u32, cmdline: cmdline.clone(), age_ms: u64::MAX, cpu_ms: u64::MAX,
            });
            let ev = Event::Survivors { job, procs: ProcList::new(stats.collect()) };
            let mut buf = Vec::new();
            encode(&ev, &mut buf).unwrap();
            prop_assert!(buf.len() <= 64 * 1024, "Survivors of {} bytes", buf.len());
            prop_assert_eq!(decode::<Event>(&buf).unwrap(), ev);
            let infos: Vec<ProcInfo> = (0..n).map(|i| ProcInfo {
                pid: u32::MAX - i as u32, cmdline: cmdline.clone(), cgroup: "s".repeat(cgroup_len),
            }).collect();
            let session = "s".repeat(64);
            let listed = ProcList::new(infos.clone());
            for mut msg in [
                FromSupervisor::WorkerDied {
                    session: session.clone(), code: Some(i32::MIN), signal: Some(i32::MIN), killed: ProcList::new(infos.clone()),
                    verified_empty,
                },
                FromSupervisor::SessionClosed { req: u64::MAX, session: session.clone(), killed: ProcList::new(infos.clone()), verified_empty },
                FromSupervisor::KeptList {
                    req: u64::MAX,
                    kept: (0..n.min(80)).map(|i| KeptInfo {
                        name: format!("{i:064}"), owner_uid: u32::MAX, cgroup: "c".repeat(cgroup_len),
                        procs: listed.clone(), adopted: true,
                    }).collect(),
                    more: 0,
                },
            ] {
                let kept_before = match &msg { FromSupervisor::KeptList { kept, .. } => kept.len() as u64, _ => 0 };
                msg.fit();
                encode(&msg, &mut buf).unwrap();
                prop_assert!(buf.len() <= MAX_CONTROL_PACKET, "{} bytes", buf.len());
                let back: FromSupervisor = decode(&buf).unwrap();
                prop_assert_eq!(&back, &msg, "what was sent is what is read");
                match back {
                    FromSupervisor::WorkerDied { killed, verified_empty: v, .. } | FromSupervisor::SessionClosed { killed, verified_empty: v, .. } => {
                        prop_assert_eq!(killed.total(), n as u64, "every killed process is listed or counted");
                        prop_assert_eq!(v, verified_empty);
                    }
                    FromSupervisor::KeptList { kept, more, .. } => {
                        prop_assert_eq!(kept.len() as u64 + u64::from(more), kept_before);
                    }
                    _ => prop_assert!(false),
                }
            }
        }
    }
}
