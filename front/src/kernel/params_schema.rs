//! Schema stability of the params: each method's params as its serde type accepts them (read from the
//! type's own "unknown field …, expected one of …" answer, through [`Kernel::call`](super::Kernel::call))
//! against the headings of docs/protocol.md (`METHOD {a, b?, …}`). A param renamed in code without the
//! docs, or in the docs without the code, fails here, naming it. The results are checked by
//! `protocol/tests/schema.rs`.

use protocol::doc_schema::{bullet_names, params_in_headings, section, PROTOCOL_MD};
use serde_json::{json, Value};
use std::collections::BTreeSet;

/// The fields serde lists after rejecting the unknown field `zz_probe`.
fn expected_fields(method: &str, message: &str) -> BTreeSet<String> {
    let list = message
        .split_once("unknown field `zz_probe`, ")
        .unwrap_or_else(|| panic!("{method}: not an unknown-field answer: {message}"))
        .1;
    let list = list.split(';').next().unwrap_or_default();
    list.split('`').skip(1).step_by(2).map(str::to_owned).collect()
}

/// The params `method` accepts: `probe` (with `zz_probe` added) answered by the kernel.
fn accepted(h: &crate::testing::Harness, method: &str, mut probe: Value) -> BTreeSet<String> {
    probe["zz_probe"] = json!(1);
    let message = match method {
        // Served only on a socket connection: their types are read directly.
        "subscribe" => crate::rpc::params::<super::subscribe::SubParams>(method, probe).err(),
        "unsubscribe" => crate::rpc::params::<super::subscribe::UnsubParams>(method, probe).err(),
        _ => h.call(method, probe).err(),
    };
    let mut fields = expected_fields(method, &message.unwrap_or_else(|| panic!("{method} accepted zz_probe")).message);
    // Every mutation takes `idempotency_key`; docs/protocol.md states it once for all of them.
    if crate::kernel::receipts::MUTATIONS.contains(&method) {
        fields.remove("idempotency_key");
    }
    fields
}

#[test]
fn every_methods_params_match_the_docs_headings() {
    let h = crate::testing::Harness::new();
    let mut docs = params_in_headings(PROTOCOL_MD, &super::METHODS);
    // `output`'s `<one view>`: the views its section lists as bullets.
    let views = section(PROTOCOL_MD, "### `output {session, job, <one view>").expect("the output section");
    docs.entry("output".into()).or_default().extend(bullet_names(views));
    let mut failures = Vec::new();
    for method in super::METHODS {
        let mut code = accepted(&h, method, json!({}));
        if method == "output" {
            code.extend(accepted(&h, method, json!({"screen": true}))); // the terminal views' type
        }
        let documented = docs.remove(method).unwrap_or_default();
        let undocumented: Vec<_> = code.difference(&documented).collect();
        let unknown: Vec<_> = documented.difference(&code).collect();
        if !undocumented.is_empty() || !unknown.is_empty() {
            failures.push(format!(
                "{method}: params in the code but not in docs/protocol.md's headings: {undocumented:?}; \
                 in the docs but not in the code: {unknown:?}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_probe_reads_serde_answers() {
    let fields = expected_fields("m", "invalid params for m: unknown field `zz_probe`, expected `a` or `b`; see x");
    assert_eq!(fields.into_iter().collect::<Vec<_>>(), ["a", "b"]);
    assert!(expected_fields("kept", "unknown field `zz_probe`, there are no fields; see").is_empty());
}

/// A mutation's unknown-field answer names `idempotency_key` among the fields it takes (serde's list
/// left it out: the key is taken out of the params before the method reads them).
#[test]
fn a_mutations_field_list_names_the_idempotency_key() {
    let h = crate::testing::Harness::new();
    for method in ["run", "kill", "session.open"] {
        let e = h.call(method, json!({"zz_probe": 1})).expect_err("an unknown field");
        assert!(e.message.contains("expected `idempotency_key` or one of `"), "{method}: {}", e.message);
    }
    let e = h.call("jobs", json!({"session": "s", "zz_probe": 1})).expect_err("an unknown field");
    assert!(!e.message.contains("idempotency_key"), "jobs is no mutation: {}", e.message);
}
