//! `heddle-bench checks`: the cost of parsing a test runner's output, per MiB, against copying the same
//! bytes (the baseline, measured in the same run), and the tokens of a check's view (the summary block it
//! leads with) against the raw output, per runner. Inputs: the outputs captured from the real runners
//! in `front/src/checks/fixtures`, repeated to about `mib` MiB (the failing tests repeat with them).

use anyhow::Context;
use front::checks::parse::{parse, Parser};
use std::path::Path;
use std::time::Instant;

const RUNNERS: [(&str, Parser, &str, &str); 6] = [
    ("cargo test", Parser::Libtest, "cargo_test.stdout", "cargo_test.stderr"),
    ("cargo test json", Parser::Libtest, "libtest_json.stdout", ""),
    ("nextest", Parser::Nextest, "nextest.stdout", "nextest.stderr"),
    ("pytest", Parser::Pytest, "pytest.stdout", "pytest.stderr"),
    ("vitest", Parser::Vitest, "vitest.stdout", "vitest.stderr"),
    ("vitest json", Parser::Jest, "vitest_json.stdout", ""),
];

fn read(dir: &Path, f: &str) -> anyhow::Result<Vec<u8>> {
    match f {
        "" => Ok(Vec::new()),
        f => std::fs::read(dir.join(f)).with_context(|| format!("reading {f}")),
    }
}

pub fn run(mib: usize, rounds: usize) -> anyhow::Result<()> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../front/src/checks/fixtures");
    println!("runner           parse MiB/s   copy MiB/s   ratio   raw tokens   view tokens   view/raw");
    for (name, parser, out, err) in RUNNERS {
        let (out, err) = (read(&dir, out)?, read(&dir, err)?);
        // The raw output and the view of one real run, in tokens (≈ 4 bytes each).
        let parsed = parse(parser, &out, &err).context("the fixture parses")?;
        let view = protocol::checks::summary_block(Some(&parsed), None);
        let (raw_tokens, view_tokens) = ((out.len() + err.len()) / 4, view.len() / 4);
        let times = (mib << 20) / (out.len() + err.len()).max(1) + 1;
        let (big_out, big_err) = (out.repeat(times), err.repeat(times));
        let size = (big_out.len() + big_err.len()) as f64 / f64::from(1u32 << 20);
        let (mut parse_s, mut copy_s) = (f64::MAX, f64::MAX);
        for _ in 0..rounds {
            let t = Instant::now();
            std::hint::black_box(parse(parser, &big_out, &big_err));
            parse_s = parse_s.min(t.elapsed().as_secs_f64());
            let t = Instant::now();
            std::hint::black_box((big_out.clone(), big_err.clone()));
            copy_s = copy_s.min(t.elapsed().as_secs_f64());
        }
        let figure = format!("checks: parsing {name} output");
        heddle_bench::record(
            &figure,
            "copying the same bytes",
            copy_s * 1e6 / size,
            parse_s * 1e6 / size,
            None,
            "µs/MiB",
        );
        let figure = format!("checks: {name} summary block, tokens");
        heddle_bench::record(
            &figure,
            "the raw output of one run",
            raw_tokens as f64,
            view_tokens as f64,
            None,
            "tokens",
        );
        println!(
            "{name:<16} {:>11.0} {:>12.0} {:>7.0}× {raw_tokens:>12} {view_tokens:>13} {:>9.2}",
            size / parse_s,
            size / copy_s,
            parse_s / copy_s,
            view_tokens as f64 / raw_tokens.max(1) as f64
        );
    }
    Ok(())
}
