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

        #[test]
        fn output_round_trips(job in any::<u64>(), data in proptest::collection::vec(any::<u8>(), 0..4096)) {
            let ev = Event::Output { job, stream: Stream::Stderr, data };
            let mut buf = Vec::new();
            encode(&ev, &mut buf).unwrap();
            prop_assert_eq!(decode::<Event>(&buf).unwrap(), ev);
        }
    }
}
