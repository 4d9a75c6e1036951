//! The builtin profiles, embedded at build time so the binaries need no files at run time.
//!
//! Each entry is the profile's name, its path in the repository (used as the file name in errors)
//! and its text. Invariant (tested): every builtin parses and validates, and its `name` field equals
//! its entry's name.
//!
//! ```
//! assert_eq!(policies::Policy::names(), ["workspace", "readonly"]);
//! ```

/// `(name, repository path, text)` of every builtin profile; the first is the default.
pub(crate) const BUILTIN: &[(&str, &str, &str)] = &[
    ("workspace", "policies/profiles/workspace.toml", include_str!("../profiles/workspace.toml")),
    ("readonly", "policies/profiles/readonly.toml", include_str!("../profiles/readonly.toml")),
];

/// The builtin entry named `name`.
pub(crate) fn find(name: &str) -> Option<&'static (&'static str, &'static str, &'static str)> {
    BUILTIN.iter().find(|(n, _, _)| *n == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Policy;

    #[test]
    fn every_builtin_parses_validates_and_is_named_after_its_entry() {
        for (name, path, text) in BUILTIN {
            let policy = Policy::from_toml(path, text).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(&policy.name, name);
            assert_eq!(Policy::builtin(name).unwrap(), policy);
            assert_eq!(policy.source, *path);
        }
    }

    #[test]
    fn every_builtin_file_on_disk_is_embedded() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("profiles");
        for entry in std::fs::read_dir(dir).unwrap() {
            let file = entry.unwrap().file_name().into_string().unwrap();
            let stem = file.strip_suffix(".toml").expect("only .toml files in profiles/");
            assert!(find(stem).is_some(), "profiles/{file} is not in BUILTIN");
        }
    }
}
