//! Command-line arguments. Dimension flags override the preset's dimensions.

use crate::setting_flags::{AllSettings, ModelSettings, Scope, SettingFlags};
use clap::{Args, Parser, Subcommand, ValueEnum};
use data::Task;
use models::presets::{self, Dims};
use models::settings::{Setting, SETTINGS};
use models::{Arch, ModelConfig, RunConfig};
use std::path::PathBuf;

/// The most steps a view trains a fresh model for before it reads (`analyze … --step`,
/// `analyze variance --measured --steps`): a bound before the work, not after it.
pub const MAX_PROBE_STEPS: u64 = 10_000;
/// The most tokens `sample` draws in one call: a forward each, minutes on the CPU.
pub const MAX_SAMPLE_TOKENS: u64 = 100_000;

#[derive(Parser)]
#[command(
    name = "resmem",
    version,
    about = "Train and study Residual Matrix Transformers, MemoryFormers, their hybrid and baseline transformers"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// On the GPU, run every kernel's default configuration instead of measuring the
    /// candidates (matmul tiles, attention's rows per workgroup) and using the fastest. Either
    /// way gives the same bits; tuned choices are cached per adapter in
    /// ~/.cache/resmem/tuning.json.
    #[arg(long, global = true)]
    pub no_tune: bool,
}

#[derive(Subcommand)]
pub enum Command {
    /// Train a model into a run directory: config.toml, metrics.jsonl, checkpoints/ and
    /// model.safetensors.
    Train(Box<TrainArgs>),
    /// Train a grid of runs, one directory each, and summarize them: `--set d_k=4,8,16 --seeds
    /// 0,1,2` with any `resmem train` flags, or an experiment file. Re-running the same command
    /// skips finished points and resumes unfinished ones.
    Sweep(Box<SweepArgs>),
    /// The validation loss and perplexity of a run.
    Eval(EvalArgs),
    /// Continue a prompt with a trained run.
    Sample(SampleArgs),
    /// Parameters and forward FLOPs per sequence: the paper's formulas and the model as built.
    Count(CountArgs),
    /// Look inside models.
    #[command(subcommand)]
    Analyze(Analyze),
    /// Prepare text corpora.
    #[command(subcommand)]
    Data(crate::prepare::DataCommand),
    /// Bring weights from other code into a resmem run.
    #[command(subcommand)]
    Import(crate::interop::ImportCommand),
    /// Write a run's weights for other code.
    #[command(subcommand)]
    Export(crate::interop::ExportCommand),
    /// Plot runs' loss curves, or sweeps' final losses against a setting, as SVG or PNG.
    Plot(crate::plot::PlotArgs),
    /// Time training steps of a model (train's flags pick it): tokens/s, ms per step, peak
    /// memory, and per kernel family the time, FLOPs, bytes and their rates against the
    /// device's measured matmul and stream peaks.
    Bench(Box<BenchArgs>),
    /// Check every kernel on this machine's adapter against its CPU twin, on awkward shapes:
    /// a table of each family's worst error against its tolerance; exits 1 if any check fails.
    Selftest(SelftestArgs),
}

/// `resmem selftest`.
#[derive(Args, Debug)]
pub struct SelftestArgs {
    #[arg(long, value_enum, default_value = "gpu")]
    pub backend: BackendKind,
    /// The numeric class to check: strict (f32, the default) or fast (the matrix products on
    /// cooperative matrices, against their f16 CPU twin; where the adapter has none, says so
    /// and checks the strict class).
    #[arg(long, default_value = "strict", value_parser = precision_parser())]
    pub precision: engine::Precision,
    /// The plain kernels even where the adapter has subgroups: what a browser runs.
    #[arg(long)]
    pub no_subgroups: bool,
    /// Print every check, not only each family's worst.
    #[arg(long)]
    pub verbose: bool,
}

/// `resmem bench`: `resmem train`'s model and data flags, with `--steps` the timed steps.
#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Untimed steps before the timed ones (the first records the step, and warms caches).
    #[arg(long, default_value_t = 3)]
    pub warmup: usize,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    pub json: bool,
    /// On the GPU, run the plain kernels even where the adapter has subgroups, as browsers do.
    #[arg(long)]
    pub no_subgroups: bool,
    /// On the GPU, time each kernel family by replaying it alone even where the adapter has
    /// timestamp queries.
    #[arg(long)]
    pub no_timestamps: bool,
    /// On the GPU, sum the long weight gradients (aᵀ·b over every token, few tiles of out) in K
    /// slices side by side, then the slices in order: more workgroups for a large GPU. Other
    /// bits than without; an experiment to measure (bench/ab.sh), off in training.
    #[arg(long)]
    pub k_slices: bool,
    /// On the GPU, keep the guard wgpu puts on every shader loop by default, which keeps
    /// drivers from unrolling loops: the same bits, an A/B of its cost (bench/ab.sh).
    #[arg(long)]
    pub loop_guards: bool,
    #[command(flatten)]
    pub train: TrainArgs,
}

#[derive(Subcommand)]
pub enum Analyze {
    /// Variance propagation through storage and retrieval (RMT paper Tables 1 and 2).
    Variance(Box<VarianceArgs>),
    /// Bucket use of the hash tables of a trained MemoryFormer or hybrid (MemoryFormer paper
    /// Figure 4).
    Buckets(BucketsArgs),
    /// A sweep's hash-table collapse, from its summary.json (or a committed copy): per arm, how
    /// many tables collapse and in which layers, and the test loss of its runs with a collapsed
    /// table against those without.
    Collapse(CollapseArgs),
    /// Each token's residual stream at every depth: an RMT's D_k×D_v matrix with its norm,
    /// singular values and effective rank, or another model's residual vector.
    Residual(ResidualArgs),
    /// The logit lens: at every depth, the model's head read from the residual there, for one
    /// token: its top predictions and the KL divergence from the model's output.
    Lens(LensArgs),
    /// Every block's and head's attention weights over one sequence: the keys the chosen
    /// token weighs most, and each head's mean look-back; `--json` for all the weights.
    Attention(AttentionArgs),
    /// An RMT's (or the hybrid's) key slots, block by block: the norms of the keys that read
    /// (r_Q, r_K, r_V, r_FF) and write (w_O, w_FF) through each, and the share of attention's
    /// stored mass each carries over one sequence.
    Keys(KeysArgs),
    /// Hyper-connections' gates at every site for one token: pre, post and the mixing matrix
    /// P, with the composite gain of every P so far (the mHC paper's Amax).
    Mixing(MixingArgs),
    /// Attention Residuals' reads over depth for one token: each site's (and the head's)
    /// weights over the embedding and the depth blocks before it, with each source's RMS.
    Depth(MixingArgs),
    /// AltUp's coefficients at every layer: P, which predicts each sub-block from all of them,
    /// g, how much of the computed block's correction each takes, and which sub-block the layer
    /// computes on; with, for one token, the sub-blocks' cosine similarities after the layer.
    Altup(MixingArgs),
    /// Direct logit attribution: the logit (or difference of two) that each part of one
    /// token's last residual makes (the embedding and every write, each head, each key slot or
    /// stream), with the final norm's scale frozen at its value on the whole residual.
    Attribute(AttributeArgs),
    /// Ablation: the change in loss and in a logit (or difference) when sites are zeroed,
    /// replaced by their mean over the batch, or resampled from another sequence: each site
    /// alone, then all together.
    Ablate(AblateArgs),
    /// Activation patching: each site, at each position of a corrupted prompt, patched from
    /// the clean prompt's forward; the fraction of the logit difference it recovers.
    Patch(PatchArgs),
}

/// The logit an intervention reads: of one token, or the difference of two.
#[derive(Args, Clone, Debug)]
pub struct LogitArgs {
    /// The token of the sequence whose next-token logits are read; default the prompt's last.
    #[arg(long)]
    pub token: Option<usize>,
    /// The logit read: a token's text (one token of the run's tokenizer) or `#id`; default
    /// the model's top prediction.
    #[arg(long)]
    pub target: Option<String>,
    /// Read logit(target) − logit(versus): a token's text or `#id`.
    #[arg(long)]
    pub versus: Option<String>,
}

#[derive(Args, Debug)]
pub struct AttributeArgs {
    #[command(flatten)]
    pub at: ForwardArgs,
    #[command(flatten)]
    pub logit: LogitArgs,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct AblateArgs {
    #[command(flatten)]
    pub at: ForwardArgs,
    #[command(flatten)]
    pub logit: LogitArgs,
    /// The sites, by name: embedding, block1.attn, block0.ff, block1.attn.head3, slot5,
    /// stream2, block0.attn.slot5, block0.ff.resid; comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    pub sites: Vec<String>,
    /// What replaces them: zeros, their mean over every token of the batch, or the same token's
    /// values in the next sequence of the batch.
    #[arg(long, value_enum, default_value = "zero")]
    pub how: HowArg,
    /// The positions ablated, comma-separated; default every position.
    #[arg(long, value_delimiter = ',')]
    pub positions: Vec<usize>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum HowArg {
    Zero,
    Mean,
    Resample,
}

#[derive(Args, Debug)]
pub struct PatchArgs {
    /// The clean prompt is `--prompt` (or `--text`).
    #[command(flatten)]
    pub at: ForwardArgs,
    #[command(flatten)]
    pub logit: LogitArgs,
    /// The corrupted prompt: as many tokens as the clean one. `--target` defaults to the clean
    /// run's top prediction and `--versus` to the corrupted run's.
    #[arg(long)]
    pub corrupt: String,
    /// The sites patched, comma-separated; default every site of the model.
    #[arg(long, value_delimiter = ',')]
    pub sites: Vec<String>,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct ResidualArgs {
    #[command(flatten)]
    pub at: ForwardArgs,
    /// One depth (embedding, block0.attn, block0.ff, …) and token: print its values.
    #[arg(long)]
    pub depth: Option<String>,
    #[arg(long, default_value_t = 0)]
    pub token: usize,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct LensArgs {
    #[command(flatten)]
    pub at: ForwardArgs,
    /// The token of the sequence whose next-token prediction is read.
    #[arg(long, default_value_t = 0)]
    pub token: usize,
    /// Predictions shown at each depth.
    #[arg(long, default_value_t = 5)]
    pub top: usize,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct AttentionArgs {
    #[command(flatten)]
    pub at: ForwardArgs,
    /// The query token whose weights are shown; default the window's last.
    #[arg(long)]
    pub token: Option<usize>,
    /// Keys shown per head.
    #[arg(long, default_value_t = 5)]
    pub top: usize,
    /// Every head's (T, T) weights as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct KeysArgs {
    #[command(flatten)]
    pub at: ForwardArgs,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct MixingArgs {
    #[command(flatten)]
    pub at: ForwardArgs,
    /// The token of the sequence whose gates (or depth weights) are read.
    #[arg(long, default_value_t = 0)]
    pub token: usize,
    #[arg(long)]
    pub json: bool,
}

/// The forward that `analyze residual`, `lens`, `attention` and `keys` look inside.
#[derive(Args, Debug)]
pub struct ForwardArgs {
    /// A directory written by `resmem train` (its newest checkpoint), or one checkpoint file
    /// such as the playground's download, on its first held-out batch.
    #[arg(long, conflicts_with_all = ["preset", "task", "batch", "seq_len", "step"])]
    pub run: Option<PathBuf>,
    /// With --run: a checkpoint or model file.
    #[arg(long, requires = "run")]
    pub checkpoint: Option<PathBuf>,
    /// Without --run: a task preset (tiny-rmt, tiny-transformer, …), trained as the playground
    /// trains it. Default tiny-rmt.
    #[arg(long)]
    pub preset: Option<String>,
    #[arg(long)]
    pub task: Option<Task>,
    #[arg(long)]
    pub batch: Option<usize>,
    #[arg(long)]
    pub seq_len: Option<usize>,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Without --run: the residuals of this training step's forward (1: the initial weights),
    /// after training a fresh model that far: at most 10,000 steps (a longer run is `resmem
    /// train`'s, read with --run).
    #[arg(long, default_value_t = 1, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=MAX_PROBE_STEPS))]
    pub step: usize,
    /// Which sequence of the batch.
    #[arg(long, default_value_t = 0)]
    pub seq: usize,
    /// With --run: your own text in place of that sequence (tokenized with the run's
    /// tokenizer; at most T tokens): probe a prompt of your choosing.
    #[arg(long, requires = "run", alias = "prompt")]
    pub text: Option<String>,
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: BackendKind,
}

#[derive(Args, Debug)]
pub struct BucketsArgs {
    /// A directory written by `resmem train --arch memoryformer` or `--arch hybrid`, or one of
    /// its checkpoint files.
    #[arg(long)]
    pub run: PathBuf,
    /// Held-out batches to count over.
    #[arg(long, default_value_t = 1, conflicts_with = "slice")]
    pub batches: usize,
    /// Count over every window of one slice of the validation split (`test`: what a sweep
    /// reports), not over batches.
    #[arg(long, value_enum)]
    pub slice: Option<Slice>,
    /// A checkpoint or model file (default: the run's newest checkpoint).
    #[arg(long)]
    pub checkpoint: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: BackendKind,
    /// Print a list of objects with layer, table, entropy, dead_buckets and counts.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct CollapseArgs {
    /// A sweep directory, or a summary.json (`docs/experiments/memoryformer-collapse.json`).
    pub summary: PathBuf,
    /// Print the rows as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct EvalArgs {
    /// A directory written by `resmem train`, or one checkpoint file (it carries its config),
    /// such as the playground's download.
    #[arg(long)]
    pub run: PathBuf,
    /// A checkpoint or model file (default: the run's newest checkpoint, else its model).
    #[arg(long)]
    pub checkpoint: Option<PathBuf>,
    /// Held-out batches (default: the run's eval_batches, the ones its training evaluated).
    #[arg(long, conflicts_with = "slice")]
    pub batches: Option<usize>,
    /// Evaluate every window of one slice of the validation split once: `tuning` (its first
    /// fifth) or `test` (the rest), the two a sweep chooses settings and decides comparisons on.
    #[arg(long, value_enum)]
    pub slice: Option<Slice>,
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: BackendKind,
    /// Print one JSON object: val_loss, perplexity, tokens, checkpoint (and slice).
    #[arg(long)]
    pub json: bool,
}

/// `--slice`: data::EvalSlice, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Slice {
    Tuning,
    Test,
}

impl From<Slice> for data::EvalSlice {
    fn from(s: Slice) -> Self {
        match s {
            Slice::Tuning => data::EvalSlice::Tuning,
            Slice::Test => data::EvalSlice::Test,
        }
    }
}

#[derive(Args, Debug)]
pub struct SampleArgs {
    /// A directory written by `resmem train`, or one checkpoint file (it carries its config),
    /// such as the playground's download.
    #[arg(long)]
    pub run: PathBuf,
    #[arg(long, default_value = "\n")]
    pub prompt: String,
    /// Tokens to generate, at most 100,000: each is one forward of the model's context.
    #[arg(long, default_value_t = 200, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=MAX_SAMPLE_TOKENS))]
    pub tokens: usize,
    /// Softmax temperature; 0 always takes the likeliest token.
    #[arg(long, default_value_t = 0.8, allow_negative_numbers = true)]
    pub temperature: f32,
    /// Draw from the k likeliest tokens only (0: all).
    #[arg(long, default_value_t = 40)]
    pub top_k: usize,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// A checkpoint or model file (default: the run's newest checkpoint, else its model).
    #[arg(long)]
    pub checkpoint: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: BackendKind,
    /// Print one JSON object: prompt, text, tokens.
    #[arg(long)]
    pub json: bool,
}

/// `--arch`: the names of `models::Arch`, each with its label as its help.
fn arch_parser() -> impl clap::builder::TypedValueParser<Value = Arch> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    PossibleValuesParser::new(Arch::ALL.map(|a| PossibleValue::new(a.name()).help(a.label())))
        .try_map(|name| Arch::parse(&name).ok_or_else(|| format!("no architecture named {name}")))
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub enum BackendKind {
    /// The backend the run was trained on, where a command reads a run; else the GPU where it is
    /// a real one, and the CPU where there is none or it is a CPU emulating a GPU (llvmpipe,
    /// lavapipe, SwiftShader), which is far slower than the CPU backend.
    #[default]
    Auto,
    /// The CPU reference backend (rayon + GEMM).
    Cpu,
    /// WebGPU through wgpu: Vulkan, Metal or DX12.
    Gpu,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum InitArg {
    /// σ² = 2/(fan_in + fan_out)
    Xavier,
    /// σ² = 1/fan_in
    Lecun,
    /// The model's own: init_std²/fan_in, output layers also 1/(2L)
    Default,
}

/// (flag, config key) of a size named either way (`d-ff`, `d_ff`; `layers`, `n_layers`): a
/// whole-number model setting, which `resmem sweep`'s and `resmem count`'s cost matching solve for.
pub fn size_names(name: &str) -> anyhow::Result<(&'static str, &'static str)> {
    let sizes = || {
        SETTINGS
            .iter()
            .filter(|s| ModelSettings::has(s) && s.kind == models::settings::Kind::Whole)
    };
    let flag = name.trim_start_matches("--").replace('_', "-");
    sizes()
        .find(|s| s.flag == flag || s.key == name)
        .map(|s| (s.flag, s.key))
        .ok_or_else(|| {
            let names: Vec<&str> = sizes().map(|s| s.flag).collect();
            anyhow::anyhow!("cannot solve for `{name}`; the sizes are {}", names.join(", "))
        })
}

/// `resmem train`: a preset (or `tiny-ARCH`), then `--config`, then the flags.
#[derive(Args, Debug, Default)]
pub struct TrainArgs {
    /// A starting point; `--list-presets` shows them. Default: tiny-ARCH (the copy task).
    #[arg(long)]
    pub preset: Option<String>,
    /// A TOML run config merged onto the preset: a whole config.toml of an earlier run, or
    /// only the settings to change (`[train]\nlr = 0.003`), with `preset = "NAME"` at the top
    /// to start from another preset.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Continue the run in DIR from its newest valid checkpoint; its config.toml is used as is,
    /// but for `--steps N`, which extends the run to N steps (a new cycle of the schedule from its
    /// old end, recorded in config.toml).
    #[arg(long, conflicts_with_all = ["config", "preset", "out"])]
    pub resume: Option<PathBuf>,
    /// Start from another run's weights (its newest checkpoint, else its model.safetensors) or
    /// from one parameter file, in place of the seed's initialisation: fine-tuning. The model
    /// must have the same architecture and sizes; the optimiser and schedule start afresh.
    #[arg(long, conflicts_with = "resume", value_name = "RUN")]
    pub init_from: Option<PathBuf>,
    /// With --resume: train on although the corpus changed since the run started (its files'
    /// sizes or contents, recorded in the run's corpus.json); the new one is recorded.
    #[arg(long, requires = "resume")]
    pub corpus_changed: bool,
    /// The run directory; it must not hold an earlier run. (Checked by `train`, not by clap, so
    /// that `bench` can share these flags.)
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print the presets and exit.
    #[arg(long)]
    pub list_presets: bool,
    #[arg(long, value_parser = arch_parser())]
    pub arch: Option<Arch>,
    /// A synthetic task on bytes: copy, reverse or mqar.
    #[arg(long, conflicts_with = "data")]
    pub task: Option<Task>,
    /// A corpus directory written by `resmem data prepare` (or `cargo xtask corpus`).
    #[arg(long)]
    pub data: Option<PathBuf>,
    /// Mask attention across documents of a text corpus (true/false): GPT-2's <|endoftext|>
    /// starts each one, as in the official RMT code. On in --preset official.
    #[arg(long)]
    pub doc_mask: Option<bool>,
    /// Default (auto): for `--resume`, the backend the run trained on; for a new run, the GPU
    /// where it is a real one, else the CPU.
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: BackendKind,
    /// Whether --backend was given (set by main): `--resume` moves a run only when it is.
    #[arg(skip)]
    pub backend_given: bool,
    /// The settings: model sizes, optimiser, schedule, data and cadence, from
    /// `models::settings`.
    #[command(flatten)]
    pub settings: SettingFlags<AllSettings>,
}

impl TrainArgs {
    /// Sets the flag `--FLAG` to `text` as `resmem train` would read it: a sweep's point is its
    /// flags' text, read here rather than through a command line.
    pub fn set(&mut self, flag: &str, text: &str) -> anyhow::Result<()> {
        let bad = |what: &str| anyhow::anyhow!("--{flag} must be {what}, not \"{text}\"");
        match flag {
            "preset" => self.preset = Some(text.into()),
            "config" => self.config = Some(text.into()),
            "data" => self.data = Some(text.into()),
            "arch" => {
                let names: Vec<&str> = Arch::ALL.iter().map(|a| a.name()).collect();
                self.arch = Some(Arch::parse(text).ok_or_else(|| bad(&format!("one of {}", names.join(", "))))?);
            }
            "task" => self.task = Some(text.parse().map_err(|e: String| anyhow::anyhow!("--task: {e}"))?),
            "doc-mask" => self.doc_mask = Some(text.parse().map_err(|_| bad("true or false"))?),
            "backend" => self.backend = BackendKind::from_str(text, true).map_err(|_| bad("auto, cpu or gpu"))?,
            _ => match Setting::of_flag(flag) {
                Some(s) => self.settings.set(s, text.to_string()),
                None => anyhow::bail!("`{flag}` is not a `resmem train` flag a run can set"),
            },
        }
        Ok(())
    }
}

/// `resmem sweep`: its own flags, then `resmem train`'s, shared by every point (`--out` is the
/// sweep's directory).
#[derive(Args, Debug)]
pub struct SweepArgs {
    /// An experiment file (experiments/*.toml): title, seeds, [flags], [grid], [[variants]]
    /// and [quick]. Command-line flags override its [flags].
    pub experiment: Option<PathBuf>,
    /// Run the experiment file's [quick] variant: a few steps, for a check in seconds.
    #[arg(long)]
    pub quick: bool,
    /// A swept setting, NAME=V1,V2,… with NAME a `resmem train` flag (d_k or d-k); repeat it
    /// for a grid of every combination.
    #[arg(long = "set", value_name = "NAME=V1,V2,…")]
    pub set: Vec<String>,
    /// The seeds every point is trained with.
    #[arg(long, value_delimiter = ',')]
    pub seeds: Vec<u64>,
    #[command(flatten)]
    pub train: TrainArgs,
}

/// A model's dimensions for the counters and the closed form: a paper preset, then overrides.
#[derive(Args, Debug)]
pub struct PaperDims {
    #[arg(long, value_parser = arch_parser(), default_value = "transformer")]
    pub arch: Arch,
    /// gpt2-small, gpt2-medium (the default), table8-49m … table8-405m, table9-46m …
    /// table9-305m, table10; for memoryformer pythia-70m (the default), pythia-160m, pythia-410m;
    /// or any `resmem train --list-presets` preset of --arch (tiny-hybrid, small-rmt, …)
    #[arg(long)]
    pub preset: Option<String>,
    #[command(flatten)]
    pub dims: SettingFlags<ModelSettings>,
    /// V
    #[arg(long)]
    pub vocab: Option<usize>,
    /// N, the sequence length the FLOPs are counted for.
    #[arg(long)]
    pub seq_len: Option<usize>,
}

impl PaperDims {
    /// Fails on a dimension flag that --arch has no use for.
    pub fn check_applies(&self) -> anyhow::Result<()> {
        self.dims.check_applies(self.arch)
    }

    /// The model --arch and --preset name, then the dimension flags, --vocab and --seq-len;
    /// not validated, so that a count can name the setting that overflows first.
    pub fn config(&self) -> anyhow::Result<ModelConfig> {
        let model = match self.dims.overrides(self.arch)?.remove("model") {
            Some(toml::Value::Table(t)) => t,
            _ => toml::Table::new(),
        };
        let mut c = self.preset_config()?.merged(&model)?;
        if let Some(v) = self.vocab {
            c.set_vocab(v);
        }
        if let Some(n) = self.seq_len {
            c.set_context(n);
        }
        Ok(c)
    }

    /// --preset as a paper preset (a Pythia one for MemoryFormer), else as a training preset.
    fn preset_config(&self) -> anyhow::Result<ModelConfig> {
        let dims = || Dims::preset(self.preset.as_deref().unwrap_or("gpt2-medium"));
        let paper = match self.arch {
            Arch::MemoryFormer => {
                let name = self.preset.as_deref().unwrap_or("pythia-70m");
                presets::memoryformer(name).map(ModelConfig::MemoryFormer)
            }
            // No paper sizes yet: its own training presets, tiny-hc by default.
            Arch::Hc => match &self.preset {
                None => Ok(RunConfig::preset("tiny-hc")?.model),
                Some(name) => Err(models::ModelError::Config(format!(
                    "`{name}` is no paper preset for --arch hc"
                ))),
            },
            Arch::Transformer => dims().map(|d| ModelConfig::Transformer(d.transformer())),
            Arch::Rmt => dims().map(|d| ModelConfig::Rmt(d.rmt())),
            Arch::Hybrid => dims().map(|d| ModelConfig::Hybrid(d.hybrid())),
            // The paper size's transformer with 4 sub-blocks (Gemma 3n's K).
            Arch::Altup => dims().map(|d| ModelConfig::Altup(models::AltupConfig::widening(&d.transformer(), 4))),
            // The paper size's transformer over about 8 depth blocks (the paper's scaling runs).
            Arch::AttnRes => dims().map(|d| {
                let t = d.transformer();
                ModelConfig::AttnRes(models::AttnResConfig::widening(
                    &t,
                    models::AttnResConfig::paper_blocks(t.n_layers),
                ))
            }),
        };
        let Some(name) = self.preset.as_deref() else {
            return Ok(paper?);
        };
        match (paper, RunConfig::preset(name)) {
            (Ok(c), _) => Ok(c),
            (Err(_), Ok(run)) if run.arch() == self.arch => Ok(run.model),
            (Err(_), Ok(run)) => anyhow::bail!(
                "the preset `{name}` is a {} model, not --arch {}; choose a {} preset",
                run.arch(),
                self.arch.name(),
                self.arch.name()
            ),
            (Err(e), Err(_)) => Err(anyhow::anyhow!("{e}, or a preset of `resmem train --list-presets`")),
        }
    }
}

#[derive(Args, Debug)]
pub struct CountArgs {
    #[command(flatten)]
    pub model: PaperDims,
    /// MemoryFormer: reproduce the paper's Table 1 (three model sizes) or Table 3 (τ and K).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=3))]
    pub paper_table: Option<u8>,
    /// Print one JSON object: params, params_paper, flops_fwd, flops_fwd_paper.
    #[arg(long)]
    pub json: bool,
    /// Solve --solve so that this model's --hold costs match those of this preset (any
    /// `resmem train --list-presets` name), at this model's V and N.
    #[arg(long = "match", value_name = "PRESET", requires_all = ["hold", "solve"])]
    pub match_preset: Option<String>,
    /// With --match: the costs to hold, `params`, `flops` (forward per token at N) or both.
    #[arg(long, value_delimiter = ',', requires = "match_preset")]
    pub hold: Vec<models::matching::Cost>,
    /// With --match: one or two sizes to solve for, as the config names them (d_ff, rank,
    /// n_layers, d_model, …).
    #[arg(long, value_delimiter = ',', requires = "match_preset")]
    pub solve: Vec<String>,
    /// With --match: the largest relative deviation of a held cost.
    #[arg(long, default_value_t = 0.02, requires = "match_preset")]
    pub tolerance: f64,
}

#[derive(Args, Debug)]
pub struct VarianceArgs {
    /// The closed form of the paper's Table 1 for the given dimensions and init.
    #[arg(long, conflicts_with = "measured", required_unless_present = "measured")]
    pub closed_form: bool,
    /// Measured by hooks on a real batch of --task, after --steps steps of training; or, with
    /// --run, on a held-out batch of a trained run.
    #[arg(long)]
    pub measured: bool,
    /// Measured: a directory written by `resmem train` (or one checkpoint file); its newest
    /// checkpoint (or --checkpoint)
    /// is measured on its first held-out batch, with its closed form beside.
    #[arg(long, requires = "measured", conflicts_with_all = ["steps", "task", "batch", "tokens", "random_unembedding", "seed"])]
    pub run: Option<PathBuf>,
    /// With --run: a checkpoint or model file to measure.
    #[arg(long, requires = "run", conflicts_with = "at_init")]
    pub checkpoint: Option<PathBuf>,
    /// With --run: measure the run's model as its seed initialised it, before training.
    #[arg(long, requires = "run")]
    pub at_init: bool,
    #[command(flatten)]
    pub model: PaperDims,
    /// The init the closed form assumes.
    #[arg(long, value_enum, default_value = "default")]
    pub init: InitArg,
    #[arg(long)]
    pub json: bool,
    /// Measured: the task of the batch.
    #[arg(long, default_value = "copy")]
    pub task: Task,
    /// Measured: training steps before the measurement (0 measures at init), at most 10,000
    /// (a longer run is `resmem train`'s, measured with --run).
    #[arg(long, default_value_t = 0, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=MAX_PROBE_STEPS))]
    pub steps: usize,
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: BackendKind,
    #[arg(long, default_value_t = 8)]
    pub batch: usize,
    /// Measured: tokens per sequence (T).
    #[arg(long, default_value_t = 16)]
    pub tokens: usize,
    /// Measured: start W_U random instead of zero, so that gradients reach the blocks at init.
    #[arg(long)]
    pub random_unembedding: bool,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// `strict` or `fast`, as `engine::Precision`.
pub fn precision_parser() -> impl clap::builder::TypedValueParser<Value = engine::Precision> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(engine::Precision::ALL.map(|p| p.name()))
        .try_map(|s| s.parse::<engine::Precision>())
}
