//! Model checks of the ring under every interleaving loom can find: push/pop ordering, wrap-around, and
//! the park/wake protocol (no lost wake-up in either direction).
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p shm-proto --release --test loom_ring` (`.ci/run` does).
#![cfg(loom)]

use loom::sync::{Arc, Condvar, Mutex};
use loom::thread;
use shm_proto::ring::heap_ring;

/// An eventfd stand-in: a counter that `wait` blocks on until it is non-zero.
#[derive(Default)]
struct Doorbell {
    count: Mutex<u64>,
    cv: Condvar,
}

impl Doorbell {
    fn notify(&self) {
        *self.count.lock().unwrap() += 1;
        self.cv.notify_one();
    }
    fn wait(&self) {
        let mut n = self.count.lock().unwrap();
        while *n == 0 {
            n = self.cv.wait(n).unwrap();
        }
        *n = 0;
    }
}

#[test]
fn frames_arrive_in_order_across_wrap() {
    loom::model(|| {
        // 256 bytes hold two 64-byte-header frames at most: three pushes force a wrap and a full ring.
        let (mut p, mut c) = heap_ring(256);
        let t = thread::spawn(move || {
            let mut sent = 0u8;
            while sent < 3 {
                if p.try_push(&[sent; 3]).is_ok() {
                    sent += 1;
                } else {
                    thread::yield_now();
                }
            }
        });
        let mut out = Vec::new();
        let mut next = 0u8;
        while next < 3 {
            if c.try_pop(&mut out).unwrap() {
                assert_eq!(out, vec![next; 3]);
                next += 1;
            } else {
                thread::yield_now();
            }
        }
        t.join().unwrap();
    });
}

#[test]
fn parked_consumer_is_always_woken() {
    loom::model(|| {
        let (mut p, mut c) = heap_ring(256);
        let bell = Arc::new(Doorbell::default());
        let bell2 = bell.clone();
        let t = thread::spawn(move || {
            p.try_push(b"x").unwrap();
            if p.wake_needed() {
                bell2.notify();
            }
        });
        let mut out = Vec::new();
        loop {
            if c.try_pop(&mut out).unwrap() {
                break;
            }
            if c.park_prepare() {
                // If the producer's wake could be lost, loom reports a deadlock here.
                bell.wait();
                c.park_done();
            }
        }
        assert_eq!(out, b"x");
        t.join().unwrap();
    });
}

#[test]
fn parked_producer_is_always_woken() {
    loom::model(|| {
        // One frame of 64+64 bytes fills half; two fill the ring.
        let (mut p, mut c) = heap_ring(256);
        p.try_push(&[1; 64]).unwrap();
        p.try_push(&[2; 64]).unwrap();
        let bell = Arc::new(Doorbell::default());
        let bell2 = bell.clone();
        let t = thread::spawn(move || {
            let mut out = Vec::new();
            assert!(c.try_pop(&mut out).unwrap());
            if c.producer_wake_needed() {
                bell2.notify();
            }
            c
        });
        loop {
            if p.try_push(&[3; 64]).is_ok() {
                break;
            }
            if p.park_prepare(64) {
                bell.wait();
                p.park_done();
            }
        }
        let mut c = t.join().unwrap();
        let mut out = Vec::new();
        assert!(c.try_pop(&mut out).unwrap());
        assert_eq!(out, vec![2; 64]);
        assert!(c.try_pop(&mut out).unwrap());
        assert_eq!(out, vec![3; 64]);
    });
}
