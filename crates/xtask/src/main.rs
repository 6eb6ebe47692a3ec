//! `cargo xtask serve` and `cargo xtask test`: set-up, build and test in one place.
//!
//! Set-up is idempotent: each tool is installed only when it is missing, so with everything
//! present it costs seconds. What it installs: the wasm32 target (rustup), Trunk and
//! wasm-bindgen-cli (crates.io, into ~/.cargo/bin), Mesa's Vulkan driver and Chromium (apt), and
//! playwright-core (npm, into tests/browser).

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

const TRUNK_VERSION: &str = "0.21.14";
const APT_PACKAGES: &[&str] = &["mesa-vulkan-drivers", "chromium"];
const ADDRESS: &str = "127.0.0.1";
const PORT: &str = "8080";

fn main() -> Result<()> {
    let task = std::env::args().nth(1).unwrap_or_default();
    let root = root();
    std::env::set_current_dir(&root)?;
    match task.as_str() {
        "serve" => serve(&root),
        "test" => test(&root),
        "setup" => setup_all(&root),
        _ => {
            eprintln!("usage: cargo xtask <serve|test|setup>\n  serve  build the playground and serve it on http://{ADDRESS}:{PORT}/\n  test   run every test: CPU, GPU (lavapipe) and browser (headless Chromium)\n  setup  install what the other two need, only where it is missing");
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
    if !output("trunk", &["--version"]).is_some_and(|v| v.contains(TRUNK_VERSION)) {
        eprintln!("installing Trunk {TRUNK_VERSION} (about 10 minutes on 2 cores, once)");
        run(Command::new("cargo").args(["install", "trunk", "--locked", "--version", TRUNK_VERSION]))?;
    }
    // Trunk uses the wasm-bindgen on PATH only when it equals the locked library version.
    let wanted = locked_version(root, "wasm-bindgen")?;
    if !output("wasm-bindgen", &["--version"]).is_some_and(|v| v.ends_with(&wanted)) {
        eprintln!("installing wasm-bindgen-cli {wanted} (about 4 minutes, once)");
        // Not --locked: its lockfile pins a webpki-roots the registry no longer has.
        run(Command::new("cargo").args(["install", "wasm-bindgen-cli", "--version", &wanted]))?;
    }
    Ok(())
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
        eprintln!("installing {} with apt", missing.join(", "));
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
        run(apt(&["install", "-y", "-qq", "--no-install-recommends"]).args(&missing))?;
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
    setup_test_tools(root)
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

// ---- commands ----

fn serve(root: &Path) -> Result<()> {
    setup_web(root)?;
    println!("serving the resmem playground at http://{ADDRESS}:{PORT}/ (Ctrl-C stops it)");
    run(Command::new("trunk").args(["serve", "--release", "--address", ADDRESS, "--port", PORT]))
}

fn test(root: &Path) -> Result<()> {
    let t0 = Instant::now();
    setup_all(root)?;
    // wgpu and Mesa write harmless errors without a runtime dir.
    let runtime = std::env::temp_dir().join("resmem-xdg");
    std::fs::create_dir_all(&runtime)?;
    let t1 = Instant::now();
    run(Command::new("cargo").arg("test").env("XDG_RUNTIME_DIR", &runtime))?;
    let t2 = Instant::now();
    run(Command::new("trunk").args(["build", "--release"]))?;
    let shots = root.join("target/browser");
    run(Command::new("node")
        .arg(root.join("tests/browser/playground.mjs"))
        .arg(root.join("dist"))
        .arg(&shots)
        .env("XDG_RUNTIME_DIR", &runtime))?;
    println!(
        "all tests passed: set-up {:.0} s, cargo tests {:.0} s, page build and browser tests {:.0} s; screenshot in {}",
        (t1 - t0).as_secs_f64(),
        (t2 - t1).as_secs_f64(),
        t2.elapsed().as_secs_f64(),
        shots.join("playground.png").display()
    );
    Ok(())
}
