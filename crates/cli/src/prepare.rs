//! `resmem data prepare`: tokenize text files once into the corpus that training memory-maps.

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use data::{Corpus, TokenizerKind};
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Subcommand)]
pub enum DataCommand {
    /// Tokenize text files into train.bin, val.bin and meta.json
    Prepare(PrepareArgs),
}

#[derive(Args, Debug)]
pub struct PrepareArgs {
    /// UTF-8 text files or directories (walked recursively in sorted order, hidden files skipped);
    /// each file is one document.
    #[arg(long, required = true, num_args = 1..)]
    pub text: Vec<PathBuf>,
    /// bytes (V = 256) or gpt2 (GPT-2's BPE, V = 50,257)
    #[arg(long, default_value = "bytes")]
    pub tokenizer: TokenizerKind,
    /// The share of each document's tokens, from its end, held out for validation: (0, 0.5].
    #[arg(long, default_value_t = 0.05)]
    pub val_frac: f64,
    /// Directory for train.bin, val.bin and meta.json; it must not hold a corpus already.
    #[arg(long)]
    pub out: PathBuf,
}

pub fn run(cmd: DataCommand) -> Result<()> {
    match cmd {
        DataCommand::Prepare(args) => prepare(args),
    }
}

fn prepare(args: PrepareArgs) -> Result<()> {
    // Never replace a file this command did not write.
    for name in [
        data::corpus::META_FILE,
        data::corpus::TRAIN_FILE,
        data::corpus::VAL_FILE,
    ] {
        let path = args.out.join(name);
        if path.exists() {
            let what = match name == data::corpus::META_FILE {
                true => "a prepared corpus",
                false => name,
            };
            bail!(
                "`{}` already holds {what} ({} exists), which data prepare would replace; pick another --out, or \
                 remove that file",
                args.out.display(),
                path.display()
            );
        }
    }
    let t0 = Instant::now();
    let mut report = Progress::new();
    let meta = data::prepare(
        &args.text,
        args.tokenizer,
        args.val_frac,
        &args.out,
        &mut |done, total| report.update(done, total),
    );
    report.finish();
    let meta = meta?;
    // Re-open what was written: it checks the files and gives the entropy.
    let corpus = Corpus::open(&args.out)?;
    let bytes: u64 = meta.sources.iter().map(|s| s.bytes).sum();
    out!(
        "wrote {}: {} documents, {bytes} bytes of text, tokenizer {} (V = {}, {} bytes per token)",
        args.out.display(),
        meta.sources.len(),
        meta.tokenizer,
        meta.vocab,
        meta.token_bytes
    );
    out!("  train  {:>12} tokens", meta.train_tokens);
    out!(
        "  val    {:>12} tokens ({} of each document)",
        meta.val_tokens,
        meta.val_frac
    );
    let entropy = corpus.unigram_entropy()?;
    out!(
        "  unigram entropy of train: {:.4} nats per token (a model that ignores context does no better)",
        entropy
    );
    out!(
        "  bigram entropy of train: {:.4} nats per token (a model that sees only the token before does no better)",
        corpus.bigram_entropy()?
    );
    out!("  in {:.1} s", t0.elapsed().as_secs_f64());
    Ok(())
}

/// A bar on a terminal; otherwise a line every tenth, so that logs stay short.
enum Progress {
    Bar(ProgressBar),
    Lines { next_tenth: u64 },
}

impl Progress {
    fn new() -> Self {
        if crate::console::quiet() || !std::io::stderr().is_terminal() {
            return Progress::Lines { next_tenth: 1 };
        }
        let bar = ProgressBar::new(0);
        if let Ok(style) =
            ProgressStyle::with_template("tokenizing {bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
        {
            bar.set_style(style);
        }
        Progress::Bar(bar)
    }

    fn update(&mut self, done: u64, total: u64) {
        match self {
            Progress::Bar(bar) => {
                bar.set_length(total);
                bar.set_position(done);
            }
            // One line when a new tenth is reached, however many tenths one call crosses.
            Progress::Lines { next_tenth } => {
                let tenth = done.saturating_mul(10).checked_div(total).unwrap_or(10);
                if tenth >= *next_tenth {
                    crate::console::warn(&format!("tokenized {}% ({done} of {total} bytes)", tenth.min(10) * 10));
                    *next_tenth = tenth + 1;
                }
            }
        }
    }

    fn finish(self) {
        if let Progress::Bar(bar) = self {
            bar.finish_and_clear();
        }
    }
}
