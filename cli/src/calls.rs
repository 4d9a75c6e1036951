//! The calls a result suggests, as a person types them: the text form names the protocol's calls
//! (`output {"session": "s", "job": 7, "lines": [120, 480]}`, `wait with {"job":7}`), which a model
//! sends through MCP; a person at the CLI gets `heddle output 7 --lines 120:480` and `heddle wait 7`.
//! Only calls heddle itself wrote are turned (those after `output ` or `wait with `, whose JSON parses
//! into a known shape); anything else is left as it is.

use serde_json::Value;

/// `text` with each suggested call that has a CLI form written as that form; a call that names no
/// session is in `session`, the result's.
pub fn for_the_cli(text: &str, session: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        let next = ["output {", "wait with {", "kept.kill {", "kept.log {"]
            .iter()
            .filter_map(|p| rest.find(p).map(|i| (i, *p)))
            .min();
        let Some((at, prefix)) = next else {
            out.push_str(rest);
            return out;
        };
        let json_at = at + prefix.len() - 1;
        let mut objects = serde_json::Deserializer::from_str(&rest[json_at..]).into_iter::<Value>();
        let parsed = objects.next().and_then(Result::ok).map(|v| (v, objects.byte_offset()));
        match parsed.and_then(|(v, len)| cli_form(prefix, &v, session).map(|c| (c, len))) {
            Some((cli, len)) => {
                out.push_str(&rest[..at]);
                out.push_str(&cli);
                rest = &rest[json_at + len..];
            }
            None => {
                out.push_str(&rest[..at + prefix.len()]);
                rest = &rest[at + prefix.len()..];
            }
        }
    }
}

/// An error sentence from the server as a person at the CLI reads it: the calls it suggests in their
/// CLI form (`list its jobs with jobs {"session": "s"}` → ``list its jobs with `heddle --session s jobs` ``,
/// `open one with session.open` → ``open one with `heddle --session s run …` ``), the rest as it is.
pub fn error_for_the_cli(message: &str, session: &str) -> String {
    let s = if session == "default" { String::new() } else { format!("--session {} ", quoted(session)) };
    let mut out = for_the_cli(message, session);
    if let Some(at) = out.find("jobs {\"session\": ") {
        let json_at = at + "jobs ".len();
        let mut objects = serde_json::Deserializer::from_str(&out[json_at..]).into_iter::<Value>();
        let named = objects.next().and_then(Result::ok).and_then(|v| v["session"].as_str().map(str::to_owned));
        if let Some(name) = named {
            let end = json_at + objects.byte_offset();
            let flag = if name == "default" { String::new() } else { format!("--session {} ", quoted(&name)) };
            out.replace_range(at..end, &format!("`heddle {flag}jobs`"));
        }
    }
    out.replace("open one with session.open", &format!("`heddle {s}run …` opens one"))
        .replace("list them with kept {}", "list them with `heddle kept`")
}

/// The CLI form of one suggested call, `None` when it has none.
fn cli_form(prefix: &str, v: &Value, in_session: &str) -> Option<String> {
    let o = v.as_object()?;
    if let Some(verb) = prefix.strip_prefix("kept.").and_then(|p| p.strip_suffix(" {")) {
        let name = o.get("name")?.as_str().filter(|_| o.len() == 1)?;
        return Some(format!("`heddle kept {verb} {}`", quoted(name)));
    }
    let job = o.get("job")?.as_u64()?;
    let session = match o.get("session") {
        None => in_session,
        Some(s) => s.as_str()?,
    };
    let session = if session == "default" { String::new() } else { format!("--session {} ", quoted(session)) };
    if prefix.starts_with("wait") {
        return (o.len() == 1 || (o.len() == 2 && o.contains_key("session")))
            .then(|| format!("wait with `heddle {session}wait {job}`"));
    }
    let keys: Vec<&str> = o.keys().map(String::as_str).filter(|k| !matches!(*k, "session" | "job")).collect();
    let view = match keys.as_slice() {
        ["lines"] => {
            let l = o["lines"].as_array()?;
            format!("--lines {}:{}", l.first()?.as_u64()?, l.get(1)?.as_u64()?)
        }
        ["errors"] if o["errors"] == true => "--errors".to_owned(),
        ["tail"] => format!("--tail {}", o["tail"].as_u64()?),
        _ => return None,
    };
    Some(format!("`heddle {session}output {job} {view}`"))
}

/// A session name as the shell reads it: bare when it is plain, else single-quoted.
fn quoted(s: &str) -> String {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)) {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::{error_for_the_cli, for_the_cli};

    #[test]
    fn an_error_names_the_cli_command_to_type() {
        assert_eq!(
            error_for_the_cli(
                r#"session 'default' has no job 99; list its jobs with jobs {"session": "default"}"#,
                "default"
            ),
            "session 'default' has no job 99; list its jobs with `heddle jobs`"
        );
        assert_eq!(
            error_for_the_cli("no session named 'a b'; open one with session.open", "a b"),
            "no session named 'a b'; `heddle --session 'a b' run …` opens one"
        );
        assert_eq!(error_for_the_cli("jobs {not json", "s"), "jobs {not json");
        assert_eq!(
            error_for_the_cli("there is no kept job named 'x' of yours; list them with kept {}", "s"),
            "there is no kept job named 'x' of yours; list them with `heddle kept`"
        );
        assert_eq!(
            for_the_cli(r#"end them with kept.kill {"name": "web srv"}; see kept.log {"name":"w"}"#, "s"),
            "end them with `heddle kept kill 'web srv'`; see `heddle kept log w`"
        );
    }

    #[test]
    fn suggested_calls_become_commands_and_nothing_else_changes() {
        let marker = r#"[… heddle: 9 lines, 90 bytes omitted (lines 4–12); output {"session": "default", "job": 7, "lines": [4, 12]} shows them …]"#;
        assert_eq!(
            for_the_cli(marker, "default"),
            "[… heddle: 9 lines, 90 bytes omitted (lines 4–12); `heddle output 7 --lines 4:12` shows them …]"
        );
        assert_eq!(
            for_the_cli(r#"see output {"session": "my s", "job": 3, "errors": true}"#, "other"),
            "see `heddle --session 'my s' output 3 --errors`"
        );
        assert_eq!(
            for_the_cli(r#"still running after 1 s · job 5 · wait with {"job":5}"#, "default"),
            "still running after 1 s · job 5 · wait with `heddle wait 5`"
        );
        assert_eq!(
            for_the_cli(r#"job 5 · wait with {"job":5}"#, "viewer"),
            "job 5 · wait with `heddle --session viewer wait 5`"
        );
        // A job's own text that merely looks alike, broken JSON, unknown shapes: untouched.
        for same in [
            "output {not json",
            r#"output {"job": 1, "raw": {"offset": 0}}"#,
            r#"output {"lines": [1, 2]}"#,
            "wait with {",
            "plain text",
            "",
        ] {
            assert_eq!(for_the_cli(same, "default"), same);
        }
        assert_eq!(
            for_the_cli("a output {\"job\": 2, \"tail\": 5} b output {\"job\": 3, \"lines\": [1, 2]} c", "default"),
            "a `heddle output 2 --tail 5` b `heddle output 3 --lines 1:2` c"
        );
    }
}
