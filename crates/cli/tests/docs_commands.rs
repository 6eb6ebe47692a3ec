//! The README's and the docs' `resmem` commands run as written (issue 46, item 4), in the order
//! each document gives them, at tiny sizes: every `resmem …` line of a ```sh block, with the
//! flags below scaled down, in a fresh directory that sees the checkout's data/, tests/ and
//! experiments/ but writes its own runs/ and docs/. A command that fails as written (a flag
//! renamed, a run directory no earlier command makes) fails here, with the document and line.
//!
//! Scaled down: `train` to 4 steps; `sweep` to its experiment's [quick] variant (a sweep of
//! flags alone to 4 steps); `bench` to one
//! warm-up and one timed step; `sample` to 8 tokens; `analyze variance --measured` to one
//! sequence of 16 tokens. Lines with placeholders (`DIR`, `[--data DIR | …]`) or shell variables
//! are shown, not run.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every `resmem` command of a ```sh block, continuation lines joined and comments cut, with
/// the line it starts on.
fn commands(markdown: &str) -> Vec<(usize, String)> {
    let mut out = vec![];
    let mut in_sh = false;
    let mut pending: Option<(usize, String)> = None;
    for (i, line) in markdown.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") {
            in_sh = !in_sh && trimmed == "```sh";
            continue;
        }
        if !in_sh {
            continue;
        }
        let code = cut_comment(line);
        let (text, continues) = match code.trim_end().strip_suffix('\\') {
            Some(head) => (head.to_string(), true),
            None => (code.trim_end().to_string(), false),
        };
        let (start, mut command) = pending.take().unwrap_or((i + 1, String::new()));
        command.push(' ');
        command.push_str(text.trim());
        if continues {
            pending = Some((start, command));
        } else if command.trim().starts_with("resmem ") {
            out.push((start, command.trim().to_string()));
        }
    }
    out
}

/// The line up to a ` #` comment outside quotes.
fn cut_comment(line: &str) -> &str {
    let mut quoted = false;
    let mut last = ' ';
    for (i, c) in line.char_indices() {
        match c {
            '"' | '\'' => quoted = !quoted,
            '#' if !quoted && last.is_whitespace() => return &line[..i],
            _ => {}
        }
        last = c;
    }
    line
}

/// Shell words: spaces split, double or single quotes group, globs expanded in `dir`.
fn words(command: &str, dir: &Path) -> Vec<String> {
    let mut out = vec![];
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut any = false;
    for c in command.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                any = true;
            }
            (None, c) if c.is_whitespace() => {
                if any || !word.is_empty() {
                    out.extend(glob(&word, dir));
                }
                word.clear();
                any = false;
            }
            (None, c) => word.push(c),
        }
    }
    if any || !word.is_empty() {
        out.extend(glob(&word, dir));
    }
    out
}

/// A word with a `*` in its last part as the matching entries of `dir` (sorted), else itself.
fn glob(word: &str, dir: &Path) -> Vec<String> {
    let Some((parent, pattern)) = word.rsplit_once('/').filter(|(_, p)| p.contains('*')) else {
        return vec![word.to_string()];
    };
    let (head, tail) = pattern.split_once('*').unwrap_or((pattern, ""));
    let mut found: Vec<String> = std::fs::read_dir(dir.join(parent))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .filter(|n| n.starts_with(head) && n.ends_with(tail) && n.len() >= head.len() + tail.len())
        .map(|n| format!("{parent}/{n}"))
        .collect();
    found.sort();
    found
}

/// Whether a command holds a placeholder for the reader to fill in, or a shell variable (a
/// loop's: shown for the reader to run).
fn has_placeholder(args: &[String]) -> bool {
    args.iter().any(|a| {
        a.starts_with('[')
            || a.contains('$')
            || a == "|"
            || a.split(['/', '.', '='])
                .any(|part| part.len() >= 3 && part.chars().all(|c| c.is_ascii_uppercase()))
    })
}

/// `args` (without the program) at a tiny size: the flag set to `value`, or added.
fn set(args: &mut Vec<String>, flag: &str, value: &str) {
    match args.iter().position(|a| a == flag) {
        Some(i) if i + 1 < args.len() => args[i + 1] = value.to_string(),
        _ => args.extend([flag.to_string(), value.to_string()]),
    }
}

fn shrink(mut args: Vec<String>) -> Vec<String> {
    let sub: Vec<&str> = args.iter().take(2).map(String::as_str).collect();
    match sub.as_slice() {
        ["train", ..] if !args.iter().any(|a| a == "--list-presets") => set(&mut args, "--steps", "4"),
        // A sweep of flags alone has no [quick] variant: its steps shrink as train's do.
        ["sweep", first] if first.starts_with("--") => set(&mut args, "--steps", "4"),
        ["sweep", ..] => args.push("--quick".into()),
        ["bench", ..] => {
            set(&mut args, "--warmup", "1");
            set(&mut args, "--steps", "1");
        }
        ["sample", ..] => set(&mut args, "--tokens", "8"),
        ["analyze", "variance"] if args.iter().any(|a| a == "--measured") => {
            set(&mut args, "--batch", "1");
            set(&mut args, "--seq-len", "16");
        }
        _ => {}
    }
    args
}

/// Runs `doc`'s commands in order in a fresh directory; returns the failures.
fn run_doc(doc: &str) -> Vec<String> {
    let text = std::fs::read_to_string(root().join(doc)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for shared in ["tests", "experiments"] {
        std::os::unix::fs::symlink(root().join(shared).canonicalize().unwrap(), dir.path().join(shared)).unwrap();
    }
    // The checkout's corpora, each linked, in a data/ of its own: `data prepare --out data/mine`
    // writes here, never into the checkout.
    std::fs::create_dir_all(dir.path().join("data")).unwrap();
    for corpus in std::fs::read_dir(root().join("data")).unwrap().flatten() {
        std::os::unix::fs::symlink(
            corpus.path().canonicalize().unwrap(),
            dir.path().join("data").join(corpus.file_name()),
        )
        .unwrap();
    }
    std::fs::create_dir_all(dir.path().join("docs/experiments")).unwrap();
    // `data prepare --text my/texts`: a text to prepare.
    std::fs::create_dir_all(dir.path().join("my/texts")).unwrap();
    std::fs::write(
        dir.path().join("my/texts/a.txt"),
        "To be, or not to be, that is the question.\n".repeat(40),
    )
    .unwrap();
    let runtime = std::env::temp_dir().join("resmem-xdg");
    std::fs::create_dir_all(&runtime).unwrap();
    let mut failures = vec![];
    for (line, command) in commands(&text) {
        let args: Vec<String> = words(&command, dir.path()).into_iter().skip(1).collect();
        if has_placeholder(&args) {
            continue;
        }
        let args = shrink(args);
        let started = std::time::Instant::now();
        let o = Command::new(env!("CARGO_BIN_EXE_resmem"))
            .args(&args)
            .current_dir(dir.path())
            .env("XDG_RUNTIME_DIR", &runtime)
            .output()
            .unwrap();
        eprintln!(
            "{doc}:{line}: {:.1} s: resmem {}",
            started.elapsed().as_secs_f64(),
            args.join(" ")
        );
        let err = String::from_utf8_lossy(&o.stderr);
        if !o.status.success() || err.contains("panicked") {
            failures.push(format!(
                "{doc}:{line}: `{command}` (run as `resmem {}`) exited {:?}:\n{}",
                args.join(" "),
                o.status.code(),
                err.lines()
                    .rev()
                    .take(6)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join("\n")
            ));
        }
    }
    failures
}

#[test]
fn the_commands_are_read_as_a_shell_would() {
    let md = "text\n```sh\nresmem train --out runs/r   # a run\nresmem plot runs/a \\\n  --y \"a # b\" --out f.svg\ncargo build\n```\n```toml\nresmem = 1\n```\n";
    let got = commands(md);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0], (3, "resmem train --out runs/r".to_string()));
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(
        words(&got[1].1, dir.path()),
        ["resmem", "plot", "runs/a", "--y", "a # b", "--out", "f.svg"]
    );
    assert!(has_placeholder(&words("resmem eval --run DIR", dir.path())));
    assert!(!has_placeholder(&words("resmem eval --run runs/r --x d_k", dir.path())));
    assert_eq!(
        shrink(vec!["train".into(), "--steps".into(), "300".into()]),
        ["train", "--steps", "4"]
    );
}

/// README.md's commands, from the first run to the plots of the papers' experiments.
#[test]
fn the_readme_commands_run_as_written() {
    let failures = run_doc("README.md");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// docs/*.md's commands, each document on its own.
#[test]
fn the_docs_commands_run_as_written() {
    let mut failures = vec![];
    let mut docs: Vec<String> = std::fs::read_dir(root().join("docs"))
        .unwrap()
        .flatten()
        .map(|e| format!("docs/{}", e.file_name().to_string_lossy()))
        .filter(|n| n.ends_with(".md"))
        .collect();
    docs.sort();
    for doc in docs {
        failures.extend(run_doc(&doc));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
