//! Fuzz `Policy::from_toml`: profile text is operator input, and the front may load profiles a
//! client names. Any input must give `Ok` or `Err`, never a panic; an `Ok` must uphold the typed
//! invariants, and an `Err` must point inside the text.
//!
//! Seed the corpus with the builtin profiles: `cp ../policies/profiles/*.toml corpus/policy_toml/`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use policies::Policy;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match Policy::from_toml("fuzz.toml", &text) {
        Ok(policy) => {
            assert!(policy.writable.iter().all(|w| !w.reason.is_empty()));
            assert!(policy.env.allow.iter().all(|r| !r.reason.is_empty()));
            assert!(policy.seccomp.deny.iter().all(|r| policies::syscalls::number(r.name) == Some(r.nr)));
            // The env filter never lets a forced name through twice.
            let env = policy.env.filter(policy.env.set.iter().map(|s| (s.name.clone(), "x".to_owned())));
            assert_eq!(env.len(), policy.env.set.len());
        }
        Err(err) => {
            if let Some(at) = err.location() {
                assert!(at.line >= 1 && at.line <= text.lines().count() + 1, "{err}");
            }
            let message = err.to_string();
            assert!(!message.ends_with('.'), "{message}");
        }
    }
});
