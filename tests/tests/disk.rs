//! Disk through the real stack: the line log costs a fraction of the output it indexes.

use heddle_tests::{Client, Heddle};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn run(c: &mut Client, s: &Value, cmd: &str) -> Value {
    let r = c.call("run", json!({"session": s, "cmd": cmd, "yield_ms": 300_000})).expect("run");
    assert_eq!(r["state"], "exited", "{r}");
    r
}

/// Every file named `name` below `dir`.
fn find(dir: &Path, name: &str, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            find(&p, name, out);
        } else if p.file_name().is_some_and(|n| n == name) {
            out.push(p);
        }
    }
}

/// The sizes of job `job`'s raw log and line log (the test's only session).
fn log_sizes(h: &Heddle, job: &Value) -> (u64, u64) {
    let size = |ext: &str| {
        let mut found = Vec::new();
        find(&h.state_dir, &format!("{job}.{ext}"), &mut found);
        assert_eq!(found.len(), 1, "one {job}.{ext} in the state directory: {found:?}");
        std::fs::metadata(&found[0]).unwrap().len()
    };
    (size("log"), size("lines"))
}

/// A make/gcc-shaped build log (55,697 lines, 7.6 MB): progress lines, long compiler command lines,
/// now and then a warning with its source excerpt.
const BUILD_LOG: &str = r#"awk 'BEGIN {
  srand(7); n = 0
  for (m = 1; m <= 60; m++) {
    printf "make[1]: Entering directory \047/src/proj/mod_%d\047\n", m
    for (f = 1; f <= 400; f++) {
      n++
      printf "[%3d%%] Building C object mod_%d/CMakeFiles/mod_%d.dir/src/file_%d.c.o\n", int(n * 100 / 24000), m, m, f
      printf "gcc -DNDEBUG -DHAVE_CONFIG_H -I/src/proj/include -I/src/proj/mod_%d -O2 -g -Wall -Wextra -fPIC -MD -MT mod_%d/CMakeFiles/mod_%d.dir/src/file_%d.c.o -c /src/proj/mod_%d/src/file_%d.c -o mod_%d/CMakeFiles/mod_%d.dir/src/file_%d.c.o\n", m, m, m, f, m, f, m, m, f
      if (rand() < 0.08) {
        l = int(rand() * 900) + 10; c = int(rand() * 30) + 3
        printf "/src/proj/mod_%d/src/file_%d.c: In function \047handle_%d\047:\n", m, f, int(rand() * 100)
        printf "/src/proj/mod_%d/src/file_%d.c:%d:%d: warning: unused variable \047tmp%d\047 [-Wunused-variable]\n", m, f, l, c, int(rand() * 50)
        printf "  %d |     int tmp%d = compute(%d);\n", l, int(rand() * 50), int(rand() * 1000)
        printf "      |         ^~~~\n"
      }
    }
    printf "[%3d%%] Linking C shared library libmod_%d.so\n", int(n * 100 / 24000), m
    printf "make[1]: Leaving directory \047/src/proj/mod_%d\047\n", m
  }
  printf "[100%%] Built target all\n"
}'"#;

#[test]
fn the_line_log_costs_a_fraction_of_the_output_it_indexes() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    for (name, cmd, max) in [("seq 1 5000000", "seq 1 5000000", 0.10), ("build log", BUILD_LOG, 0.25)] {
        let r = run(&mut c, &s, cmd);
        let out = r["stdout_bytes"].as_u64().unwrap();
        assert!(out > 5_000_000, "{name}: {r}");
        let (raw, lines) = log_sizes(&h, &r["job"]);
        let ratio = lines as f64 / out as f64;
        println!(
            "{name}: {out} output bytes, raw log {raw} bytes, line log {lines} bytes: {ratio:.3}× the output, {:.3}× the raw log",
            lines as f64 / raw as f64
        );
        assert!(ratio < max, "{name}: the line log is {ratio:.3}× the output it indexes");
        // The line views still read it: the last lines, exactly.
        let t = c.call("output", json!({"session": s, "job": r["job"], "tail": 1})).unwrap();
        let last = if name == "build log" { "[100%] Built target all" } else { "5000000" };
        assert!(t["text"].as_str().unwrap().ends_with(&format!(": {last}\n")), "{t}");
    }
}
