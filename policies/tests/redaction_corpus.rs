//! The redaction corpus (`redaction_corpus.toml`): every secret shape is redacted, every look-alike is
//! left exactly as it was, and redacting twice changes nothing more.

use policies::redaction::{BlockCursor, Redactor};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Corpus {
    secret: Vec<Secret>,
    clean: Vec<Clean>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Secret {
    what: String,
    line: String,
    secret: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Clean {
    line: String,
}

fn corpus() -> Corpus {
    toml::from_str(include_str!("redaction_corpus.toml")).expect("the corpus parses")
}

fn red(line: &str) -> String {
    Redactor::builtin().redact_line(&mut BlockCursor::default(), line).into_owned()
}

#[test]
fn every_secret_shape_is_redacted() {
    let c = corpus();
    assert!(c.secret.len() >= 30, "the corpus covers the shapes");
    let mut missed = Vec::new();
    for s in &c.secret {
        let out = red(&s.line);
        let leaked = match &s.secret {
            Some(secret) => out.contains(secret.as_str()),
            None => out == s.line,
        };
        if leaked || !out.contains("[redacted:") {
            missed.push(format!("{}: {:?} → {:?}", s.what, s.line, out));
        }
        assert_eq!(red(&out), out, "idempotent: {}", s.what);
    }
    assert!(missed.is_empty(), "secrets that reached the output:\n{}", missed.join("\n"));
}

#[test]
fn look_alikes_are_left_alone() {
    let c = corpus();
    let changed: Vec<String> = c
        .clean
        .iter()
        .filter_map(|l| {
            let out = red(&l.line);
            (out != l.line).then(|| format!("{:?} → {:?}", l.line, out))
        })
        .collect();
    assert!(changed.is_empty(), "false positives:\n{}", changed.join("\n"));
}

#[test]
fn secret_spans_cover_what_redaction_replaces() {
    let r = Redactor::builtin();
    for s in corpus().secret.iter().filter(|s| s.secret.is_some()) {
        let secret = s.secret.as_deref().unwrap_or_default();
        let at = s.line.find(secret).expect("the secret is in its line");
        let spans = r.secret_spans(&s.line);
        assert!(
            spans.iter().any(|(range, _)| range.start <= at + 1 && range.end >= at + secret.len() - 1),
            "{}: {spans:?}",
            s.what
        );
    }
}
