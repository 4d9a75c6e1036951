//! Output that is never silently lost (issue 6), through the real stack: real programs' output turned
//! into the model view (progress bars, colours, repeats, binary, UTF-8), the cheap views over a 200 MiB
//! output, exact raw byte counts for 1 GiB, secrets screened from every model-facing view, and live
//! streaming to a subscriber.

use heddle_tests::{read_stream, Client, Heddle};
use serde_json::{json, Value};
use std::time::Duration;

fn run(c: &mut Client, s: &Value, cmd: &str) -> Value {
    let r = c.call("run", json!({"session": s, "cmd": cmd, "yield_ms": 300_000})).expect("run");
    assert_eq!(r["state"], "exited", "{r}");
    r
}

fn view(r: &Value) -> &str {
    r["view"].as_str().expect("view")
}

fn output(c: &mut Client, s: &Value, job: &Value, params: Value) -> Value {
    let mut p = json!({"session": s, "job": job});
    p.as_object_mut().unwrap().extend(params.as_object().unwrap().clone());
    c.call("output", p).expect("output")
}

#[test]
fn cargo_style_progress_leaves_the_compiling_lines() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let cmd = r#"for i in 1 2 3 4 5; do
        printf '\r\033[K\033[1m\033[32m   Compiling\033[0m crate%d v0.1.0\n' $i
        printf '\033[1m\033[36m    Building\033[0m [%-5s] %d/5: crate%d' "$(head -c $i /dev/zero | tr '\0' =)" $i $i
      done
      printf '\r\033[K\033[1m\033[32m    Finished\033[0m dev profile in 1.2s\n'"#;
    let r = run(&mut c, &s, cmd);
    let want: String = (1..=5).map(|i| format!("   Compiling crate{i} v0.1.0\n")).collect::<String>()
        + "    Finished dev profile in 1.2s\n";
    assert_eq!(view(&r), want);
}

#[test]
fn a_ten_thousand_frame_progress_bar_leaves_one_line() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = run(
        &mut c,
        &s,
        r#"for i in $(seq 1 10000); do printf '\rDownloading %3d%% [%d/10000]' $((i/100)) $i; done; echo"#,
    );
    assert_eq!(view(&r), "Downloading 100% [10000/10000]\n");
    assert!(r["stdout_bytes"].as_u64().unwrap() > 250_000, "every frame was written: {}", r["stdout_bytes"]);
}

#[test]
fn grep_colour_leaves_no_escape_bytes() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = run(&mut c, &s, "printf 'foo bar\\nbaz\\nbar none\\n' | grep --color=always bar");
    assert_eq!(view(&r), "foo bar\nbar none\n");
    let raw = read_stream(&mut c, &s, &r["job"], "stdout");
    assert!(raw.contains(&0x1b), "the raw store keeps the colours for a dashboard");
}

#[test]
fn a_hundred_thousand_identical_lines_are_one_line_with_the_count() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = run(&mut c, &s, "echo begin; yes same | head -n 100000; echo end");
    assert_eq!(view(&r), "begin\nsame (×100000)\nend\n");
    let last = output(&mut c, &s, &r["job"], json!({"lines": [100002, 100002]}));
    assert_eq!(last["text"], "100002: end\n", "line numbers count every repetition");
}

#[test]
fn gzip_output_is_named_as_binary() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = run(&mut c, &s, "seq 1 200000 | gzip -c");
    let v = view(&r);
    assert!(v.starts_with("<binary: ") && v.ends_with(", gzip data>\n") && v.lines().count() == 1, "{v}");
    assert!(v.contains("KiB"), "{v}");
}

#[test]
fn utf8_split_across_writes_is_whole_and_invalid_bytes_are_safe() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = run(&mut c, &s, r"printf 'price: \xe2\x82'; sleep 0.2; printf '\xac 5\n'");
    assert_eq!(view(&r), "price: € 5\n");
    let r = run(&mut c, &s, r"printf 'ok \xff\xfe end\n'");
    assert_eq!(view(&r), "ok \u{FFFD}\u{FFFD} end\n");
}

/// 200 MiB of numbered lines with one crash in the middle.
#[test]
fn two_hundred_mib_view_fits_the_budget_and_every_line_is_reachable() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    // 2,000,000 lines of 105 bytes = 210,000,000 bytes; line 1,000,000 is the crash.
    let cmd = r#"awk 'BEGIN { pad = sprintf("%90s", ""); gsub(/ /, "x", pad);
        for (i = 1; i <= 2000000; i++) {
          if (i == 1000000) printf "thread main panicked at src/lib.rs:%07d\n", i;
          else printf "line %07d %s\n", i, pad } }'"#;
    let r = run(&mut c, &s, cmd);
    let total = r["stdout_bytes"].as_u64().unwrap();
    assert!(total > 200_000_000, "{total}");
    let v = view(&r);
    assert!(v.len() <= 40_000 + 2_000, "view within the default budget: {}", v.len());
    let om = &r["omitted"];
    let (a, b) = (om["lines"][0].as_u64().unwrap(), om["lines"][1].as_u64().unwrap());
    let marker = v.lines().find(|l| l.starts_with("[… heddle: ")).expect("one marker line");
    assert_eq!(v.matches("[… heddle: ").count(), 1);
    assert!(
        marker.contains(&format!("{} lines, {} bytes omitted (lines {a}–{b})", b - a + 1, om["bytes"])),
        "{marker}"
    );
    assert!(
        marker.contains(&format!(r#"output {{"session": {s}, "job": {}, "lines": [{a}, {b}]}}"#, r["job"])),
        "{marker}"
    );
    // Shown + omitted = everything, by lines and by bytes.
    let (head, rest) = v.split_once(marker).unwrap();
    let tail: String = rest.lines().filter(|l| l.starts_with("line ")).map(|l| format!("{l}\n")).collect();
    assert_eq!(head.lines().count() as u64 + (b - a + 1) + tail.lines().count() as u64, 2_000_000);
    assert_eq!(head.len() as u64 + om["bytes"].as_u64().unwrap() + tail.len() as u64, total);
    assert!(v.contains("[errors in omitted part: 1 error-shaped line;"), "{}", &rest[..300.min(rest.len())]);
    assert!(
        v.contains("  line 1000000: thread main panicked at src/lib.rs:1000000\n"),
        "{}",
        &rest[..600.min(rest.len())]
    );
    // Every line is reachable: ranges anywhere, grep anywhere, the tail.
    for n in [1u64, 2, 777_777, 999_999, 1_000_001, 1_999_999, 2_000_000] {
        let got = output(&mut c, &s, &r["job"], json!({"lines": [n, n], "format": "lines"}));
        assert_eq!(got["lines"][0]["text"].as_str().unwrap(), format!("line {n:07} {}", "x".repeat(90)));
    }
    let g = output(&mut c, &s, &r["job"], json!({"grep": {"pattern": "panicked", "context": 1}, "format": "lines"}));
    assert_eq!(g["matches"], 1);
    assert_eq!(g["lines"][1]["line"], 1_000_000);
    let g =
        output(&mut c, &s, &r["job"], json!({"grep": {"pattern": "^line 1234567 ", "context": 0}, "format": "lines"}));
    assert_eq!(g["lines"][0]["line"], 1_234_567);
    let e = output(&mut c, &s, &r["job"], json!({"errors": true, "format": "lines"}));
    assert_eq!((e["matches"].as_u64(), e["lines"][2]["line"].as_u64()), (Some(1), Some(1_000_000)));
    let t = output(&mut c, &s, &r["job"], json!({"tail": 3, "format": "lines"}));
    assert_eq!(
        t["lines"].as_array().unwrap().iter().map(|l| l["line"].as_u64().unwrap()).collect::<Vec<_>>(),
        [1_999_998, 1_999_999, 2_000_000]
    );
}

#[test]
fn one_gib_as_fast_as_possible_is_stored_byte_for_byte() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let t0 = std::time::Instant::now();
    let r = run(&mut c, &s, "head -c 1G /dev/zero | tr '\\0' a");
    let took = t0.elapsed();
    assert_eq!(r["stdout_bytes"].as_u64(), Some(1 << 30));
    let raw = output(&mut c, &s, &r["job"], json!({"raw": {"offset": (1u64 << 30) - 10, "unredacted": true}}));
    assert_eq!((raw["total"].as_u64(), raw["data"].as_str()), (Some(1 << 30), Some("aaaaaaaaaa")));
    // The log holds every byte plus one 16-byte header per chunk.
    let log = h.state_dir.join(format!("sessions/{}/jobs/{}.log", s.as_str().unwrap(), r["job"]));
    let size = std::fs::metadata(&log).unwrap().len();
    assert!(size >= 1 << 30 && (size - (1 << 30)) % 16 == 0, "{size}");
    eprintln!("1 GiB through the stack into the store in {took:?} (debug build; see heddle-bench throughput)");
}

#[test]
fn secrets_never_reach_a_model_facing_view() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let mut sub = h.client();
    sub.call("subscribe", json!({"session": s})).unwrap();
    // Writes to different streams are spaced out: across stdout and stderr, arrival order is the worker's
    // read order, which matches write order only for writes further apart than one wake-up of the worker.
    let cmd = r#"echo "AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE"; sleep 0.1
        echo "cloning with ghp_abcdefghijklmnopqrstuvwxyz0123456789 failed" >&2; sleep 0.1
        printf -- '-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAsecretsecretsecret\nZZZZsecondlinesecret\n-----END RSA PRIVATE KEY-----\n'
        echo done"#;
    let r = run(&mut c, &s, cmd);
    let job = r["job"].clone();
    let secrets = ["AKIAIOSFODNN7EXAMPLE", "ghp_abcdefghij", "MIIEpAIBAAKC", "ZZZZsecond"];
    let mut views = Vec::new();
    for p in [
        json!({"lines": [1, 100]}),
        json!({"tail": 50}),
        json!({"errors": true}),
        json!({"grep": {"pattern": "."}}),
        json!({"grep": {"pattern": "AKIA|ghp_|MII|ZZZZ"}}),
    ] {
        views.push(output(&mut c, &s, &job, p).to_string());
    }
    // `cmd` echoes what the client itself sent; everything else is the job's output.
    let without_cmd = |mut v: Value| {
        v.as_object_mut().unwrap().remove("cmd");
        v.to_string()
    };
    views.push(without_cmd(c.call("wait", json!({"session": s, "job": job})).unwrap()));
    views.push(view(&r).to_owned());
    loop {
        let n = sub.next_notification().unwrap();
        views.push(n.to_string());
        if n["method"] == "job.settled" {
            break;
        }
    }
    for v in &views {
        for secret in secrets {
            assert!(!v.contains(secret), "{secret} leaked into {v}");
        }
    }
    assert_eq!(
        view(&r),
        "AWS_ACCESS_KEY_ID=[redacted:aws-key]\ncloning with [redacted:github-token] failed\n[redacted:private-key] (×4)\ndone\n",
        "redacted, and stdout and stderr lines stay in arrival order"
    );
    assert!(view(&r).contains("[redacted:github-token]") && view(&r).contains("[redacted:private-key]"));
    // The raw store keeps the bytes, behind the explicit flag.
    let refused = c.call("output", json!({"session": s, "job": job, "raw": {"offset": 0}})).unwrap_err();
    assert_eq!(refused.code(), Some(-32602));
    let raw = output(&mut c, &s, &job, json!({"raw": {"offset": 0, "unredacted": true}}));
    assert!(raw["data"].as_str().unwrap().contains("AKIAIOSFODNN7EXAMPLE") && raw["unredacted"] == true);
}

#[test]
fn a_subscriber_receives_output_while_the_job_runs_in_order_without_gaps() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let mut sub = h.client();
    sub.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let id = sub.call("subscribe", json!({"session": s, "raw": true})).unwrap()["subscription"].clone();
    let gate = tempfile::Builder::new().prefix("heddle-gate").tempdir_in("/tmp").unwrap();
    std::fs::set_permissions(gate.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let go = gate.path().join("go");
    let cmd = format!("echo first; while [ ! -e {} ]; do sleep 0.01; done; seq 1 20000; echo last", go.display());
    let r = c.call("run", json!({"session": s, "cmd": cmd, "yield_ms": 0})).unwrap();
    assert_eq!(r["state"], "running");
    let (mut seq, mut offset, mut data, mut ended) = (0u64, 0u64, String::new(), false);
    loop {
        let n = sub.next_notification().unwrap();
        let p = &n["params"];
        assert_eq!((&p["subscription"], p["seq"].as_u64()), (&id, Some(seq + 1)), "in order, no gaps: {n}");
        seq += 1;
        match n["method"].as_str().unwrap() {
            "output" => {
                assert_eq!(p["offset"].as_u64(), Some(offset), "stream offsets continue: {n}");
                offset += p["len"].as_u64().unwrap();
                data.push_str(p["data"].as_str().unwrap());
                if data == "first\n" {
                    // The job is still waiting for us: this output arrived while it runs.
                    let j = c.call("jobs", json!({"session": s})).unwrap();
                    assert_eq!(j["jobs"][0]["state"], "running");
                    std::fs::write(&go, b"").unwrap();
                }
            }
            "job.end" => ended = true,
            "job.settled" => break,
            other => panic!("unexpected notification {other}: {n}"),
        }
    }
    assert!(ended);
    let want = format!("first\n{}last\n", (1..=20000).map(|i| format!("{i}\n")).collect::<String>());
    assert_eq!(data, want);
}

#[test]
fn a_build_log_over_the_budget_shows_its_last_lines() {
    // ~105 KB: over the default view budget, under the 256 KiB the head keeps in memory. The view showed
    // only the head and the marker, without the last lines, where a build's or a test run's verdict is.
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = run(&mut c, &s, "seq -f 'line %08g of some build output' 1 2999; echo 'test result: FAILED. 1 failed'");
    let v = view(&r);
    assert!(v.starts_with("line 00000001 of some build output\n"), "{}", &v[..100]);
    assert!(
        v.ends_with("line 00002999 of some build output\ntest result: FAILED. 1 failed\n"),
        "{}",
        &v[v.len() - 300..]
    );
    let omitted = &r["omitted"];
    let (first, last) = (omitted["lines"][0].as_u64().unwrap(), omitted["lines"][1].as_u64().unwrap());
    let after: Vec<&str> = v.rsplit_once(" …]\n").unwrap().1.lines().collect();
    assert_eq!(after[0], format!("line {:08} of some build output", last + 1), "the tail joins the marker's range");
    assert_eq!(first - 1 + (last - first + 1) + after.len() as u64, 3000, "every line is shown or omitted");
}

#[test]
fn a_view_at_the_minimum_budget_shows_lines_and_names_the_call_for_the_rest() {
    // The marker's reserve (1,600 bytes) was larger than the smallest budget (1,000): such a view was
    // the marker alone. Lines get what the marker and the errors block leave, and nothing overruns.
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let cmd = "seq 1 3000; python3 -c \"d = {}\nd['user_id']\" 2>&1; seq 3001 6000";
    let r = c.call("run", json!({"session": s, "cmd": cmd, "yield_ms": 60_000, "max_output_bytes": 1000})).unwrap();
    assert_eq!(r["state"], "exited", "{r}");
    assert!(r["note"].is_null(), "1000 is inside the allowed budgets: {r}");
    let v = view(&r);
    assert!(v.len() <= 1000, "{} bytes over the budget: {v}", v.len());
    assert!(v.starts_with("1\n2\n3\n") && v.ends_with("5998\n5999\n6000\n"), "lines at both ends: {v}");
    assert!(v.contains("[errors in omitted part: "), "the errors block fits too: {v}");
    let omitted = &r["omitted"];
    let (first, last) = (omitted["lines"][0].as_u64().unwrap(), omitted["lines"][1].as_u64().unwrap());
    let call = format!("output {{\"session\": {s}, \"job\": {}, \"lines\": [{first}, {last}]}}", r["job"]);
    assert!(v.contains(&call), "the marker names {call}: {v}");
    let rest = output(&mut c, &s, &r["job"], json!({"lines": [first, first + 2]}));
    let want = format!("{first}: {first}\n{0}: {0}\n{1}: {1}\n", first + 1, first + 2);
    assert_eq!(rest["text"], want, "the call shows the omitted lines: {rest}");
    assert!(rest["note"].is_null(), "{rest}");
    // Past the last line, and a budget below the least: said, not an empty view alone.
    let past = output(&mut c, &s, &r["job"], json!({"lines": [9000, 9001]}));
    assert_eq!(past["text"], "", "{past}");
    let total = past["total_lines"].as_u64().unwrap();
    assert!(total > 6000 && total < 9000, "{past}");
    let note = past["note"].as_str().unwrap_or_default();
    assert!(note.contains(&format!("has {total} numbered lines: lines 9000–9001 are past them")), "{past}");
    let small = output(&mut c, &s, &r["job"], json!({"tail": 3, "max_output_bytes": 100}));
    let note = small["note"].as_str().unwrap_or_default();
    assert!(note.contains("max_output_bytes 100 is outside what a view takes (1000 to "), "{small}");
}

#[test]
fn an_exception_in_the_middle_of_a_long_log_is_listed_under_the_marker() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let cmd = "seq 1 20000; python3 -c \"d = {}\nd['user_id']\" 2>&1; seq 1 20000";
    let r = run(&mut c, &s, cmd);
    let view = r["view"].as_str().unwrap();
    assert!(r["omitted"]["errors"].as_u64().unwrap() >= 2, "{}", r["omitted"]);
    assert!(view.contains("KeyError: 'user_id'"), "the exception line is listed, not only its Traceback: {view}");
    let errors = c.call("output", json!({"session": s, "job": r["job"], "errors": true})).unwrap();
    assert!(errors["text"].as_str().unwrap().contains("KeyError: 'user_id'"), "{errors}");
}

#[test]
fn binary_stretches_are_named_with_their_size_and_the_text_around_them_stays_searchable() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    // A stream that starts with binary, then text; then text, binary, text.
    let cmd = r"head -c 3000 /dev/zero | tr '\0' '\1'; printf '\n'; echo 'the build finished fine'; echo done;
        echo 'before the blob'; printf 'ab\0\0\0\0\0\0cd\n'; echo 'after the blob'";
    let r = run(&mut c, &s, cmd);
    let v = view(&r);
    assert!(!v.contains('\u{FFFD}'), "{v}");
    let lines: Vec<&str> = v.lines().collect();
    assert_eq!(
        lines,
        [
            "<binary: 2.9 KiB, data>",
            "the build finished fine",
            "done",
            "before the blob",
            "<binary: 11 bytes, data>",
            "after the blob"
        ],
        "{v}"
    );
    let g =
        output(&mut c, &s, &r["job"], json!({"grep": {"pattern": "finished fine", "context": 0}, "format": "lines"}));
    assert_eq!((g["matches"].as_u64(), g["lines"][0]["line"].as_u64()), (Some(1), Some(2)), "{g}");
    assert_eq!(g["lines"][0]["text"], "the build finished fine", "{g}");
}

#[test]
fn an_ended_jobs_views_are_read_back_from_disk_and_it_holds_little() {
    // 3,000 lines of 35 bytes: ~300 KB of rendered lines the front held for as long as the session
    // kept the job. Once the job ended and was reported, its views read the line log back.
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = run(&mut c, &s, "seq -f 'line %08g of some build output' 1 3000");
    let job = &r["job"];
    let held = |c: &mut Client| {
        c.call("describe", json!({"session": s})).unwrap()["sessions"][0]["output_held_bytes"].as_u64().unwrap()
    };
    assert!(
        heddle_tests::eventually(Duration::from_secs(10), || held(&mut c) <= 8 * 1024),
        "an ended 3,000-line job holds {} bytes in the front",
        held(&mut c)
    );
    let again = c.call("wait", json!({"session": s, "job": job, "yield_ms": 0})).unwrap();
    assert_eq!(view(&again), view(&r), "the model view is the one the run answered with");
    let small = c.call("wait", json!({"session": s, "job": job, "yield_ms": 0, "max_output_bytes": 1000})).unwrap();
    assert!(view(&small).ends_with("line 00003000 of some build output\n"), "{}", view(&small));
    let lines = output(&mut c, &s, job, json!({"lines": [1500, 1502]}));
    assert_eq!(
        lines["text"],
        "1500: line 00001500 of some build output\n1501: line 00001501 of some build output\n1502: line 00001502 of some build output\n"
    );
    let tail = output(&mut c, &s, job, json!({"tail": 2}));
    assert_eq!(tail["text"], "2999: line 00002999 of some build output\n3000: line 00003000 of some build output\n");
    let grep = output(&mut c, &s, job, json!({"grep": {"pattern": "0000222[12]", "context": 0}}));
    assert_eq!(grep["text"], "2221: line 00002221 of some build output\n2222: line 00002222 of some build output\n");
    assert_eq!((grep["matches"].as_u64(), lines["total_lines"].as_u64()), (Some(2), Some(3000)));
}

/// `output {tail}` of a running job whose last lines are still open (a cursor-up could redraw them)
/// shows them as they are now, marked `open:`, after the numbered ones; it used to show nothing.
#[test]
fn the_tail_of_a_running_job_shows_its_open_lines() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = c
        .call("run", json!({"session": s, "cmd": "for i in 1 2 3; do echo tick $i; done; sleep 30", "yield_ms": 500}))
        .unwrap();
    assert_eq!(r["state"], "running", "{r}");
    let t = output(&mut c, &s, &r["job"], json!({"tail": 2}));
    let text = t["text"].as_str().unwrap_or_default();
    assert_eq!(text, "open: tick 2\nopen: tick 3\n", "the last two lines, as they are now: {t}");
    assert!(t["note"].as_str().unwrap_or_default().contains("the last 2 lines (`open:`)"), "{t}");
    c.call("kill", json!({"session": s, "job": r["job"]})).unwrap();
}

/// A grep view marks matches as grep does (`N:` a match, `N-` context) and, when it stops early, says
/// whether `max` or the byte budget stopped it.
#[test]
fn grep_marks_matches_and_says_which_limit_stopped_it() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let r = run(&mut c, &s, "printf 'a\\nhit 1\\nb\\nc\\nhit 2\\nd\\n'");
    let g = output(&mut c, &s, &r["job"], json!({"grep": {"pattern": "hit", "context": 1, "max": 1}}));
    assert_eq!(g["text"], "1- a\n2: hit 1\n3- b\n", "{g}");
    let note = g["note"].as_str().unwrap_or_default();
    assert!(note.starts_with("the view stopped early (at max 1) with 2 matches in all"), "{g}");
}
