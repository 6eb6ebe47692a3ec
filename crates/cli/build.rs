//! Records the commit the binary is built from (`RESMEM_COMMIT`), so that a sweep's summary
//! says which code made its numbers: the short hash, with "-dirty" where tracked files differ
//! from it, or "unknown" outside a git checkout (a source tarball).

use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    // The sources themselves rebuild the crate; these make the script see a commit or an edit.
    for path in [".git/HEAD", ".git/index", "crates", "shaders"] {
        println!("cargo:rerun-if-changed={root}/{path}");
    }
    let commit = match git(&["-C", root, "rev-parse", "--short=12", "HEAD"]) {
        Some(hash) if !hash.is_empty() => {
            let dirty =
                git(&["-C", root, "status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
            format!("{hash}{}", if dirty { "-dirty" } else { "" })
        }
        _ => "unknown".to_string(),
    };
    println!("cargo:rustc-env=RESMEM_COMMIT={commit}");
}
