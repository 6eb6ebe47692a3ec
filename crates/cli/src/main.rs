//! The `resmem` binary: [`resmem_cli::run`] on the process's arguments. A clap error prints
//! as clap prints it (`--help` and `--version` to stdout with status 0, a bad flag with 2); a
//! run stopped on request (Ctrl-C or SIGTERM) after writing its checkpoint says so with status
//! 0, and a second signal stops it at once with 130; any other error is one line on stderr and
//! status 1.

#![deny(clippy::print_stdout, clippy::print_stderr)]

fn main() {
    let Err(e) = resmem_cli::run(std::env::args_os()) else {
        return;
    };
    if let Some(clap) = resmem_cli::clap_error(&e) {
        clap.exit();
    }
    if e.chain().any(|c| c.is::<resmem_cli::StoppedOnRequest>()) {
        resmem_cli::console::warn(&format!("{e:#}"));
        std::process::exit(0);
    }
    resmem_cli::console::warn(&format!("error: {e:#}"));
    std::process::exit(1);
}
