//! What the CLI's test files share: running the binary and reading what it said.
#![allow(dead_code)] // each test file takes the part it needs

use std::path::Path;
use std::process::{Command, Output};

/// `resmem ARGS` in the test's working directory.
pub fn resmem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_resmem")).args(args).output().unwrap()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

/// Runs resmem, expects success, and returns its stdout.
pub fn ok(args: &[&str]) -> String {
    let o = resmem(args);
    assert!(o.status.success(), "resmem {args:?} failed: {}", stderr(&o));
    stdout(&o)
}

/// Runs resmem, expects it to fail without panicking, and returns its stderr.
pub fn fails(args: &[&str]) -> String {
    failed(args, resmem(args))
}

/// What `resmem ARGS` left in `o`, a failure (exit 1) without a panic: its stderr.
pub fn failed(args: &[&str], o: Output) -> String {
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "resmem {args:?} should fail with 1: {err}");
    assert!(!err.contains("panicked"), "resmem {args:?} panicked: {err}");
    err
}

pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}
