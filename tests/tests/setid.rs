//! What seccomp refuses of a job's metadata writes, because nothing else governs them on its own files
//! (issue 20, item 3): setting a setuid or setgid bit (chmod, or a file created so) fails with "Operation
//! not permitted", and extended-attribute writes with "Operation not supported"; while the tools that
//! copy, unpack and install files (cp -a, tar x, git, pip, npm) keep working. Through the real stack.

use heddle_tests::{run_to_end, Heddle};
use std::os::unix::fs::PermissionsExt;

#[test]
fn setuid_and_setgid_bits_are_refused_with_a_clear_error() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let cmd = "set +e; touch f g d0; mkdir d; \
        chmod u+s f; echo chmod-u+s=$?; chmod 2755 g; echo chmod-2755=$?; chmod g+s d; echo chmod-dir=$?; \
        install -m 4755 /bin/true t 2>&1; echo install=$?; \
        python3 -c 'import os; os.open(\"o\", os.O_CREAT | os.O_WRONLY, 0o4755)' 2>&1 | tail -1; \
        python3 -c 'import os; os.mknod(\"n\", 0o4644)' 2>&1 | tail -1; \
        python3 -c 'import os; os.setxattr(\"d0\", \"user.x\", b\"1\")' 2>&1 | tail -1; \
        chmod 0755 f; echo plain=$?; stat -c '%n %a' f g d";
    let r = run_to_end(&mut c, &s, cmd);
    let out = format!("{}{}", heddle_tests::stream_text(&mut c, &s, &r["job"], "stdout"), {
        heddle_tests::stream_text(&mut c, &s, &r["job"], "stderr")
    });
    for refused in ["chmod-u+s=1", "chmod-2755=1", "chmod-dir=1", "install=1"] {
        assert!(out.contains(refused), "{refused}: {out}");
    }
    assert!(out.contains("chmod: changing permissions of 'f': Operation not permitted"), "{out}");
    assert_eq!(out.matches("PermissionError: [Errno 1] Operation not permitted").count(), 2, "open, mknod: {out}");
    assert!(out.contains("OSError: [Errno 95] Operation not supported"), "setxattr: {out}");
    assert!(out.contains("plain=0\nf 755\ng 644\nd 755\n"), "plain modes still change: {out}");
    for f in ["f", "g", "t", "o", "n"] {
        let mode = std::fs::metadata(h.project.join(f)).map(|m| m.permissions().mode()).unwrap_or(0);
        assert_eq!(mode & 0o6000, 0, "{f} has no setuid/setgid bit on disk");
    }
}

/// A wheel of one module, written by Python's zipfile (no network, no build backend).
const WHEEL: &str = r#"python3 - <<'EOF'
import zipfile
z = zipfile.ZipFile("demo-1.0-py3-none-any.whl", "w")
z.writestr("demo/__init__.py", "X = 41 + 1\n")
z.writestr("demo-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n")
z.writestr("demo-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
z.writestr("demo-1.0.dist-info/RECORD", "")
z.close()
EOF"#;

#[test]
fn copying_unpacking_and_installing_tools_keep_working() {
    let h = Heddle::start();
    let mut c = h.client();
    let s = h.open_session(&mut c);
    let steps = [
        ("cp -a", "mkdir -p src/sub && echo hi > src/sub/x && chmod 0750 src/sub && chmod 0755 src/sub/x && cp -a src dst && stat -c %a dst/sub dst/sub/x"),
        ("tar x", "tar cf a.tar src && mkdir un && tar xf a.tar -C un && tar xpf a.tar -C un && stat -c %a un/src/sub/x"),
        ("git", "git init -q repo && cd repo && echo x > f && chmod +x f && git add f && git -c user.name=t -c user.email=t@t commit -qm m && git clone -q . ../clone && stat -c %a ../clone/f"),
        ("pip", &format!("{WHEEL}\npython3 -m pip install -q --no-index --no-deps --target site ./demo-1.0-py3-none-any.whl 2>&1 | grep -v WARNING; PYTHONPATH=site python3 -c 'import demo; print(demo.X)'")),
        ("npm", "mkdir -p lib app && cd lib && printf '{\"name\":\"lib\",\"version\":\"1.0.0\",\"bin\":{\"lib\":\"cli.js\"}}' > package.json && printf '#!/usr/bin/env node\\nconsole.log(7)\\n' > cli.js && npm pack -q --offline >/dev/null && cd ../app && npm init -y >/dev/null && npm install --offline --no-audit --no-fund ../lib/lib-1.0.0.tgz >/dev/null && ./node_modules/.bin/lib"),
    ];
    for (tool, cmd) in steps {
        let r = run_to_end(&mut c, &s, cmd);
        let out = heddle_tests::stream_text(&mut c, &s, &r["job"], "stdout");
        let err = heddle_tests::stream_text(&mut c, &s, &r["job"], "stderr");
        assert_eq!(r["exit_code"], 0, "{tool}: {out}{err}");
        let want = match tool {
            "cp -a" => "750\n755\n",
            "tar x" => "755\n",
            "git" => "755\n",
            "pip" => "42\n",
            _ => "7\n",
        };
        assert_eq!(out, want, "{tool}: {err}");
    }
}
