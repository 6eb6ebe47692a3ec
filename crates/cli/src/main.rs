//! `resmem`: train and study Transformer, RMT and MemoryFormer models from the command line.

mod analyze;
mod args;
mod buckets;
mod count;
mod data;
mod train;

use clap::Parser;

fn main() {
    let cli = args::Cli::parse();
    let result = match cli.command {
        args::Command::Train(a) => train::run(a),
        args::Command::Count(a) => count::run(a),
        args::Command::Analyze(args::Analyze::Variance(a)) => analyze::variance(a),
        args::Command::Analyze(args::Analyze::Buckets(a)) => buckets::run(a),
        args::Command::Data(c) => data::run(c),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}
