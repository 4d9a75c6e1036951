//! Secret screening rules: checked-in TOML data (`policies/redaction.toml`), parsed, validated and
//! compiled once into a [`Redactor`] that replaces secret-shaped text in model-facing output views.
//!
//! Two kinds of entries, each with an `id`, a `placeholder` (the `[redacted:<placeholder>]` tag) and a
//! `reason`: `[[rule]]` is a line-level regex (optionally replacing only `secret_group`, optionally only
//! when that text's Shannon entropy reaches `min_entropy` bits per character, and not when it matches
//! `unless`); `[[block]]` spans lines
//! from a `begin` line to an `end` line (PEM private keys), every line of it becoming the placeholder.
//!
//! Invariants: parsing never panics on any text (property-tested on garbage); every rule has a
//! non-empty reason and a placeholder of `[a-z0-9-]+`; the redactor checks a line with one `RegexSet`
//! pass and allocates only when something matched.
//!
//! ```
//! use policies::redaction::{Redactor, BlockCursor};
//! let r = Redactor::builtin();
//! let mut st = BlockCursor::default();
//! assert_eq!(r.redact_line(&mut st, "key AKIAIOSFODNN7EXAMPLE here"), "key [redacted:aws-key] here");
//! assert_eq!(r.redact_line(&mut st, "plain text"), "plain text");
//! ```

use regex::{Regex, RegexSet};
use serde::Deserialize;
use std::borrow::Cow;
use std::sync::OnceLock;

/// The builtin rules' text.
pub const BUILTIN: &str = include_str!("../redaction.toml");

/// Errors reading a rules file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RedactionError {
    #[error("the redaction rules are not valid TOML for this format: {0}")]
    Syntax(String),
    #[error("redaction entry `{id}`: {problem}")]
    Invalid { id: String, problem: String },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    #[serde(default)]
    rule: Vec<RawRule>,
    #[serde(default)]
    block: Vec<RawBlock>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    id: String,
    placeholder: String,
    reason: String,
    pattern: String,
    secret_group: Option<usize>,
    min_entropy: Option<f64>,
    unless: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBlock {
    id: String,
    placeholder: String,
    reason: String,
    begin: String,
    end: String,
}

/// One compiled line rule.
#[derive(Debug)]
pub struct Rule {
    pub id: String,
    pub placeholder: String,
    pub reason: String,
    regex: Regex,
    secret_group: usize,
    min_entropy: f64,
    /// A match whose replaced text this matches is left alone (code, not a credential).
    unless: Option<Regex>,
}

/// One compiled multi-line block rule.
#[derive(Debug)]
pub struct Block {
    pub id: String,
    pub placeholder: String,
    pub reason: String,
    begin: Regex,
    end: Regex,
}

/// Compiled rules: a `RegexSet` over every line pattern and block start, plus each regex.
#[derive(Debug)]
pub struct Redactor {
    rules: Vec<Rule>,
    blocks: Vec<Block>,
    /// Line patterns first, then block `begin`s.
    set: RegexSet,
}

/// Where one stream stands among multi-line blocks: inside which block, if any.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct BlockCursor {
    inside: Option<usize>,
}

impl BlockCursor {
    /// True while lines of a block are being replaced.
    pub fn inside(&self) -> bool {
        self.inside.is_some()
    }
}

const MAX_PATTERN: usize = 4096;

fn invalid(id: &str, problem: impl Into<String>) -> RedactionError {
    RedactionError::Invalid { id: id.to_owned(), problem: problem.into() }
}

fn compile(id: &str, pattern: &str) -> Result<Regex, RedactionError> {
    if pattern.len() > MAX_PATTERN {
        return Err(invalid(id, format!("the pattern is longer than {MAX_PATTERN} bytes")));
    }
    regex::RegexBuilder::new(pattern)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| invalid(id, format!("the pattern does not compile: {e}")))
}

fn check_common(id: &str, placeholder: &str, reason: &str) -> Result<(), RedactionError> {
    if id.is_empty() {
        return Err(invalid(id, "the id is empty"));
    }
    if placeholder.is_empty() || !placeholder.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err(invalid(id, "the placeholder must be lowercase letters, digits and '-'"));
    }
    if reason.trim().is_empty() {
        return Err(invalid(id, "every rule needs a reason"));
    }
    Ok(())
}

impl Redactor {
    /// Parse and compile a rules file.
    pub fn from_toml(text: &str) -> Result<Redactor, RedactionError> {
        let raw: RawFile = toml::from_str(text).map_err(|e| RedactionError::Syntax(e.message().to_owned()))?;
        let mut rules = Vec::new();
        let mut ids = std::collections::HashSet::new();
        for r in raw.rule {
            check_common(&r.id, &r.placeholder, &r.reason)?;
            if !ids.insert(r.id.clone()) {
                return Err(invalid(&r.id, "the id is used twice"));
            }
            let regex = compile(&r.id, &r.pattern)?;
            let secret_group = r.secret_group.unwrap_or(0);
            if secret_group >= regex.captures_len() {
                return Err(invalid(&r.id, format!("secret_group {secret_group} is not a group of the pattern")));
            }
            let min_entropy = r.min_entropy.unwrap_or(0.0);
            if !(0.0..=8.0).contains(&min_entropy) {
                return Err(invalid(&r.id, "min_entropy must be between 0 and 8 bits per character"));
            }
            let unless = r.unless.as_deref().map(|u| compile(&r.id, u)).transpose()?;
            rules.push(Rule {
                id: r.id,
                placeholder: r.placeholder,
                reason: r.reason,
                regex,
                secret_group,
                min_entropy,
                unless,
            });
        }
        let mut blocks = Vec::new();
        for b in raw.block {
            check_common(&b.id, &b.placeholder, &b.reason)?;
            if !ids.insert(b.id.clone()) {
                return Err(invalid(&b.id, "the id is used twice"));
            }
            let (begin, end) = (compile(&b.id, &b.begin)?, compile(&b.id, &b.end)?);
            blocks.push(Block { id: b.id, placeholder: b.placeholder, reason: b.reason, begin, end });
        }
        let patterns = rules.iter().map(|r| r.regex.as_str()).chain(blocks.iter().map(|b| b.begin.as_str()));
        let set = regex::RegexSetBuilder::new(patterns)
            .size_limit(16 << 20)
            .build()
            .map_err(|e| invalid("(all)", format!("the rules do not compile together: {e}")))?;
        Ok(Redactor { rules, blocks, set })
    }

    /// The builtin rules, compiled once.
    pub fn builtin() -> &'static Redactor {
        static R: OnceLock<Redactor> = OnceLock::new();
        R.get_or_init(|| Redactor::from_toml(BUILTIN).expect("policies/redaction.toml is valid (tested)"))
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    pub fn blocks(&self) -> &[Block] {
        &self.blocks
    }

    /// Redact one line (without its newline). `st` carries multi-line blocks from line to line.
    pub fn redact_line<'a>(&self, st: &mut BlockCursor, line: &'a str) -> Cow<'a, str> {
        if let Some(b) = st.inside {
            let block = &self.blocks[b];
            return match block.end.find(line) {
                None => Cow::Owned(tag(&block.placeholder)),
                Some(m) => {
                    st.inside = None;
                    let rest = self.redact_line(st, &line[m.end()..]);
                    Cow::Owned(format!("{}{rest}", tag(&block.placeholder)))
                }
            };
        }
        let hits = self.set.matches(line);
        if !hits.matched_any() {
            return Cow::Borrowed(line);
        }
        let mut out = line.to_owned();
        // A replacement can join text into a new match (`token=a[redacted:x]b…`): repeat until nothing
        // changes (bounded), so redacting a redacted line changes nothing.
        for _ in 0..4 {
            let mut next = out.clone();
            for i in self.set.matches(&out).iter().filter(|&i| i < self.rules.len()) {
                next = self.apply_rule(&self.rules[i], &next);
            }
            if next == out {
                break;
            }
            out = next;
        }
        let first_block = self.blocks.iter().enumerate().find_map(|(i, b)| b.begin.find(&out).map(|m| (i, m.start())));
        if let Some((i, start)) = first_block {
            st.inside = Some(i);
            let head = out[..start].to_owned();
            let tail = out[start..].to_owned();
            let rest = self.redact_line(st, &tail).into_owned();
            // The begin line itself is inside the block: `rest` is the placeholder (and what follows its end).
            out = format!("{head}{rest}");
        }
        Cow::Owned(out)
    }

    fn apply_rule(&self, rule: &Rule, line: &str) -> String {
        let mut out = String::with_capacity(line.len());
        let mut last = 0;
        for m in Self::rule_spans(rule, line) {
            if m.start < last {
                continue;
            }
            out.push_str(&line[last..m.start]);
            out.push_str(&tag(&rule.placeholder));
            last = m.end;
        }
        out.push_str(&line[last..]);
        out
    }

    /// The byte ranges of `line` that `rule` replaces.
    fn rule_spans<'l>(rule: &'l Rule, line: &'l str) -> impl Iterator<Item = std::ops::Range<usize>> + 'l {
        rule.regex.captures_iter(line).filter_map(|caps| {
            let m = caps.get(rule.secret_group)?;
            let already = m.as_str().starts_with("[redacted:");
            let plain = (rule.min_entropy > 0.0 && entropy(m.as_str()) < rule.min_entropy)
                || rule.unless.as_ref().is_some_and(|u| u.is_match(m.as_str()));
            (!already && !plain && !m.is_empty()).then(|| m.range())
        })
    }

    /// The secrets in one line, as byte ranges with their placeholder (line rules only; blocks span
    /// lines), sorted by start. For a renderer that must hide a secret it later partly overwrites (a
    /// `\r` progress line): what remains of the range is still the secret's.
    pub fn secret_spans<'r>(&'r self, line: &str) -> Vec<(std::ops::Range<usize>, &'r str)> {
        let hits = self.set.matches(line);
        if !hits.matched_any() {
            return Vec::new();
        }
        let mut spans: Vec<(std::ops::Range<usize>, &str)> = hits
            .iter()
            .filter(|&i| i < self.rules.len())
            .flat_map(|i| {
                let rule = &self.rules[i];
                Self::rule_spans(rule, line).map(move |r| (r, rule.placeholder.as_str()))
            })
            .collect();
        spans.sort_by_key(|(r, _)| (r.start, r.end));
        spans
    }
}

fn tag(placeholder: &str) -> String {
    format!("[redacted:{placeholder}]")
}

/// Shannon entropy of `s` in bits per character.
pub fn entropy(s: &str) -> f64 {
    let mut counts = std::collections::HashMap::new();
    let mut n = 0usize;
    for c in s.chars() {
        *counts.entry(c).or_insert(0usize) += 1;
        n += 1;
    }
    if n == 0 {
        return 0.0;
    }
    counts.values().map(|&k| k as f64 / n as f64).map(|p| -p * p.log2()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn red(line: &str) -> String {
        Redactor::builtin().redact_line(&mut BlockCursor::default(), line).into_owned()
    }

    #[test]
    fn builtin_rules_compile_and_every_one_has_a_reason() {
        let r = Redactor::builtin();
        assert!(r.rules().len() >= 14 && !r.blocks().is_empty());
        assert!(r.rules().iter().all(|x| !x.reason.is_empty()));
    }

    #[test]
    fn each_kind_of_secret_gets_its_typed_placeholder() {
        let cases = [
            ("AKIAIOSFODNN7EXAMPLE", "aws-key"),
            ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws-secret"),
            ("key=AIzaSyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQe", "gcp-key"),
            ("\"private_key_id\": \"0123456789abcdef0123456789abcdef01234567\"", "gcp-key"),
            ("ghp_0123456789abcdefghijABCDEFGHIJ0123456789", "github-token"),
            ("glpat-abcdefghij0123456789", "gitlab-token"),
            ("xoxb-123456789012-abcdefghij", "slack-token"),
            ("sk_live_0123456789abcdefABCD", "stripe-key"),
            ("OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwx", "api-key"),
            ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U", "jwt"),
            ("DB password=Xk9#mQ2$vL7pR4zT", "secret"),
        ];
        for (line, tag) in cases {
            let out = red(line);
            assert!(out.contains(&format!("[redacted:{tag}]")), "{line:?} → {out:?}");
        }
    }

    #[test]
    fn low_entropy_assignments_and_plain_text_stay() {
        assert_eq!(red("password=aaaaaaaaaaaa"), "password=aaaaaaaaaaaa");
        assert_eq!(red("error: build failed in 3.2s"), "error: build failed in 3.2s");
    }

    /// A traceback's source line is code: `passwd = fallback_getpass(prompt, stream)` was shown as
    /// `passwd = [redacted:secret], stream)`. A credential next to it is still redacted.
    #[test]
    fn code_that_assigns_a_call_or_an_index_is_not_a_secret() {
        for line in [
            "    passwd = fallback_getpass(prompt, stream)",
            "token = os.environ[\"GITHUB_TOKEN_NAME\"]",
            "password: self.config[\"db\"][\"pw\"]",
            "api_key = getpass.getpass(\"API key: \")",
        ] {
            assert_eq!(red(line), line, "{line}");
        }
        assert!(red("password = Xk9#mQ2$vL7pR4zT").contains("[redacted:secret]"));
        assert!(red("passwd=(Xk9#mQ2$vL7pR4z").contains("[redacted:secret]"), "not a name before the bracket");
    }

    #[test]
    fn a_pem_block_is_redacted_across_lines() {
        let r = Redactor::builtin();
        let mut st = BlockCursor::default();
        let lines = [
            "before",
            "-----BEGIN RSA PRIVATE KEY-----",
            "MIIEowIBAAKCAQEA",
            "-----END RSA PRIVATE KEY----- after",
            "x",
        ];
        let out: Vec<String> = lines.iter().map(|l| r.redact_line(&mut st, l).into_owned()).collect();
        assert_eq!(
            out,
            ["before", "[redacted:private-key]", "[redacted:private-key]", "[redacted:private-key] after", "x"]
        );
        assert!(!st.inside());
    }

    #[test]
    fn bad_rules_are_refused_with_the_entry_named() {
        let no_reason = "[[rule]]\nid='a'\nplaceholder='x'\nreason=''\npattern='a'\n";
        assert!(Redactor::from_toml(no_reason).unwrap_err().to_string().contains("`a`"));
        let bad_group = "[[rule]]\nid='a'\nplaceholder='x'\nreason='r'\npattern='a'\nsecret_group=2\n";
        assert!(Redactor::from_toml(bad_group).is_err());
        assert!(Redactor::from_toml("[[rule]]\nid='a'\nplaceholder='x'\nreason='r'\npattern='('\n").is_err());
        assert!(Redactor::from_toml("bogus = 1").is_err());
    }

    proptest! {
        #[test]
        fn garbage_rules_never_panic(text in "\\PC{0,400}") {
            let _ = Redactor::from_toml(&text);
        }

        #[test]
        fn mutated_builtin_rules_never_panic(cut in 0usize..BUILTIN.len(), junk in "\\PC{0,40}") {
            let mut text = BUILTIN.to_owned();
            let mut at = cut.min(text.len());
            while !text.is_char_boundary(at) { at -= 1; }
            text.insert_str(at, &junk);
            let _ = Redactor::from_toml(&text);
        }

        #[test]
        fn redaction_is_idempotent_on_garbage_and_near_secret_shapes(
            line in "(ghp_|sk-|AKIA|xoxb-|password=|TOKEN=|_PASSWORD: |\\[redacted:|[=:\"' _]|[A-Za-z0-9]{1,12}|\\PC){0,40}",
        ) {
            let r = Redactor::builtin();
            let once = r.redact_line(&mut BlockCursor::default(), &line).into_owned();
            let twice = r.redact_line(&mut BlockCursor::default(), &once).into_owned();
            prop_assert_eq!(&once, &twice);
            for (range, _) in r.secret_spans(&line) {
                prop_assert!(line.is_char_boundary(range.start) && line.is_char_boundary(range.end));
            }
        }

        #[test]
        fn redacting_garbage_never_panics(lines in proptest::collection::vec("\\PC{0,200}", 0..20)) {
            let r = Redactor::builtin();
            let mut st = BlockCursor::default();
            for l in &lines {
                let _ = r.redact_line(&mut st, l);
            }
        }
    }
}
