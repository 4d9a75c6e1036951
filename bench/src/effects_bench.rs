//! `heddle-bench effects`: what the effects ledger adds to `run("true")`, and what the guard linter costs
//! per call.
//!
//! One stack, one git repository of 10,000 committed files made by a job (so owned by the jobs' uid),
//! and a copy of it with 100 dirty files. Four sessions — clean repo and dirty repo, each with the
//! default ledger (`effects: "paths"`) and with `effects: "none"` — run `true` in a loop interleaved
//! with the baseline, a bare posix_spawn of `bash --noprofile --norc -c true` + wait, each after the same
//! pause (an agent's pace: the worker's pre-started shell is ready). A session never mixes modes: a
//! `"none"` job would end the reuse of the previous job's "after" as the next "before".
//! Reported: each variant against the bare spawn, and the ledger's overhead (paths − none) as a share of
//! the bare spawn, at p50 and p90; then the guard linter (`front::guard::check` with the builtin
//! `workspace` profile's rules) per call over typical commands, in µs, with the bare spawn for scale.

use anyhow::Result;
use heddle_bench::{report, time_us, Summary};
use heddle_tests::{Client, Heddle};
use serde_json::{json, Value};
use std::time::Duration;

/// 10,000 files in 100 directories, committed (no auto-maintenance left running); then, a second later,
/// the index refreshed, so its entries are not "racily clean" (written in the index's own second, which
/// makes every `git status` read them all), as in a repository whose files were not all just written.
const INIT: &str = "git init -q . && for d in $(seq 0 99); do mkdir d$d; for f in $(seq 0 99); do \
     echo \"file $d $f\" > d$d/f$f; done; done && git add . \
     && git -c user.email=b@b -c user.name=b -c maintenance.auto=false commit -qm init \
     && sleep 1.1 && git update-index -q --really-refresh";
/// 100 tracked files made dirty.
const DIRTY: &str = "for f in $(seq 0 99); do echo changed >> d7/f$f; done";

struct Variant {
    name: String,
    effects: &'static str,
    client: Client,
    session: Value,
    times: Vec<f64>,
    cost_us: Vec<f64>,
    /// The watched part's walks (the session's temp dir and home), µs.
    watched_us: Vec<f64>,
    /// Calls whose "before" cost no git run (the previous job's "after", or the monitor's last snapshot).
    reused: usize,
    /// How each call's "after" was read (`watch`, `pathspec`, `full`), counted.
    methods: std::collections::BTreeMap<String, usize>,
}

impl Variant {
    fn call(&mut self) -> f64 {
        let p = json!({"session": self.session, "cmd": "true", "effects": self.effects, "yield_ms": 20_000});
        let client = &mut self.client;
        let mut r = Value::Null;
        let t = time_us(|| r = client.call("run", p).expect("run"));
        assert_eq!(r["exit_code"], 0, "{r}");
        if self.effects != "none" {
            let project = &r["effects"]["project"];
            assert_eq!(project["changed"], json!([]), "true changes nothing: {r}");
            assert!(project["confidence"] != "none", "the ledger was taken: {r}");
            self.cost_us.push(project["cost_us"].as_f64().unwrap_or(0.0));
            self.watched_us.push(r["effects"]["watched"]["cost_us"].as_f64().unwrap_or(0.0));
            let before = project["before"].as_str().unwrap_or_default();
            self.reused += usize::from(before.starts_with("the after of job") || before.contains("(no git run)"));
            *self.methods.entry(project["method"].as_str().unwrap_or("?").to_owned()).or_default() += 1;
        }
        t
    }
}

/// A session whose cwd is a fresh repository `name` under the project dir, made by `init` as the jobs'
/// uid, then changed by `then`.
fn repo(h: &Heddle, name: &str, then: &str) -> std::path::PathBuf {
    let mut c = h.client();
    let first = h.open_session(&mut c);
    let uid = heddle_tests::run_to_end(&mut c, &first, "id -u")["view"].as_str().unwrap().trim().parse().unwrap();
    let dir = h.project.join(name);
    std::fs::create_dir(&dir).unwrap();
    std::os::unix::fs::chown(&dir, Some(uid), None).unwrap();
    let s = c.call("session.open", json!({"name": format!("{name}-init"), "cwd": dir})).unwrap()["session"].clone();
    for cmd in [INIT, then] {
        let r = c
            .call("run", json!({"session": s, "cmd": cmd, "effects": "none", "yield_ms": 600_000}))
            .expect("make the repository");
        assert_eq!(r["exit_code"], 0, "{r}");
    }
    dir
}

fn variant(h: &Heddle, name: &str, dir: &std::path::Path, effects: &'static str) -> Variant {
    let mut client = h.client();
    let session = client.call("session.open", json!({"name": name, "cwd": dir})).unwrap()["session"].clone();
    let (times, cost_us, watched_us) = (Vec::new(), Vec::new(), Vec::new());
    Variant {
        name: name.to_owned(),
        effects,
        client,
        session,
        times,
        cost_us,
        watched_us,
        reused: 0,
        methods: Default::default(),
    }
}

pub fn run(iterations: usize, pause_ms: u64, lint_rounds: usize) -> Result<()> {
    let h = Heddle::start();
    let clean = repo(&h, "clean", "true");
    let dirty = repo(&h, "dirty", DIRTY);
    let mut variants = [
        variant(&h, "clean-paths", &clean, "paths"),
        variant(&h, "clean-none", &clean, "none"),
        variant(&h, "dirty-paths", &dirty, "paths"),
        variant(&h, "dirty-none", &dirty, "none"),
    ];
    let pause = Duration::from_millis(pause_ms);
    let mut bare = Vec::new();
    for i in 0..iterations + 10 {
        std::thread::sleep(pause);
        let b = time_us(crate::bare_bash_true);
        // The variants take turns at going first: the call right after the bare spawn is not always
        // the same variant's (an order effect would otherwise read as a variant's cost).
        let n = variants.len();
        for k in 0..n {
            let v = &mut variants[(i + k) % n];
            std::thread::sleep(pause);
            let t = v.call();
            if i >= 10 {
                v.times.push(t);
            }
        }
        if i >= 10 {
            bare.push(b);
        }
    }
    let bare = Summary::of(bare);
    for v in &variants {
        report(
            &format!("run(\"true\") {} vs bare bash spawn+wait", v.name),
            "bare posix_spawn(bash -c true) + wait",
            bare,
            &format!("heddle run(\"true\"), {}", v.name),
            Summary::of(v.times.clone()),
        );
    }
    println!("== the ledger's overhead (paths − none) as a share of the bare spawn");
    for (paths, none) in [(&variants[0], &variants[1]), (&variants[2], &variants[3])] {
        let (p, n) = (Summary::of(paths.times.clone()), Summary::of(none.times.clone()));
        let (cost, watched) = (Summary::of(paths.cost_us.clone()), Summary::of(paths.watched_us.clone()));
        println!(
            "{:<12} p50 {:+.1}% p90 {:+.1}% of bare; project cost_us p50 {:.0} p90 {:.0}; watched cost_us p50 {:.0} \
             p90 {:.0}; before without git in {}/{} calls; after read by {:?}",
            paths.name,
            100.0 * (p.p50 - n.p50) / bare.p50,
            100.0 * (p.p90 - n.p90) / bare.p90,
            cost.p50,
            cost.p90,
            watched.p50,
            watched.p90,
            paths.reused,
            paths.cost_us.len(),
            paths.methods
        );
    }
    lint(lint_rounds, bare);
    Ok(())
}

/// Typical commands of an agent, and one the rules deny; each parsed anew (the parser's one-command
/// cache never hits: the commands alternate).
const COMMANDS: &[&str] = &[
    "cargo test -p front 2>&1 | tail -40",
    "cd src && grep -rn 'fn main' . | head",
    "git status --short && git diff --stat",
    "sed -i 's/old_name/new_name/g' src/*.rs && cargo check",
    "python3 -c 'import sys; print(sys.version)'",
    "for f in $(ls *.txt); do wc -l \"$f\"; done",
    "cat <<EOF > notes.md\n# title $HOME\nbody\nEOF",
    "pkill -f 'node server.js'",
];

fn lint(rounds: usize, bare: Summary) {
    let policy = policies::Policy::builtin("workspace").expect("builtin profile");
    let ctx = front::guard::Ctx {
        roots: vec!["/srv/proj".into(), "/tmp/heddle-s1".into()],
        cwd: "/srv/proj".into(),
        home: Some("/home/a".into()),
        tty: false,
    };
    let mut per_call = Vec::new();
    for i in 0..rounds * COMMANDS.len() {
        let cmd = COMMANDS[i % COMMANDS.len()];
        let t = time_us(|| {
            std::hint::black_box(front::guard::check(cmd, &policy.guards, &ctx));
        });
        if i >= COMMANDS.len() {
            per_call.push(t);
        }
    }
    let s = Summary::of(per_call);
    println!("== guard lint per call ({} typical commands, n = {})", COMMANDS.len(), s.n);
    println!(
        "front::guard::check      p50 {:.1} µs  p90 {:.1} µs  p99 {:.1} µs  ({:.2}% of a bare bash spawn at p50)",
        s.p50,
        s.p90,
        s.p99,
        100.0 * s.p50 / bare.p50
    );
}
