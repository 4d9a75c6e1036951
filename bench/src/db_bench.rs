//! `heddle-bench db`: what the database, the receipts and the journal cost a `run`, as ratios against
//! `run("true")` through the real stack measured in the same run.
//!
//! Three subjects, interleaved with the baseline so noise hits them alike:
//! - *rows, queued*: the request-path part — queueing the rows one `run("true")` produces (its receipt,
//!   the job's `running` and `exited` rows) on the database's channel;
//! - *rows, committed*: the same rows and a wait until the writer thread committed them (WAL,
//!   `synchronous=NORMAL`) — the whole database cost of one run if nothing else were batched with it;
//! - *a keyed run*: `run("true")` with a fresh `idempotency_key` (key lookup, fingerprint, one more
//!   index entry) against the same run without one, both through the socket, each after the same pause
//!   (so each finds its pre-started shell) and in alternating order; the bench prints how many of each
//!   ran on one. (Until session 22 the plain call always came first, after the bench's own journal work,
//!   and found the spare, while the keyed one came right after it and started cold: a keyed run looked
//!   1.2–1.4× a plain one, and was the same.)
//! - *journal entry* without and with `fdatasync`: one `Job` entry and one `Batch` entry (the events
//!   of a short job) appended to a session journal, as the pump writes them — the price of promising
//!   host-crash durability for the journal;
//! - *keyed entry*: the `Keyed` journal entry a keyed run appends before its worker hears of it (its
//!   receipt, as JSON), the part of a keyed run that makes its admission survive a front SIGKILL.

use anyhow::Result;
use front::sessions::journal::{Entry, Journal};
use front::storage::db::{Db, JobRow, ReceiptRow, Write};
use heddle_bench::{report, time_us, Summary};
use serde_json::json;
use shm_proto::msg::Event;

/// The rows `run("true")` #`i` produces.
fn run_rows(i: u64) -> [Write; 3] {
    let receipt = ReceiptRow {
        id: format!("rbench-{i}"),
        op: "run".into(),
        session: Some("bench".into()),
        owner_uid: 0,
        idempotency_key: None,
        fingerprint: format!("{i:032x}"),
        admitted_at_ms: 0,
        outcome: "\"admitted\"".into(),
        job: Some(i),
        result: None,
        boot: "bench".into(),
        serial: Some(1),
    };
    let row = |state: &str| JobRow {
        cmd: "true".into(),
        state: state.into(),
        exit_code: (state == "exited").then_some(0),
        signal: None,
        stdout_bytes: 0,
        stderr_bytes: 0,
        started_at_ms: 0,
        duration_ms: 1.0,
        log_path: format!("/var/lib/heddle/sessions/bench/jobs/{i}.log"),
        record: json!({"job": i, "session": "bench", "cmd": "true", "state": state, "exit_code": 0, "view": ""})
            .to_string(),
    };
    let job = |state| Write::Job { serial: 1, session: "bench".into(), job: i, row: row(state) };
    [Write::Receipt(receipt), job("running"), job("exited")]
}

fn journal_entries(i: u64) -> [Entry; 2] {
    let events = vec![
        Event::Started { job: i, pid: 4242, at_unix_ns: 1, prestarted: false, cgroup: "slot-1".into() },
        Event::Exited { job: i, code: Some(0), signal: None, at_unix_ns: 2, killed: false },
        Event::StreamsClosed { job: i },
    ];
    [
        Entry::Job { id: i, cmd: "true".into() },
        Entry::Batch { from: i * 256, to: i * 256 + 256, before: vec![], events },
    ]
}

pub fn run(iterations: usize) -> Result<()> {
    let h = heddle_tests::Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let mut keys = 0u64;
    // Whether the call ran on a pre-started shell.
    let mut call = |keyed: bool| -> bool {
        let mut p = json!({"session": s, "cmd": "true"});
        if keyed {
            keys += 1;
            p["idempotency_key"] = json!(format!("bench-{keys}"));
        }
        let r = c.call("run", p).expect("run");
        assert_eq!(r["exit_code"], 0, "{r}");
        r["prestarted"] == true
    };
    // Both calls after the same pause, long enough for the session's next shell to start.
    let pause = || std::thread::sleep(std::time::Duration::from_millis(20));
    let dir = tempfile::tempdir()?;
    let db = Db::open(&dir.path().join("heddle.db"))?;
    let jdir = tempfile::tempdir_in(dir.path())?;
    let mut journal = Journal::open(jdir.path());
    let jfile = std::fs::OpenOptions::new().append(true).open(jdir.path().join("journal"))?;
    let mut i = 0u64;
    let mut next = || {
        i += 1;
        i
    };
    for _ in 0..20 {
        call(false);
        call(true);
        run_rows(next()).into_iter().for_each(|w| db.write(w));
        db.sync();
    }
    let keyed_entry = |i: u64| Entry::Keyed {
        job: i,
        receipt:
            json!({"receipt": {"id": format!("r18ee3c85e25df82f-{i}"), "op": "run", "admitted_at": 1796439847322u64,
            "outcome": "admitted", "job": i, "session": "bench", "idempotency_key": format!("bench-{i}"),
            "replayed": false}, "owner_uid": 0, "fingerprint": "run {\"cmd\":\"true\",\"session\":\"bench\"}"})
            .to_string(),
    };
    let mut samples: [Vec<f64>; 7] = Default::default();
    let mut on_spares = [0usize; 2];
    for n in 0..iterations {
        for keyed in if n % 2 == 0 { [false, true] } else { [true, false] } {
            pause();
            let mut hot = false;
            samples[if keyed { 5 } else { 0 }].push(time_us(|| hot = call(keyed)));
            on_spares[usize::from(keyed)] += usize::from(hot);
        }
        let rows = run_rows(next());
        samples[1].push(time_us(|| rows.into_iter().for_each(|w| db.write(w))));
        db.sync();
        let rows = run_rows(next());
        samples[2].push(time_us(|| {
            rows.into_iter().for_each(|w| db.write(w));
            db.sync();
        }));
        let entries = journal_entries(next());
        samples[3].push(time_us(|| entries.iter().for_each(|e| journal.append(e))));
        let entries = journal_entries(next());
        samples[4].push(time_us(|| {
            entries.iter().for_each(|e| journal.append(e));
            jfile.sync_data().expect("fdatasync the journal");
        }));
        let entry = keyed_entry(next());
        samples[6].push(time_us(|| journal.append(&entry)));
    }
    heddle_bench::note(format!(
        "db: {} of {iterations} plain and {} of {iterations} keyed calls ran on a pre-started shell (20 ms pause before each)",
        on_spares[0], on_spares[1]
    ));
    let [run, queued, committed, plain, synced, keyed, keyed_journal] = samples.map(Summary::of);
    let base = "heddle run(\"true\"), client kept connected";
    report("a keyed run vs the same run without a key", base, run, "run(\"true\") with a fresh idempotency_key", keyed);
    report("the journal entry of a keyed run", base, run, "Keyed entry appended", keyed_journal);
    report("database rows of one run, queued (request path)", base, run, "3 rows queued", queued);
    report("database rows of one run, committed (writer thread)", base, run, "3 rows queued + committed", committed);
    report("journal entries of one run, no fsync (as shipped)", base, run, "Job + Batch appended", plain);
    report("journal entries of one run, with fdatasync", base, run, "Job + Batch appended + fdatasync", synced);
    report("journal fdatasync vs none", "Job + Batch appended", plain, "Job + Batch appended + fdatasync", synced);
    println!("(state dir of the timed database and journal: a temp dir on {})", fs_of(dir.path()));
    Ok(())
}

/// The filesystem type the temp dir lives on (fsync costs depend on it).
fn fs_of(path: &std::path::Path) -> String {
    let out = std::process::Command::new("stat").args(["-f", "-c", "%T"]).arg(path).output();
    out.ok().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned()).unwrap_or_else(|| "?".into())
}
