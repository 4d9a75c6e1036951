//! Bearer tokens of the HTTP door. The supervisor (root) reads `--http-token-dir` — each file mode
//! 0600, its content a token, its owner the uid the token acts as — and hands the front one line per
//! token, `UID TOKEN`, on an inherited memfd (the front's uid could not read the files). A token is
//! compared in time independent of where it first differs.
//!
//! ```
//! use front::transport::http::tokens::Tokens;
//! let t = Tokens::parse("1000 s3cret-token-of-alice-0123\n# a comment\nbad line\n");
//! assert_eq!(t.uid_of("s3cret-token-of-alice-0123"), Some(1000));
//! assert_eq!(t.uid_of("s3cret-token-of-alice-0124"), None);
//! assert_eq!(t.len(), 1);
//! ```

/// The tokens the door accepts, each with the uid it acts as.
#[derive(Clone, Debug, Default)]
pub struct Tokens {
    entries: Vec<(u32, Vec<u8>)>,
}

impl Tokens {
    /// Parse `UID TOKEN` lines; lines that do not parse (or carry an empty token) are skipped.
    pub fn parse(text: &str) -> Tokens {
        let entries = text
            .lines()
            .filter_map(|l| {
                let (uid, token) = l.trim().split_once(' ')?;
                let token = token.trim();
                (!token.is_empty()).then_some((uid.parse().ok()?, token.as_bytes().to_vec()))
            })
            .collect();
        Tokens { entries }
    }

    /// How many tokens there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no token is accepted.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The uid `token` acts as, if it is one of ours.
    pub fn uid_of(&self, token: &str) -> Option<u32> {
        let t = token.as_bytes();
        let mut found = None;
        for (uid, known) in &self.entries {
            if equal(known, t) {
                found = Some(*uid);
            }
        }
        found
    }
}

/// Byte equality whose time depends on the lengths only.
fn equal(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn garbage_never_panics_and_never_yields_an_empty_token(text in "(?s).{0,300}") {
            let t = Tokens::parse(&text);
            prop_assert_eq!(t.uid_of(""), None);
        }

        #[test]
        fn a_listed_token_maps_to_its_uid(uid in any::<u32>(), token in "[A-Za-z0-9_-]{1,64}") {
            let t = Tokens::parse(&format!("{uid} {token}\n"));
            prop_assert_eq!(t.uid_of(&token), Some(uid));
            let other = format!("{token}x");
            prop_assert_eq!(t.uid_of(&other), None);
        }
    }
}
