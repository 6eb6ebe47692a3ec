//! Command-line arguments. Dimension flags override the preset's dimensions.

use clap::{Args, Parser, Subcommand, ValueEnum};
use data::Task;
use models::presets::{self, Dims};
use models::settings::Setting;
use models::{
    Arch, Hashing, HybridConfig, MemoryFormerConfig, ModelConfig, Norm, Position, RmtConfig, RunConfig,
    TransformerConfig, Trunk,
};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "resmem",
    version,
    about = "Train and study Residual Matrix Transformers, MemoryFormers, their hybrid and baseline transformers"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
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
    /// Each token's residual stream at every depth: an RMT's D_k×D_v matrix with its norm,
    /// singular values and effective rank, or another model's residual vector.
    Residual(ResidualArgs),
}

#[derive(Args, Debug)]
pub struct ResidualArgs {
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
    /// Without --run: the residuals of this training step's forward (1: the initial weights).
    #[arg(long, default_value_t = 1)]
    pub step: usize,
    /// Which sequence of the batch.
    #[arg(long, default_value_t = 0)]
    pub seq: usize,
    /// One depth (embedding, block0.attn, block0.ff, …) and token: print its values.
    #[arg(long)]
    pub depth: Option<String>,
    #[arg(long, default_value_t = 0)]
    pub token: usize,
    #[arg(long, value_enum, default_value = "gpu")]
    pub backend: BackendKind,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct BucketsArgs {
    /// A directory written by `resmem train --arch memoryformer` or `--arch hybrid`, or one of
    /// its checkpoint files.
    #[arg(long)]
    pub run: PathBuf,
    /// Held-out batches to count over.
    #[arg(long, default_value_t = 1)]
    pub batches: usize,
    /// A checkpoint or model file (default: the run's newest checkpoint).
    #[arg(long)]
    pub checkpoint: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "gpu")]
    pub backend: BackendKind,
    /// Print a list of objects with layer, table, entropy, dead_buckets and counts.
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
    #[arg(long)]
    pub batches: Option<usize>,
    #[arg(long, value_enum, default_value = "gpu")]
    pub backend: BackendKind,
    /// Print one JSON object: val_loss, perplexity, tokens, checkpoint.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct SampleArgs {
    /// A directory written by `resmem train`, or one checkpoint file (it carries its config),
    /// such as the playground's download.
    #[arg(long)]
    pub run: PathBuf,
    #[arg(long, default_value = "\n")]
    pub prompt: String,
    /// Tokens to generate.
    #[arg(long, default_value_t = 200)]
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
    #[arg(long, value_enum, default_value = "gpu")]
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendKind {
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PositionArg {
    Learned,
    Alibi,
}

pub type SizeFlag = (&'static str, &'static str, fn(&ModelDims) -> Option<usize>);

/// The integer sizes a flag sets: (flag, config key, the flag's value). `resmem sweep`'s cost
/// matching solves for them by either name.
pub const SIZE_FLAGS: [SizeFlag; 9] = [
    ("d-model", "d_model", |d| d.d_model),
    ("d-k", "d_k", |d| d.d_k),
    ("d-v", "d_v", |d| d.d_v),
    ("rank", "rank", |d| d.rank),
    ("layers", "n_layers", |d| d.layers),
    ("heads", "n_heads", |d| d.heads),
    ("head-dim", "head_dim", |d| d.head_dim),
    ("d-ff", "d_ff", |d| d.d_ff),
    ("tau", "tau", |d| d.tau),
];

/// (flag, config key) of a size named either way (`d-ff`, `d_ff`; `layers`, `n_layers`).
pub fn size_names(name: &str) -> anyhow::Result<(&'static str, &'static str)> {
    let flag = name.trim_start_matches("--").replace('_', "-");
    SIZE_FLAGS
        .iter()
        .find(|(f, k, _)| *f == flag || *k == name)
        .map(|(f, k, _)| (*f, *k))
        .ok_or_else(|| {
            let names: Vec<&str> = SIZE_FLAGS.iter().map(|(f, _, _)| *f).collect();
            anyhow::anyhow!("cannot solve for `{name}`; the sizes are {}", names.join(", "))
        })
}

/// Dimension overrides shared by every command that builds a model. Each flag's help and the
/// architectures it applies to come from its setting in `models::settings`.
#[derive(Args, Debug, Default)]
pub struct ModelDims {
    #[arg(long, help = dim_help("d_model"))]
    pub d_model: Option<usize>,
    #[arg(long, help = dim_help("d_k"))]
    pub d_k: Option<usize>,
    #[arg(long, help = dim_help("d_v"))]
    pub d_v: Option<usize>,
    #[arg(long, help = dim_help("rank"))]
    pub rank: Option<usize>,
    #[arg(long, help = dim_help("n_layers"))]
    pub layers: Option<usize>,
    #[arg(long, help = dim_help("n_heads"))]
    pub heads: Option<usize>,
    #[arg(long, help = dim_help("head_dim"))]
    pub head_dim: Option<usize>,
    #[arg(long, help = dim_help("d_ff"))]
    pub d_ff: Option<usize>,
    #[arg(long, value_parser = parse_norm, help = dim_help("norm"))]
    pub norm: Option<Norm>,
    #[arg(long, value_enum, help = dim_help("position"))]
    pub position: Option<PositionArg>,
    #[arg(long, allow_negative_numbers = true, help = dim_help("init_std"))]
    pub init_std: Option<f32>,
    #[arg(long, help = dim_help("tau"))]
    pub tau: Option<usize>,
    #[arg(long, help = dim_help("expansion_bits"))]
    pub expansion_bits: Option<usize>,
    #[arg(long, num_args = 0..=1, default_missing_value = "true", help = dim_help("block_gelu"))]
    pub block_gelu: Option<bool>,
    #[arg(long, allow_negative_numbers = true, help = dim_help("table_lr_mult"))]
    pub table_lr_mult: Option<f32>,
}

/// A dimension flag's help: its architectures, then its setting's help text.
fn dim_help(key: &str) -> String {
    match Setting::find(key) {
        Some(s) => {
            let archs: Vec<&str> = s.archs.iter().map(|a| a.name()).collect();
            format!("{} ({})", s.help, archs.join(", "))
        }
        None => String::new(),
    }
}

fn parse_norm(s: &str) -> Result<Norm, String> {
    match s {
        "layernorm" => Ok(Norm::LayerNorm),
        "rmsnorm" => Ok(Norm::RmsNorm),
        _ => Err(format!("unknown norm `{s}`; use layernorm or rmsnorm")),
    }
}

impl ModelDims {
    /// Each dimension flag by the key of its setting in `models::settings`, and whether it was
    /// given.
    fn given(&self) -> [(&'static str, bool); 15] {
        [
            ("d_model", self.d_model.is_some()),
            ("d_k", self.d_k.is_some()),
            ("d_v", self.d_v.is_some()),
            ("rank", self.rank.is_some()),
            ("n_layers", self.layers.is_some()),
            ("n_heads", self.heads.is_some()),
            ("head_dim", self.head_dim.is_some()),
            ("d_ff", self.d_ff.is_some()),
            ("norm", self.norm.is_some()),
            ("position", self.position.is_some()),
            ("init_std", self.init_std.is_some()),
            ("tau", self.tau.is_some()),
            ("expansion_bits", self.expansion_bits.is_some()),
            ("block_gelu", self.block_gelu.is_some()),
            ("table_lr_mult", self.table_lr_mult.is_some()),
        ]
    }

    /// Fails on the first dimension flag that `arch` has no use for, rather than ignoring it,
    /// and lists the ones it has; which architecture has which comes from `models::settings`.
    pub fn check_applies(&self, arch: Arch) -> anyhow::Result<()> {
        let settings = self.given().map(|(key, set)| (Setting::find(key), set));
        let Some((Some(setting), _)) = settings
            .iter()
            .find(|(s, set)| *set && s.is_some_and(|s| !s.applies(arch)))
        else {
            return Ok(());
        };
        let applies: Vec<String> = settings
            .iter()
            .filter_map(|(s, _)| s.filter(|s| s.applies(arch)))
            .map(|s| format!("--{}", s.flag))
            .collect();
        let others: Vec<String> = setting.archs.iter().map(|a| format!("--arch {a}")).collect();
        anyhow::bail!(
            "--{} does not apply to --arch {arch} (it is for {}); the dimension flags of --arch {arch} are {}",
            setting.flag,
            others.join(" and "),
            applies.join(", ")
        )
    }

    pub fn transformer(&self, mut c: TransformerConfig) -> TransformerConfig {
        c.d_model = self.d_model.unwrap_or(c.d_model);
        c.n_layers = self.layers.unwrap_or(c.n_layers);
        c.n_heads = self.heads.unwrap_or(c.n_heads);
        c.head_dim = self.head_dim.unwrap_or(c.head_dim);
        c.d_ff = self.d_ff.unwrap_or(c.d_ff);
        c.norm = self.norm.unwrap_or(c.norm);
        c.init_std = self.init_std.unwrap_or(c.init_std);
        c
    }

    pub fn memoryformer(&self, mut c: MemoryFormerConfig) -> MemoryFormerConfig {
        c.d_model = self.d_model.unwrap_or(c.d_model);
        c.n_layers = self.layers.unwrap_or(c.n_layers);
        c.n_heads = self.heads.unwrap_or(c.n_heads);
        c.norm = self.norm.unwrap_or(c.norm);
        c.embed_std = self.init_std.unwrap_or(c.embed_std);
        let h = self.hashing(c.hashing());
        (c.tau, c.expansion_bits, c.block_gelu, c.table_lr_mult) =
            (h.tau, h.expansion_bits, h.block_gelu, h.table_lr_mult);
        c
    }

    /// The flags every hashing model has.
    fn hashing(&self, mut h: Hashing) -> Hashing {
        h.tau = self.tau.unwrap_or(h.tau);
        h.expansion_bits = self.expansion_bits.unwrap_or(h.expansion_bits);
        h.block_gelu = self.block_gelu.unwrap_or(h.block_gelu);
        h.table_lr_mult = self.table_lr_mult.unwrap_or(h.table_lr_mult);
        h
    }

    /// The flags every residual-matrix model has.
    fn trunk(&self, mut t: Trunk) -> Trunk {
        t.d_k = self.d_k.unwrap_or(t.d_k);
        t.d_v = self.d_v.unwrap_or(t.d_v);
        t.rank = self.rank.unwrap_or(t.rank);
        t.n_layers = self.layers.unwrap_or(t.n_layers);
        t.norm = self.norm.unwrap_or(t.norm);
        t.init_std = self.init_std.unwrap_or(t.init_std);
        t.position = match self.position {
            Some(PositionArg::Learned) => Position::Learned,
            Some(PositionArg::Alibi) => Position::Alibi,
            None => t.position,
        };
        t
    }

    pub fn rmt(&self, c: RmtConfig) -> RmtConfig {
        RmtConfig::new(self.trunk(c.trunk()), self.d_ff.unwrap_or(c.d_ff))
    }

    pub fn hybrid(&self, c: HybridConfig) -> HybridConfig {
        HybridConfig::new(self.trunk(c.trunk()), self.hashing(c.hashing()))
    }

    /// `c` with the flags that `c`'s architecture has applied.
    pub fn apply(&self, c: ModelConfig) -> ModelConfig {
        match c {
            ModelConfig::Transformer(c) => ModelConfig::Transformer(self.transformer(c)),
            ModelConfig::Rmt(c) => ModelConfig::Rmt(self.rmt(c)),
            ModelConfig::MemoryFormer(c) => ModelConfig::MemoryFormer(self.memoryformer(c)),
            ModelConfig::Hybrid(c) => ModelConfig::Hybrid(self.hybrid(c)),
        }
    }
}

/// A size flag as a TOML value: one past i64 cannot be a real size, so it becomes i64::MAX,
/// which the size checks then refuse by name.
fn int(v: usize) -> toml::Value {
    toml::Value::Integer(i64::try_from(v).unwrap_or(i64::MAX))
}

fn float(v: f32) -> toml::Value {
    toml::Value::Float(f64::from(v))
}

/// `resmem train`: a preset (or `tiny-ARCH`), then `--config`, then the flags.
#[derive(Args, Debug)]
pub struct TrainArgs {
    /// A starting point; `--list-presets` shows them. Default: tiny-ARCH (the copy task).
    #[arg(long)]
    pub preset: Option<String>,
    /// A TOML run config merged onto the preset: a whole config.toml of an earlier run, or
    /// only the settings to change (`[train]\nlr = 0.003`), with `preset = "NAME"` at the top
    /// to start from another preset.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Continue the run in DIR from its newest valid checkpoint; its config.toml is used as is.
    #[arg(long, conflicts_with_all = ["config", "preset", "out"])]
    pub resume: Option<PathBuf>,
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
    /// Default: gpu for a new run; for `--resume`, the backend the run trained on.
    #[arg(long, value_enum, default_value = "gpu")]
    pub backend: BackendKind,
    /// Whether --backend was given (set by main): `--resume` moves a run only when it is.
    #[arg(skip)]
    pub backend_given: bool,
    #[arg(long)]
    pub steps: Option<usize>,
    #[arg(long)]
    pub batch: Option<usize>,
    /// T: tokens per training window.
    #[arg(long)]
    pub seq_len: Option<usize>,
    /// N: the model's context length (its position table, and the longest sample prompt).
    #[arg(long)]
    pub context: Option<usize>,
    /// Peak learning rate.
    #[arg(long, allow_negative_numbers = true)]
    pub lr: Option<f32>,
    #[arg(long)]
    pub seed: Option<u64>,
    /// Linear warmup over this fraction of the steps.
    #[arg(long, allow_negative_numbers = true)]
    pub warmup_frac: Option<f32>,
    /// The cosine decay ends at this fraction of the peak learning rate.
    #[arg(long, allow_negative_numbers = true)]
    pub min_lr_frac: Option<f32>,
    #[arg(long, allow_negative_numbers = true)]
    pub weight_decay: Option<f32>,
    /// Clip the global gradient norm to this.
    #[arg(long, allow_negative_numbers = true)]
    pub grad_clip: Option<f32>,
    /// Log the training loss every this many steps.
    #[arg(long)]
    pub log_every: Option<usize>,
    /// Evaluate on held-out windows every this many steps (and at the end).
    #[arg(long)]
    pub eval_every: Option<usize>,
    /// Batches of held-out windows per evaluation.
    #[arg(long)]
    pub eval_batches: Option<usize>,
    /// Write a checkpoint every this many steps (and always at the end and on Ctrl-C).
    #[arg(long)]
    pub checkpoint_every: Option<usize>,
    /// Keep the newest this many checkpoints.
    #[arg(long)]
    pub keep: Option<usize>,
    #[command(flatten)]
    pub dims: ModelDims,
}

impl TrainArgs {
    /// The model flags that were given, as (flag, the arch's config key, value).
    pub fn model_flags(&self, arch: Arch) -> Vec<(&'static str, &'static str, toml::Value)> {
        let d = &self.dims;
        let text = |v: &str| toml::Value::String(v.to_string());
        let init_key = if arch == Arch::MemoryFormer {
            "embed_std"
        } else {
            "init_std"
        };
        let mut flags = vec![];
        let mut push = |flag, key, value: Option<toml::Value>| {
            if let Some(v) = value {
                flags.push((flag, key, v));
            }
        };
        for (flag, key, get) in SIZE_FLAGS {
            push(flag, key, get(d).map(int));
        }
        push("context", "seq_len", self.context.map(int));
        push("init-std", init_key, d.init_std.map(float));
        push("expansion-bits", "expansion_bits", d.expansion_bits.map(int));
        push("block-gelu", "block_gelu", d.block_gelu.map(toml::Value::Boolean));
        push("table-lr-mult", "table_lr_mult", d.table_lr_mult.map(float));
        push(
            "norm",
            "norm",
            d.norm
                .map(|n| text(if n == Norm::LayerNorm { "layernorm" } else { "rmsnorm" })),
        );
        push(
            "position",
            "position",
            d.position
                .map(|p| text(if p == PositionArg::Learned { "learned" } else { "alibi" })),
        );
        flags
    }

    /// The optimiser, schedule and cadence flags that were given, as (section, key, value).
    pub fn run_flags(&self) -> Vec<(&'static str, &'static str, toml::Value)> {
        let mut flags = vec![];
        let mut push = |section, key, value: Option<toml::Value>| {
            if let Some(v) = value {
                flags.push((section, key, v));
            }
        };
        push("train", "steps", self.steps.map(int));
        push("train", "batch", self.batch.map(int));
        push("train", "lr", self.lr.map(float));
        push(
            "train",
            "seed",
            self.seed
                .map(|s| toml::Value::Integer(i64::try_from(s).unwrap_or(i64::MAX))),
        );
        push("train", "warmup_frac", self.warmup_frac.map(float));
        push("train", "min_lr_frac", self.min_lr_frac.map(float));
        push("train", "weight_decay", self.weight_decay.map(float));
        push("train", "max_grad_norm", self.grad_clip.map(float));
        push("cadence", "log_every", self.log_every.map(int));
        push("cadence", "eval_every", self.eval_every.map(int));
        push("cadence", "eval_batches", self.eval_batches.map(int));
        push("cadence", "checkpoint_every", self.checkpoint_every.map(int));
        push("cadence", "keep", self.keep.map(int));
        flags
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
    pub dims: ModelDims,
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
        let mut c = self.dims.apply(self.preset_config()?);
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
        let paper = match self.arch {
            Arch::MemoryFormer => {
                let name = self.preset.as_deref().unwrap_or("pythia-70m");
                presets::memoryformer(name).map(ModelConfig::MemoryFormer)
            }
            arch => Dims::preset(self.preset.as_deref().unwrap_or("gpt2-medium")).map(|d| match arch {
                Arch::Transformer => ModelConfig::Transformer(d.transformer()),
                Arch::Rmt => ModelConfig::Rmt(d.rmt()),
                _ => ModelConfig::Hybrid(d.hybrid()),
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
    /// Measured: training steps before the measurement (0 measures at init).
    #[arg(long, default_value_t = 0)]
    pub steps: usize,
    #[arg(long, value_enum, default_value = "gpu")]
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
