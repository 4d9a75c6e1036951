//! The front's rooms import one way: a room may use only the rooms below it in [`ORDER`] (see the
//! table in `src/lib.rs`). A `use crate::kernel…` from `sessions/` (a circle between folders) fails
//! here with the file that did it.

use std::path::Path;

/// Top to bottom. Test-only code (`#[cfg(test)] mod tests` and `src/testing.rs`) is not counted.
const ORDER: &[&str] = &[
    "process",
    "transport",
    "kernel",
    "guard",
    "checks",
    "sessions",
    "jobs",
    "output",
    "terminal",
    "shell",
    "storage",
    "rpc",
];

fn rank(room: &str) -> Option<usize> {
    ORDER.iter().position(|r| *r == room)
}

/// The code of a file without its test module and its comments.
fn code(text: &str) -> String {
    let text = text.find("#[cfg(test)]\nmod tests").map_or(text, |i| &text[..i]);
    text.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn rooms_import_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    let mut wrong = Vec::new();
    let mut rooms_seen = std::collections::BTreeSet::new();
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        let first = rel.components().next().unwrap().as_os_str().to_str().unwrap();
        let room = first.trim_end_matches(".rs");
        if ["lib", "main", "testing"].contains(&room) {
            continue;
        }
        let Some(mine) = rank(room) else {
            wrong.push(format!(
                "{}: `{room}` is not a room of ORDER (add it to the table in lib.rs and here)",
                rel.display()
            ));
            continue;
        };
        rooms_seen.insert(room.to_owned());
        let text = code(&std::fs::read_to_string(file).unwrap());
        for (i, _) in text.match_indices("crate::") {
            let used: String = text[i + 7..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            match rank(&used) {
                Some(r) if r < mine => wrong.push(format!("{}: {room} uses {used}, a room above it", rel.display())),
                _ => {}
            }
        }
    }
    assert!(wrong.is_empty(), "imports against the room order:\n{}", wrong.join("\n"));
    assert_eq!(rooms_seen.len(), ORDER.len(), "every room has code: {rooms_seen:?}");
}
