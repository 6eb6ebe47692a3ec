//! `resmem`: train and study Transformer, RMT and MemoryFormer models from the command line.

mod args;
mod train;

use clap::Parser;

fn main() {
    let cli = args::Cli::parse();
    let result = match cli.command {
        args::Command::Train(a) => train::run(a),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
