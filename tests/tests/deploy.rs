//! The service unit and the package's configuration (issue 28, the service): the unit passes
//! `systemd-analyze verify`, its `heddle up` flags are real ones, and the `.deb` cargo-deb builds from
//! `cli/Cargo.toml` holds every server binary, the unit, the users, the default policies and the docs.
//! (The package itself is built by `bash deploy/build-deb.sh`, which checks its contents with
//! `dpkg-deb -c`; CI checks the configuration, not a release build: docs/deploy.md.)

use heddle_tests::bin_dir;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root").to_path_buf()
}

fn unit_text() -> String {
    std::fs::read_to_string(repo().join("deploy/systemd/heddle.service")).expect("read the unit")
}

fn exec_start(unit: &str) -> Vec<String> {
    let line = unit.lines().find_map(|l| l.strip_prefix("ExecStart=")).expect("the unit has an ExecStart");
    line.split_whitespace().map(str::to_owned).collect()
}

#[test]
fn the_unit_passes_systemd_analyze_verify() {
    // verify checks that ExecStart's program exists: a copy names the binary this build made.
    let tmp = tempfile::tempdir().unwrap();
    let unit = unit_text().replace("/usr/bin/heddle ", &format!("{} ", bin_dir().join("heddle").display()));
    let path = tmp.path().join("heddle.service");
    std::fs::write(&path, unit).unwrap();
    let out = Command::new("systemd-analyze").arg("verify").arg(&path).output().unwrap_or_else(|e| {
        panic!("systemd-analyze is needed to check the unit ({e}); install Debian's systemd package")
    });
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    // It exits 0 on keys it ignores (a typo, a bad value): any word from it is a failure.
    assert!(out.status.success() && said.trim().is_empty(), "systemd-analyze verify: {} {said}", out.status);
}

#[test]
fn the_units_command_is_heddle_up_with_real_flags_and_delegation() {
    let unit = unit_text();
    let argv = exec_start(&unit);
    assert_eq!(argv[..2], ["/usr/bin/heddle", "up"], "{argv:?}");
    assert!(argv.iter().any(|a| a == "--delegated"), "the supervisor must take its leaf: {argv:?}");
    assert!(unit.lines().any(|l| l.trim() == "Delegate=yes"), "the unit delegates its cgroup");
    let help = Command::new(bin_dir().join("heddle")).args(["up", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for flag in argv.iter().filter(|a| a.starts_with("--")) {
        assert!(help.contains(flag.as_str()), "heddle up has no {flag}: {help}");
    }
}

/// The files a cargo-deb source pattern names (`*` in the last component only, as the assets use it).
fn expand(pattern: &Path) -> Vec<PathBuf> {
    let name = pattern.file_name().unwrap().to_string_lossy().into_owned();
    let Some((pre, post)) = name.split_once('*') else {
        return if pattern.is_file() { vec![pattern.to_owned()] } else { vec![] };
    };
    let mut out: Vec<PathBuf> = std::fs::read_dir(pattern.parent().unwrap())
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    out.retain(|p| {
        let n = p.file_name().unwrap().to_string_lossy();
        p.is_file() && n.starts_with(pre) && n.ends_with(post) && n.len() >= pre.len() + post.len()
    });
    out
}

/// Every `[[bin]]` of the workspace's members.
fn workspace_bins() -> Vec<String> {
    let root: toml::Table = std::fs::read_to_string(repo().join("Cargo.toml")).unwrap().parse().unwrap();
    let members = root["workspace"]["members"].as_array().unwrap();
    let mut bins = Vec::new();
    for m in members.iter().filter_map(|m| m.as_str()) {
        let t: toml::Table = std::fs::read_to_string(repo().join(m).join("Cargo.toml")).unwrap().parse().unwrap();
        for b in t.get("bin").and_then(|b| b.as_array()).into_iter().flatten() {
            bins.push(b["name"].as_str().unwrap().to_owned());
        }
    }
    bins
}

#[test]
fn the_deb_holds_every_binary_the_unit_the_users_the_policies_and_the_docs() {
    let cli = repo().join("cli");
    let manifest: toml::Table = std::fs::read_to_string(cli.join("Cargo.toml")).unwrap().parse().unwrap();
    let deb = manifest["package"]["metadata"]["deb"].as_table().expect("[package.metadata.deb]");
    assert_eq!(deb["name"].as_str(), Some("heddle"));
    // (source file, destination path in the package)
    let mut installed: Vec<(PathBuf, String)> = Vec::new();
    for a in deb["assets"].as_array().unwrap() {
        let a = a.as_array().unwrap();
        let (src, dest) = (a[0].as_str().unwrap(), a[1].as_str().unwrap());
        let files = match src.strip_prefix("target/release/") {
            // Built by cargo-deb's release build; the debug build of the same name shows it is a binary.
            Some(bin) => vec![bin_dir().join(bin)],
            None => expand(&cli.join(src)),
        };
        assert!(!files.is_empty() && files.iter().all(|f| f.exists()), "asset {src} names no file");
        for f in files {
            let to = match dest.ends_with('/') {
                true => format!("{dest}{}", f.file_name().unwrap().to_string_lossy()),
                false => dest.to_owned(),
            };
            installed.push((f, to));
        }
    }
    let has = |dest: &str| installed.iter().any(|(_, d)| d == dest);
    // Every binary but the benchmarks (a developer's tool, docs/performance.md).
    for bin in workspace_bins().into_iter().filter(|b| b != "heddle-bench") {
        assert!(has(&format!("usr/bin/{bin}")), "the package lacks the binary {bin}");
    }
    assert!(has("usr/lib/sysusers.d/heddle.conf"), "the package makes the heddle user and heddle-clients group");
    let sysusers = installed.iter().find(|(_, d)| d == "usr/lib/sysusers.d/heddle.conf").unwrap();
    let sysusers = std::fs::read_to_string(&sysusers.0).unwrap();
    assert!(sysusers.lines().any(|l| l.starts_with("u heddle ")), "{sysusers}");
    assert!(sysusers.lines().any(|l| l.starts_with("g heddle-clients ")), "{sysusers}");
    assert!(unit_text().contains("--socket-group heddle-clients"), "the unit's socket group is the one made");
    for dir in ["docs", "policies/profiles"] {
        for f in std::fs::read_dir(repo().join(dir)).unwrap().flatten() {
            let name = f.file_name().to_string_lossy().into_owned();
            let dest = if dir == "docs" { "usr/share/doc/heddle/" } else { "usr/share/heddle/policies/" };
            assert!(has(&format!("{dest}{name}")), "the package lacks {dir}/{name}");
        }
    }
    assert!(has("usr/share/doc/heddle/deploy.md"), "the deploy page the unit's Documentation= names");
    // The unit goes in through systemd-units: cargo-deb takes `<package>.service` from unit-scripts and
    // puts the enable/restart fragments where the maintainer scripts say #DEBHELPER#.
    let units = deb["systemd-units"].as_table().expect("[package.metadata.deb.systemd-units]");
    let unit_dir = cli.join(units["unit-scripts"].as_str().unwrap());
    assert!(unit_dir.join("heddle.service").is_file(), "{} has heddle.service", unit_dir.display());
    let scripts = cli.join(deb["maintainer-scripts"].as_str().expect("maintainer-scripts"));
    let postinst = std::fs::read_to_string(scripts.join("postinst")).unwrap();
    assert!(postinst.contains("#DEBHELPER#") && postinst.contains("heddle.conf"), "{postinst}");
}
