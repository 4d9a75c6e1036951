//! Fuzz the frame decoder on every message type that crosses a trust boundary, and the ring's
//! framing: a worker (or anything that can write the shared memory) is hostile to the front, and
//! the front to the supervisor. Garbage must decode to an error, never a panic; whatever decodes
//! must re-encode to a message that decodes to itself; bodies pushed through a ring come out
//! unchanged and in order.

#![no_main]

use std::fmt::Debug;

use libfuzzer_sys::fuzz_target;
use serde::de::DeserializeOwned;
use serde::Serialize;
use shm_proto::control::ToSupervisor;
use shm_proto::frame::{decode, encode};
use shm_proto::msg::{Command, Event};
use shm_proto::ring::heap_ring;

/// If `body` decodes as a `T`, its encoding decodes back to the same value.
fn round_trip<T: Serialize + DeserializeOwned + PartialEq + Debug>(body: &[u8]) {
    if let Ok(msg) = decode::<T>(body) {
        let mut buf = Vec::new();
        encode(&msg, &mut buf).expect("a decoded message encodes");
        assert_eq!(decode::<T>(&buf).expect("its own encoding decodes"), msg);
    }
}

/// Split `data` into frame bodies (the first byte picks the chunk size), push them through a small
/// ring, popping whenever it is full, and check they come out intact and in order.
fn through_ring(data: &[u8]) {
    let Some((&size, rest)) = data.split_first() else { return };
    let (mut tx, mut rx) = heap_ring(4096);
    let mut pending = std::collections::VecDeque::new();
    let mut out = Vec::new();
    for body in rest.chunks(usize::from(size) * 4 + 1) {
        while !tx.fits(body.len()) {
            assert!(rx.try_pop(&mut out).expect("ring intact"), "a full ring has a frame to pop");
            assert_eq!(Some(&out[..]), pending.pop_front().as_deref());
        }
        tx.try_push(body).expect("fits() said it fits");
        pending.push_back(body.to_vec());
        round_trip::<Event>(body);
    }
    while rx.try_pop(&mut out).expect("ring intact") {
        assert_eq!(Some(&out[..]), pending.pop_front().as_deref());
    }
    assert!(pending.is_empty());
}

fuzz_target!(|data: &[u8]| {
    round_trip::<Event>(data);
    round_trip::<Command>(data);
    round_trip::<ToSupervisor>(data);
    through_ring(data);
});
