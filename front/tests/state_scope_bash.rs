//! `state_scope` against real bash: for each command of a corpus, run it after the restore of a rich
//! state with the full capture (the worker's own wrapper), and check that every item the command changed
//! is one its scope covers. A scope that missed a change would lose it for the session.

use front::shell::scope::{listed, scope};
use shm_proto::capture::{parse, Items};
use std::process::Command;

/// The session state the corpus runs in: exported and plain variables, an integer, arrays, a nameref,
/// functions, aliases (with `expand_aliases`), a directory stack.
const SETUP: &str = r#"export EDITOR=vi PATH="$PATH"; X=1 Y='a b'; declare -i N=3; A=(a b c); declare -A H=([k]=v);
declare -n R='A[1]'; build() { make "$@"; }; greet() { echo hi; }; shopt -s expand_aliases; alias ll='ls -l';
mkdir -p sub 'my dir'; pushd sub >/dev/null; popd >/dev/null; i=0"#;

/// Run `cmd` after `restore` in `dir`, returning the full capture's items (`None`: no capture, as after
/// `exit`).
fn run(dir: &std::path::Path, restore: &[u8], cmd: &str) -> Option<Items> {
    let file = dir.join(".capture");
    std::fs::write(&file, restore).unwrap(); // the wrapper reads the restore from fd 4, then captures after it
    let argv = worker::state::argv(cmd);
    let out = Command::new("bash")
        .args(["--noprofile", "--norc", "-c", r#"exec 4<>"$0"; exec "$@""#])
        .arg(&file)
        .arg("/bin/bash")
        .args(argv[1..].iter().map(|a| std::ffi::OsStr::new(std::str::from_utf8(a).unwrap())))
        .current_dir(dir)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let _ = out;
    parse(std::fs::read(&file).ok()?.get(restore.len()..)?).ok()
}

/// The keys whose values differ between `a` and `b` (added, removed or changed; an unset tombstone and
/// an absent variable are the same).
fn changed(a: &Items, b: &Items) -> Vec<String> {
    let norm = |m: &Items, k: &str| m.get(k).filter(|v| !(k.starts_with("var:") && v.is_empty())).cloned();
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    keys.into_iter().filter(|k| norm(a, k) != norm(b, k)).cloned().collect()
}

const CORPUS: &[&str] = &[
    // Programs and inert builtins.
    "ls -la >/dev/null",
    "cd sub && ls",
    "cd 'my dir'; cd -",
    "pushd sub; pushd /tmp; popd",
    "set -euo pipefail; shopt -s globstar nullglob; umask 077",
    "echo \"$X ${Y:-none} ${#A[@]} ${A[2]} ${H[k]} ${X%1} ${Y// /_}\" $(X=9; cd /) `Y=8` <(N=7)",
    "(X=2; export Z=1; cd /; f() { :; }; alias q=w)",
    "if [[ -f x || $X == 1 ]]; then echo y; elif [ \"$N\" -gt 2 ]; then :; fi",
    "case $X in 1) echo one;; *) echo other;; esac",
    "cat <<EOF\n$X $(Y=5)\nEOF",
    "cat <<'EOF'\n${X:=5} `Y=1`\nEOF",
    "H[k]=2; H[new]=3",
    "true | X=5",
    "X=5 env >/dev/null",
    "printf '%s\\n' a b | sort",
    "type ll build; hash -r; help cd >/dev/null",
    // Assignments the scope names.
    "X=2",
    "X+=2; Y=",
    "A[1]=z; A+=(d); B=(1 2 [5]=3)",
    "for f in a b; do :; done",
    "for X in q; do :; done",
    "while read -r line; do :; done <<< 'a b'",
    "read -r P Q <<< 'p q'; read <<< r; read -a ARR <<< 'x y'",
    "mapfile -t L <<< $'1\\n2'; readarray < /dev/null",
    "printf -v OUT '%s' hi",
    "export X; export NEWV=1; declare -x -r RO=1; declare -a ARR2=(1); local LOC 2>/dev/null; typeset TS=1",
    "unset X; unset -v Y",
    "N=7",
    "IFS=: read -r a b <<< 'x:y'",
    "shopt -s lastpipe; echo v | read PIPED",
    "set -a; AUTO=1",
    "cd /tmp; OLDPWD=/x",
    "POSIXLY_CORRECT=1",
    "declare -g GG=1",
    "cat <<\\EOF\n${X:=1} `Y=2`\nEOF",
    "export X=1 | cat; Y=2 | Z=3",
    "cd sub; W=$(pwd); V=${W}x; export V",
    "export PATH=\"$PWD/bin:$PATH\"",
    "[[ $Y =~ (a) ]] && echo \"${BASH_REMATCH[1]}\"",
    "declare -p X; export -p >/dev/null; readonly X",
    "read -d '' -r Z < /dev/null; IFS=, read -ra PARTS <<< 'a,b'",
    "mapfile -t -d '' L2 < /dev/null",
    "shopt -s extglob; echo @(a|b)",
    "set -- a b; shift; pwd -P; dirs -c; ulimit -n 256",
    "X=1 Y=2 true; unset -v A",
    // Changes the scope cannot name: these must be captured in full.
    "build() { :; }",
    "unset -f greet",
    "unset greet",
    "alias g=git",
    "unalias ll",
    "source /dev/stdin <<< 'S=1'",
    ". /dev/stdin <<< 'S=1'",
    "eval 'E=1'",
    "echo $((i++))",
    "echo $[i+=1]",
    "((i++))",
    "for ((j=0; j<2; j++)); do :; done",
    "[[ $i -eq 0 ]]",
    "[[ i++ -eq 0 ]]",
    "echo ${Q:=1}",
    "echo ${X:0:1}",
    "echo ${!X} ${Y@Q}",
    "echo ${A[i++]}",
    "echo $R",
    "R=q",
    "N='i+=5'",
    "N+=1",
    "read N <<< 'i+=1'",
    "A[i++]=1",
    "B=([i++]=1)",
    "declare -i Z=i+=1",
    "declare -n RR=X; RR=5",
    "export -f greet",
    "let i+=1",
    "command export C=1",
    "builtin export C=1",
    "exec 9>/dev/null",
    "echo {fd}>/dev/null",
    "ll >/dev/null",
    "greet",
    "trap 'T=1' ERR; false",
    "getopts a opt",
    "coproc true",
    "time T=1",
    "$(echo export) V=1",
    "\"export\" V=1",
    "v=export; $v W=1",
    "f() { G=1; }; f",
    "set -k; true K=1",
    "wait -p W",
    "printf -vOUT x",
    "select s in a; do break; done </dev/null",
    "mapfile -C 'M=1' -c 1 MM <<< a",
    "echo ${Y:-${Q:=1}}",
    ": ${Q:=3}",
    "echo ${X/#a/${Q:=2}}",
    "[[ -v A[i++] ]]",
    "[ -v 'A[i++]' ]",
    "test -v 'A[i++]'",
    "echo ${ X=5; }",
    "unset 'A[1]'",
    "declare -A HH; HH[key]=1",
    "H[$X]=2",
    "printf -v 'A[1]' x",
    "enable -n echo",
    "x() { :; }",
    "function y { :; }",
    "echo >${Q:=f}",
    "[[ ${Q:=1} ]]",
    "for f in ${Q:=1}; do :; done",
    "cat <<EOF\n${Q:=1}\nEOF",
    "export X=${Q:=1}",
    "exit 3",
];

/// The base state as bash sees it after the restore, with the restore script.
fn setup(dir: &std::path::Path) -> (Items, Vec<u8>) {
    let first = run(dir, &front::shell::record::restore_script(&Items::new()), SETUP).expect("setup captured");
    let restore = front::shell::record::restore_script(&first);
    // The base as bash sees it after the restore (bash's own defaults, the cwd as bash reports it).
    let base = run(dir, &restore, "true").expect("restore captured");
    assert!(base.contains_key("func:build") && base.contains_key("alias:ll") && base.contains_key("var:R"), "{base:?}");
    (base, restore)
}

/// Run `cmd` if it is scoped and check its changes against its scope; `Some(checked)` when scoped.
fn check(dir: &std::path::Path, base: &Items, restore: &[u8], cmd: &str) -> Option<bool> {
    let names = listed(&scope(cmd, base)?);
    let Some(after) = run(dir, restore, cmd) else { return Some(false) };
    for key in changed(base, &after) {
        let covered = matches!(key.as_str(), "cwd" | "dirstack" | "umask")
            || key.starts_with("set:")
            || key.starts_with("shopt:")
            || key.strip_prefix("var:").is_some_and(|n| names.iter().any(|m| m == n));
        assert!(covered, "{cmd:?} changed {key} outside its scope {names:?}");
    }
    Some(true)
}

#[test]
fn every_change_the_full_capture_sees_is_within_the_scope() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    let (base, restore) = setup(dir);
    let (mut scoped, mut checked) = (0, 0);
    for cmd in CORPUS {
        match check(dir, &base, &restore, cmd) {
            None => eprintln!("full: {cmd:?}"),
            Some(ran) => {
                scoped += 1;
                checked += usize::from(ran);
            }
        }
    }
    eprintln!("{scoped} of {} commands scoped, {checked} checked against bash", CORPUS.len());
    assert!(scoped >= 44 && checked == scoped, "{scoped} scoped commands, {checked} checked");
}

#[test]
fn compositions_of_corpus_commands_stay_within_their_scope() {
    // Random compositions (fixed seed): lists, pipelines, groups, loops and conditionals around two or
    // three corpus commands. A composition is scoped only if each part is, and must still be sound.
    // `HEDDLE_SCOPE_SEED` / `HEDDLE_SCOPE_ROUNDS` run other or more compositions by hand.
    let root = tempfile::tempdir().unwrap();
    let dir = root.path();
    let (base, restore) = setup(dir);
    let rounds: usize = std::env::var("HEDDLE_SCOPE_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(300);
    let mut seed: u64 =
        std::env::var("HEDDLE_SCOPE_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(0x5eed_1234_abcd_ef01);
    let mut next = move |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    let shapes = [
        "{a}; {b}",
        "{a} && {b} || {c}",
        "{a} | {b}",
        "{{ {a}; {b}; }}",
        "if {a}; then {b}; else {c}; fi",
        "for q in 1 2; do {a}; done",
        "while {a}; do {b}; break; done",
        "case x in x) {a};; *) {b};; esac",
        "( {a} ); {b}",
        "{a} & wait; {b}",
    ];
    let (mut scoped, mut checked) = (0, 0);
    for _ in 0..rounds {
        let shape = shapes[next(shapes.len())].replace("{{", "{").replace("}}", "}");
        let (a, b, c) = (CORPUS[next(CORPUS.len())], CORPUS[next(CORPUS.len())], CORPUS[next(CORPUS.len())]);
        let cmd = shape.replace("{a}", a).replace("{b}", b).replace("{c}", c);
        if let Some(ran) = check(dir, &base, &restore, &cmd) {
            scoped += 1;
            checked += usize::from(ran);
        }
    }
    eprintln!("{scoped} of {rounds} compositions scoped, {checked} checked against bash");
    assert!(scoped >= rounds / 10, "{scoped} scoped compositions");
}

#[test]
fn the_corpus_commands_that_change_more_are_captured_in_full() {
    let base = Items::new();
    let at = CORPUS.iter().position(|c| *c == "build() { :; }").unwrap();
    for cmd in &CORPUS[at..] {
        let mut b = base.clone();
        b.insert("func:build".into(), Vec::new());
        b.insert("func:greet".into(), Vec::new());
        b.insert("alias:ll".into(), Vec::new());
        b.insert("var:R".into(), b"declare -n R=\"A[1]\"".to_vec());
        b.insert("var:N".into(), b"declare -i N=\"3\"".to_vec());
        assert_eq!(scope(cmd, &b), None, "{cmd:?}");
    }
}
