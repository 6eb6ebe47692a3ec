//! A closed or full stdout stops the printing, never the work: every command prints through
//! `console` (the crate denies `println!` under clippy, and this test holds the sources to it),
//! and a command whose stdout is `/dev/full` or a pipe closed after one byte still succeeds.

use std::io::Read;
use std::process::{Command, Stdio};

const PRINTS: [&str; 5] = ["println!", "print!(", "eprintln!", "eprint!(", "dbg!("];

#[test]
fn only_the_console_prints() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut offenders = vec![];
    let mut files = vec![];
    let mut dirs = vec![src];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            match path.is_dir() {
                true => dirs.push(path),
                false => files.push(path),
            }
        }
    }
    assert!(files.len() > 10, "{files:?}");
    for path in files {
        if path.file_name().is_some_and(|n| n == "console.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (i, line) in text.lines().enumerate() {
            if PRINTS.iter().any(|p| line.contains(p)) && !line.trim_start().starts_with("//") {
                offenders.push(format!("{}:{}: {}", path.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "print through console::say / out! / warn, which survive a closed stdout:\n{}",
        offenders.join("\n")
    );
}

/// Commands that print a report and do no training, each in text and JSON.
const REPORTS: &[&[&str]] = &[
    &["count", "--arch", "rmt"],
    &["count", "--arch", "hybrid", "--json"],
    &["count", "--arch", "memoryformer", "--paper-table", "1"],
    &["analyze", "variance", "--closed-form", "--arch", "rmt"],
    &[
        "analyze",
        "variance",
        "--closed-form",
        "--arch",
        "transformer",
        "--json",
    ],
    &["train", "--list-presets"],
];

#[test]
fn a_full_stdout_does_not_fail_a_command() {
    for args in REPORTS {
        let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_resmem"))
            .args(*args)
            .stdout(full)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && !err.contains("panicked"),
            "resmem {args:?} > /dev/full: {:?} {err}",
            out.status
        );
    }
}

#[test]
fn a_closed_pipe_does_not_fail_a_command() {
    for args in REPORTS {
        let mut child = Command::new(env!("CARGO_BIN_EXE_resmem"))
            .args(*args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // `| head -c1`: read one byte, then close the pipe.
        let mut stdout = child.stdout.take().unwrap();
        let mut one = [0u8; 1];
        stdout.read_exact(&mut one).unwrap();
        drop(stdout);
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && !err.contains("panicked"),
            "resmem {args:?} | head -c1: {:?} {err}",
            out.status
        );
    }
}
