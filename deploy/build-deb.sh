#!/usr/bin/env bash
# Build heddle's .deb (target/debian/heddle_*.deb) with cargo-deb from cli/Cargo.toml's
# [package.metadata.deb], then check what it holds. Needs `cargo install cargo-deb --locked` once.
# Not run by CI (a release build and cargo-deb cost minutes of its time); tests/tests/deploy.rs checks
# the configuration there. docs/deploy.md, "The package".
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo-deb >/dev/null; then
    echo "cargo-deb is missing: install it with \`cargo install cargo-deb --locked\`" >&2
    exit 1
fi
# Every binary the package holds, not only the cli package's: cargo deb then packages them as built.
cargo build --release --workspace --bins
rm -f target/debian/heddle_*.deb
cargo deb -p cli --no-build
deb=$(ls target/debian/heddle_*.deb)
dpkg-deb -I "$deb"
contents=$(dpkg-deb -c "$deb")
echo "$contents"
missing=0
for f in usr/bin/heddle usr/bin/heddle-supervisor usr/bin/heddle-front usr/bin/heddle-worker \
    usr/bin/heddle-launch usr/lib/systemd/system/heddle.service usr/lib/sysusers.d/heddle.conf \
    usr/share/heddle/policies/workspace.toml usr/share/heddle/policies/readonly.toml \
    usr/share/heddle/policies/redaction.toml usr/share/doc/heddle/README.md usr/share/doc/heddle/deploy.md; do
    if ! grep -q " \./$f\$" <<<"$contents"; then
        echo "the package lacks /$f" >&2
        missing=1
    fi
done
ctl=$(mktemp -d)
trap 'rm -rf "$ctl"' EXIT
dpkg-deb -e "$deb" "$ctl"
grep -q 'systemd-sysusers heddle.conf' "$ctl/postinst" || { echo "postinst does not make the users" >&2; missing=1; }
grep -q 'deb-systemd-helper' "$ctl/postinst" || { echo "postinst does not enable the unit" >&2; missing=1; }
if command -v systemd-analyze >/dev/null; then
    root=$(mktemp -d)
    dpkg-deb -x "$deb" "$root"
    # verify checks ExecStart's program: point it at the packaged binary.
    sed "s|/usr/bin/heddle |$root/usr/bin/heddle |" "$root/usr/lib/systemd/system/heddle.service" >"$ctl/heddle.service"
    out=$(systemd-analyze verify "$ctl/heddle.service" 2>&1) || true
    rm -rf "$root"
    if [ -n "$out" ]; then echo "systemd-analyze verify: $out" >&2; missing=1; fi
fi
[ "$missing" = 0 ] && echo "ok: $deb"
exit "$missing"
