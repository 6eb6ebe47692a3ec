//! The whole CLI under generated arguments (issue #22, item 8): every subcommand, run
//! in-process through `resmem_cli::run`, with flags drawn from hostile values (0, 1, negatives,
//! u64::MAX, i64::MAX, NaN, inf, 1e30, empty, very long, non-UTF-8, /dev/full, a regular file, a
//! missing directory) and from valid ones, so that the deeper code runs too. Every invocation
//! must succeed or fail with an error that names a flag, file or setting; none may panic.
//!
//! Work that would run for ever (`train --steps 18446744073709551615`) is not excluded: a
//! watchdog requests a stop (as Ctrl-C does, through `resmem_cli::request_stop`) once an
//! invocation has run for `DEADLINE`, and training loops end with an "interrupted" error. Every
//! stop is reported, and one that no flag explains (a count of at least `LONG` that the user
//! gave) fails the test: that work was unbounded.
//!
//! Configs and experiment files are damaged copies of valid ones, or written from scratch from
//! the settings table and the experiment file's parts (`generated_config`,
//! `generated_experiment`).
//!
//! Each run draws a new seed, printed with its results; `RESMEM_FUZZ_SEED=…` repeats a run and
//! `RESMEM_FUZZ_INVOCATIONS=…` sets its length (the long runs in bench/RESULTS.md).

use models::settings::{Kind, Setting, SETTINGS};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Each CI run: about three minutes on two cores; the long runs are in bench/RESULTS.md.
const INVOCATIONS: usize = 5_000;
/// How long an invocation runs before the watchdog asks it to stop: long enough for the tiny
/// valid work the generator asks for to finish.
const DEADLINE: Duration = Duration::from_secs(1);
/// A flag value at least this large asks for long work (`--steps 1e6`): a stop it explains.
const LONG: u64 = 1_000;
/// No invocation may take longer than this, stop request or not: it would be a hang.
const HANG: Duration = Duration::from_secs(20);

/// xorshift64*: reproducible without a dependency.
struct Rng(u64);

impl Rng {
    /// A generator whose state is splitmix64 of `seed`: every seed its own sequence (a state
    /// of `seed | 1` made seeds 2k and 2k + 1 the same run), and never the zero state.
    fn new(seed: u64) -> Self {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Self((z ^ (z >> 31)).max(1))
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
}

/// The files the valid values point at, made once.
struct Fixtures {
    root: PathBuf,
    runs: Vec<PathBuf>,
    checkpoint: PathBuf,
    corpus: PathBuf,
    text: PathBuf,
    regular: PathBuf,
    config: PathBuf,
    experiment: PathBuf,
    params: PathBuf,
    fresh: std::cell::Cell<u64>,
}

impl Fixtures {
    /// A path no invocation has used, for an output.
    fn fresh(&self) -> PathBuf {
        let n = self.fresh.get();
        self.fresh.set(n + 1);
        self.root.join(format!("out{n}"))
    }

    /// A fresh copy of the file `from`, damaged as a disk, an editor or a hand does it.
    fn mutated(&self, from: &Path, rng: &mut Rng) -> PathBuf {
        let out = self.fresh().with_extension(from.extension().unwrap_or_default());
        std::fs::write(&out, mutate(&std::fs::read(from).unwrap(), rng)).unwrap();
        out
    }

    /// A fresh copy of the corpus with one of its files damaged.
    fn mutated_corpus(&self, rng: &mut Rng) -> PathBuf {
        let out = self.fresh();
        std::fs::create_dir(&out).unwrap();
        let files = ["meta.json", "train.bin", "val.bin"];
        for f in files {
            std::fs::copy(self.corpus.join(f), out.join(f)).unwrap();
        }
        let damaged = out.join(files[rng.below(files.len())]);
        std::fs::write(&damaged, mutate(&std::fs::read(&damaged).unwrap(), rng)).unwrap();
        out
    }
}

impl Fixtures {
    /// A run config written from scratch: a few settings of the table, each in its own table or
    /// another, with a value of its kind, of another kind or a hostile one.
    fn generated_config(&self, rng: &mut Rng) -> PathBuf {
        let mut tables: BTreeMap<&str, Vec<String>> = BTreeMap::new();
        if rng.chance(0.5) {
            let presets = [
                "tiny-rmt",
                "tiny-transformer",
                "tiny-hc",
                "gpt2-small",
                "no-such-preset",
            ];
            tables
                .entry("")
                .or_default()
                .push(format!("preset = \"{}\"", presets[rng.below(presets.len())]));
        }
        for _ in 0..1 + rng.below(6) {
            let s = &SETTINGS[rng.below(SETTINGS.len())];
            let table = match rng.chance(0.9) {
                true => s.table,
                false => ["model", "train", "data", "cadence", "nowhere"][rng.below(5)],
            };
            tables
                .entry(table)
                .or_default()
                .push(format!("{} = {}", s.key, toml_value(s, rng, self)));
        }
        let mut text = String::new();
        for (table, lines) in &tables {
            if !table.is_empty() {
                text += &format!("[{table}]\n");
            }
            for line in lines {
                text += &format!("{line}\n");
            }
        }
        let out = self.fresh().with_extension("toml");
        std::fs::write(&out, text).unwrap();
        out
    }

    /// An experiment file written from scratch: each of its parts present by chance, with small
    /// valid values most of the time (so that the sweep's checks, not its parser, meet them),
    /// labels that name an arm or none, and counts past the sweep's bounds now and then.
    fn generated_experiment(&self, rng: &mut Rng) -> PathBuf {
        let labels = ["a", "b", "d_k=4", "nobody"];
        let label = |rng: &mut Rng| labels[rng.below(labels.len())];
        let list = |rng: &mut Rng, xs: &[&str]| {
            format!(
                "[{}]",
                (0..rng.below(4))
                    .map(|_| xs[rng.below(xs.len())])
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        let seeds = ["0", "1", "2", "100", "101", "102", "-1", "18446744073709551615"];
        let mut t = String::new();
        if rng.chance(0.5) {
            t += "title = \"generated\"\n";
        }
        match rng.below(8) {
            0 => t += "seeds = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]\n",
            1 => t += &format!("seeds = {}\n", list(rng, &seeds)),
            2 => {}
            _ => t += "seeds = [0, 1]\n",
        }
        if rng.chance(0.2) {
            t += &format!("reference = \"{}\"\n", label(rng));
        }
        if rng.chance(0.1) {
            t += "variance = true\n";
        }
        t += "[flags]\nbackend = \"cpu\"\nsteps = 2\nbatch = 2\neval_batches = 1\nlayers = 1\n";
        for _ in 0..rng.below(3) {
            let s = &SETTINGS[rng.below(SETTINGS.len())];
            // [flags] names flags, as `resmem train` spells them (`d-k` or `d_k`).
            if !["steps", "batch", "eval-batches", "layers"].contains(&s.flag) {
                t += &format!("{} = {}\n", s.flag.replace('-', "_"), toml_value(s, rng, self));
            }
        }
        if rng.chance(0.4) {
            t += &format!("[grid]\nd_k = {}\n", list(rng, &["2", "4", "0", "1e39"]));
        }
        for name in ["a", "b"].iter().take(rng.below(3)) {
            let presets = ["tiny-rmt", "tiny-transformer", "tiny-memoryformer", "tiny-hc", "nope"];
            t += &format!(
                "[[variants]]\nlabel = \"{name}\"\npreset = \"{}\"\n",
                presets[rng.below(presets.len())]
            );
        }
        if rng.chance(0.3) {
            let widen = ["0", "1", "2", "1000000"][rng.below(4)];
            let tune_seeds = ["[100, 101, 102]", "[100]", "[0, 1, 2]", "[100, 100, 101]"][rng.below(4)];
            let lr = ["[0.001, 0.01]", "[0.001, 0.003, 0.01]", "[]", "[-1, 0, 1e39]"][rng.below(4)];
            t += &format!("[tune]\nseeds = {tune_seeds}\nwiden = {widen}\nlr = {lr}\n");
        }
        if rng.chance(0.3) {
            let looks = ["[1, 2]", "[2, 1]", "[0]", "[1000000]", "[]"][rng.below(5)];
            let boundary = ["obrien-fleming", "pocock", "bonferroni"][rng.below(3)];
            t += &format!("[sequential]\nlooks = {looks}\nboundary = \"{boundary}\"\n");
        }
        if rng.chance(0.2) {
            let hold = ["[\"params\"]", "[\"flops\"]", "[\"params\", \"flops\"]", "[]"][rng.below(4)];
            let solve = ["[\"d_ff\"]", "[\"rank\"]", "[\"d_model\", \"d_ff\"]", "[\"nothing\"]"][rng.below(4)];
            let tolerance = ["0.01", "0", "-1", "nan"][rng.below(4)];
            t += &format!(
                "[[match]]\npoints = \"{}\"\nto = \"{}\"\nhold = {hold}\nsolve = {solve}\ntolerance = {tolerance}\n",
                label(rng),
                label(rng)
            );
        }
        for _ in 0..rng.below(3) {
            let metrics = [
                "test_loss",
                "final_val_loss",
                "tokens_to_target",
                "flops_to_target",
                "wall_s",
                "mood",
            ];
            // A metric no sweep knows, now and then.
            let metrics: Vec<String> = (0..rng.below(3))
                .map(|_| {
                    let known = if rng.chance(0.05) { 6 } else { 5 };
                    format!("\"{}\"", metrics[rng.below(known)])
                })
                .collect();
            t += &format!(
                "[[compare]]\na = \"{}\"\nb = \"{}\"\nmetrics = [{}]\n",
                label(rng),
                label(rng),
                metrics.join(", ")
            );
        }
        if rng.chance(0.2) {
            let scale = ["log2", "linear", "cubic"][rng.below(3)];
            t += &format!(
                "[[trend]]\naxis = \"{}\"\nscale = \"{scale}\"\n",
                ["d_k", "lr", "nothing"][rng.below(3)]
            );
        }
        if rng.chance(0.1) {
            let per = ["20", "0", "-1", "1e39"][rng.below(4)];
            t += &format!(
                "[scaling]\ntokens_per_param = {per}\nreference = \"{}\"\n[scaling.families]\na = [\"a\"]\n",
                label(rng)
            );
        }
        if rng.chance(0.3) {
            t += "[quick]\nseeds = [0]\n[quick.flags]\nsteps = 1\n";
        }
        let out = self.fresh().with_extension("toml");
        std::fs::write(&out, t).unwrap();
        out
    }
}

/// A TOML value for the setting `s`: mostly one `valid` would give, sometimes one of another
/// kind or a hostile number.
fn toml_value(s: &Setting, rng: &mut Rng, f: &Fixtures) -> String {
    let hostile = [
        "-1",
        "0",
        "1e39",
        "nan",
        "-inf",
        "18446744073709551615",
        "\"x\"",
        "true",
        "[1, 2]",
    ];
    if rng.chance(0.2) {
        return hostile[rng.below(hostile.len())].to_string();
    }
    let text = valid_or_none(s.flag, rng, f, &[]).map(|v| v.to_string_lossy().into_owned());
    match (s.kind, text) {
        (Kind::Choice(options), _) => format!("\"{}\"", options[rng.below(options.len())]),
        (Kind::Switch, _) => ["true", "false"][rng.below(2)].to_string(),
        (Kind::Whole | Kind::Number, Some(v)) if v.parse::<f64>().is_ok() => v,
        (Kind::Whole, _) => ["1", "2", "4"][rng.below(3)].to_string(),
        (Kind::Number, _) => ["0.5", "0.01"][rng.below(2)].to_string(),
    }
}

/// `bytes` truncated, with a byte flipped, a number made hostile, a line repeated or garbage
/// added.
fn mutate(bytes: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut b = bytes.to_vec();
    let at = rng.below(b.len().max(1));
    match rng.below(5) {
        0 => b.truncate(at),
        1 if !b.is_empty() => b[at] ^= 1 << rng.below(8),
        2 => {
            // The first number at or after `at`, replaced.
            let start = (at..b.len()).find(|&i| b[i].is_ascii_digit()).unwrap_or(b.len());
            let end = (start..b.len()).find(|&i| !b[i].is_ascii_digit()).unwrap_or(b.len());
            let hostile = ["18446744073709551615", "1e39", "-1", "nan", "0", "4294967296"][rng.below(6)];
            b.splice(start..end, hostile.bytes()).for_each(drop);
        }
        3 => {
            let line_start = b[..at].iter().rposition(|&c| c == b'\n').map_or(0, |i| i + 1);
            let line_end = (at..b.len()).find(|&i| b[i] == b'\n').map_or(b.len(), |i| i + 1);
            let line = b[line_start..line_end].to_vec();
            b.splice(line_end..line_end, line).for_each(drop);
        }
        _ => b.splice(at..at, b"\n[[[\x00\xff = = \n".iter().copied()).for_each(drop),
    }
    b
}

fn os(s: &str) -> OsString {
    OsString::from(s)
}

fn run_ok(args: &[&str]) {
    let mut all = vec![os("resmem")];
    all.extend(args.iter().map(|a| os(a)));
    if let Err(e) = resmem_cli::run(all) {
        panic!("fixture {args:?}: {e:#}");
    }
}

fn fixtures(root: &Path) -> Fixtures {
    let p = |name: &str| root.join(name);
    let s = |p: &Path| p.to_str().unwrap().to_string();
    let tiny = [
        "--backend",
        "cpu",
        "--steps",
        "2",
        "--batch",
        "2",
        "--eval-batches",
        "1",
        "--layers",
        "1",
    ];
    let mut runs = vec![];
    for arch in ["transformer", "rmt", "memoryformer", "hybrid"] {
        let run = p(&format!("run-{arch}"));
        let mut args = vec!["train", "--arch", arch, "--out"];
        let out = s(&run);
        args.push(&out);
        args.extend(tiny);
        run_ok(&args);
        runs.push(run);
    }
    let checkpoint = std::fs::read_dir(runs[1].join("checkpoints"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let text = p("text");
    std::fs::create_dir(&text).unwrap();
    std::fs::write(text.join("a.txt"), "Some text to tokenize, some more.\n".repeat(40)).unwrap();
    let corpus = p("corpus");
    run_ok(&["data", "prepare", "--text", &s(&text), "--out", &s(&corpus)]);
    let regular = p("regular.txt");
    std::fs::write(&regular, b"not a config \x00\xff\n[[[").unwrap();
    let config = p("partial.toml");
    std::fs::write(&config, "[train]\nlr = 0.003\nsteps = 2\n").unwrap();
    let experiment = p("experiment.toml");
    std::fs::write(
        &experiment,
        "title = \"fuzz\"\nseeds = [0]\n[flags]\nbackend = \"cpu\"\nsteps = 2\nbatch = 2\neval_batches = 1\n\
         [grid]\nlr = [0.001, 0.002]\n[quick]\nseeds = [0]\n[quick.flags]\nsteps = 1\n",
    )
    .unwrap();
    let params = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/official-rmt/rmt_official_small_params.safetensors");
    Fixtures {
        root: root.to_path_buf(),
        runs,
        checkpoint,
        corpus,
        text,
        regular,
        config,
        experiment,
        params,
        fresh: std::cell::Cell::new(0),
    }
}

/// Values no flag should crash on.
fn hostile(rng: &mut Rng, f: &Fixtures) -> OsString {
    match rng.below(24) {
        0 => os("0"),
        1 => os("1"),
        2 => os("-1"),
        3 => os("18446744073709551615"),
        4 => os("9223372036854775807"),
        5 => os("-9223372036854775808"),
        6 => os("18446744073709551616"),
        7 => os("NaN"),
        8 => os("inf"),
        9 => os("-inf"),
        10 => os("1e30"),
        11 => os("-1e30"),
        12 => os(""),
        13 => os(&"a".repeat(5000)),
        14 => OsString::from_vec(vec![b'f', 0xff, 0xfe, b'x']),
        15 => os("/dev/full"),
        16 => f.regular.clone().into_os_string(),
        17 => os("/nonexistent-resmem/missing/dir"),
        18 => os("4294967296"),
        19 => os("1e-45"),
        20 => os("0.0"),
        21 => os("-0"),
        22 => os("2,2,2"),
        _ => os("=,"),
    }
}

/// A value the flag `id` accepts, so that invocations get past parsing.
fn valid(id: &str, rng: &mut Rng, f: &Fixtures, possible: &[String]) -> OsString {
    valid_or_none(id, rng, f, possible).unwrap_or_else(|| panic!("the fuzzer has no valid value for --{id}"))
}

/// A value the flag `id` accepts, or None where the fuzzer knows none (a test refuses that).
fn valid_or_none(id: &str, rng: &mut Rng, f: &Fixtures, possible: &[String]) -> Option<OsString> {
    if !possible.is_empty() {
        // The GPU (lavapipe in CI) takes long to start: rarely.
        let mut choices: Vec<&String> = possible.iter().filter(|v| v.as_str() != "gpu").collect();
        if choices.is_empty() || rng.chance(0.005) {
            choices = possible.iter().collect();
        }
        return Some(os(choices[rng.below(choices.len())]));
    }
    // Settings' flags have hyphenated ids (`d-k`), the others their field's (`eval_batches`).
    let id = id.replace('-', "_");
    let id = id.as_str();
    let run = || f.runs[rng_index(id, f.runs.len())].clone().into_os_string();
    let pick = |rng: &mut Rng, xs: &[&str]| os(xs[rng.below(xs.len())]);
    Some(match id {
        "steps" | "batch" | "batches" | "eval_batches" | "layers" | "keep" | "log_every" | "eval_every"
        | "checkpoint_every" | "step" => pick(rng, &["1", "2", "3"]),
        "seq_len" | "tokens" | "context" => pick(rng, &["4", "8", "16"]),
        "d_model" | "d_ff" | "d_k" | "d_v" | "head_dim" | "vocab" => pick(rng, &["4", "8", "16"]),
        "rank" | "heads" | "tau" => pick(rng, &["1", "2", "4"]),
        "seed" | "seq" | "token" | "warmup" => pick(rng, &["0", "1", "7"]),
        "lr" => pick(rng, &["0.001", "0.01"]),
        "warmup_frac" | "min_lr_frac" | "weight_decay" | "val_frac" | "tolerance" => pick(rng, &["0.1", "0.5"]),
        "grad_clip" | "temperature" => pick(rng, &["1", "0.5"]),
        "init_std" => pick(rng, &["0.02", "1"]),
        "top_k" => pick(rng, &["0", "5"]),
        "norm" => pick(rng, &["layernorm", "rmsnorm"]),
        "doc_mask" => pick(rng, &["true", "false"]),
        "prompt" => pick(rng, &["hi", "\n", "the"]),
        "depth" => pick(rng, &["embedding", "block0.attn", "block0.ff", "nowhere"]),
        "preset" => pick(
            rng,
            &[
                "tiny-rmt",
                "tiny-transformer",
                "tiny-memoryformer",
                "tiny-hybrid",
                "gpt2-small",
                "pythia-70m",
            ],
        ),
        "match_preset" => pick(rng, &["tiny-rmt", "tiny-transformer"]),
        "hold" => pick(rng, &["params", "flops", "params,flops"]),
        "solve" => pick(rng, &["d_ff", "rank", "n_layers", "d_model"]),
        "set" => pick(rng, &["lr=0.001,0.002", "d_k=2,4", "steps=1"]),
        "seeds" => pick(rng, &["0", "0,1"]),
        "x" => pick(rng, &["step", "flops", "time", "lr", "d_k"]),
        "title" => pick(rng, &["a title", ""]),
        "paper_table" => pick(rng, &["1", "2", "3"]),
        "out" => {
            let out = f.fresh();
            match id {
                _ if rng.chance(0.3) => out.with_extension("svg").into_os_string(),
                _ if rng.chance(0.2) => out.with_extension("safetensors").into_os_string(),
                _ => out.into_os_string(),
            }
        }
        "run" | "resume" | "paths" => run(),
        "checkpoint" => match rng.below(3) {
            0 => f.checkpoint.clone().into_os_string(),
            1 => f.mutated(&f.checkpoint, rng).into_os_string(),
            _ => f.runs[1].join("model.safetensors").into_os_string(),
        },
        "data" if rng.chance(0.3) => f.mutated_corpus(rng).into_os_string(),
        "data" => f.corpus.clone().into_os_string(),
        "config" if rng.chance(0.3) => f.mutated(&f.config, rng).into_os_string(),
        "config" if rng.chance(0.3) => f.generated_config(rng).into_os_string(),
        "experiment" if rng.chance(0.3) => f.mutated(&f.experiment, rng).into_os_string(),
        "experiment" if rng.chance(0.4) => f.generated_experiment(rng).into_os_string(),
        "text" => f.text.clone().into_os_string(),
        "config" => f.config.clone().into_os_string(),
        "experiment" => f.experiment.clone().into_os_string(),
        "params" => f.params.clone().into_os_string(),
        "tokens_file" => f.corpus.join("train.bin").into_os_string(),
        "init_from" => run(),
        "summary" => match rng.below(2) {
            0 => f.experiment.clone().into_os_string(),
            _ => f.runs[0].clone().into_os_string(),
        },
        "task" => pick(rng, &["copy", "reverse", "mqar"]),
        "tokenizer" => pick(rng, &["bytes", "gpt2"]),
        "streams" | "sub_blocks" | "depth_blocks" | "sinkhorn_iters" | "expansion_bits" | "top" => {
            pick(rng, &["1", "2", "4"])
        }
        "sample_every" => pick(rng, &["0", "1", "2"]),
        "block_gelu" => pick(rng, &["true", "false"]),
        "table_lr_mult" => pick(rng, &["1", "10"]),
        "sites" => pick(
            rng,
            &[
                "embedding",
                "block0.attn",
                "block0.ff,slot1",
                "block0.ml2.table1",
                "nowhere",
            ],
        ),
        "positions" => pick(rng, &["0", "0,1", "3"]),
        "target" | "versus" => pick(rng, &["a", "#104", "e"]),
        "corrupt" => pick(rng, &["hj", "\n", "tha"]),
        _ => return None,
    })
}

/// A run for `id`: a different one each call, without borrowing the generator.
fn rng_index(_id: &str, n: usize) -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed) % n
}

/// One flag of a leaf subcommand.
#[derive(Clone)]
struct Flag {
    id: String,
    long: Option<String>,
    takes_value: bool,
    possible: Vec<String>,
    required: bool,
}

/// Every leaf subcommand (its words) with its flags.
fn leaves(cmd: &clap::Command, path: Vec<String>, out: &mut Vec<(Vec<String>, Vec<Flag>)>) {
    if cmd.has_subcommands() {
        for sub in cmd.get_subcommands() {
            let mut p = path.clone();
            p.push(sub.get_name().to_string());
            leaves(sub, p, out);
        }
        return;
    }
    let flags = cmd
        .get_arguments()
        .filter(|a| a.get_id() != "help" && a.get_id() != "version")
        .map(|a| Flag {
            id: a.get_id().to_string(),
            long: a.get_long().map(str::to_string),
            takes_value: a.get_action().takes_values(),
            required: a.is_required_set(),
            possible: a
                .get_possible_values()
                .iter()
                .map(|v| v.get_name().to_string())
                .collect(),
        })
        .collect();
    out.push((path, flags));
}

/// The value of `flag`: valid with probability `p_valid`, else hostile.
fn value(flag: &Flag, rng: &mut Rng, f: &Fixtures, p_valid: f64) -> OsString {
    // `import official --tokens` is a file, `sample --tokens` a count.
    let id = match (flag.id.as_str(), flag.possible.is_empty()) {
        ("tokens", _) if rng.chance(0.5) => "tokens_file",
        (id, _) => id,
    };
    match rng.chance(p_valid) {
        true => valid(id, rng, f, &flag.possible),
        false => hostile(rng, f),
    }
}

/// An invocation of `leaf`: `hostile_count` flags hostile and the rest valid, or (`random`) each
/// flag present by chance and hostile one time in seven, so that most invocations get past parsing.
fn invocation(leaf: &(Vec<String>, Vec<Flag>), rng: &mut Rng, f: &Fixtures, deep: bool) -> Vec<OsString> {
    let (words, flags) = leaf;
    let mut args: Vec<OsString> = vec![os("resmem")];
    args.extend(words.iter().map(|w| os(w)));
    let tiny: &[(&str, &str)] = &[
        ("backend", "cpu"),
        ("steps", "2"),
        ("batch", "2"),
        ("eval_batches", "1"),
        ("layers", "1"),
        ("tokens", "4"),
        ("batches", "1"),
    ];
    let mut chosen: Vec<(&Flag, OsString)> = vec![];
    if deep {
        // The small valid settings, then a few flags of which one or two are hostile.
        for (id, v) in tiny {
            if let Some(flag) = flags.iter().find(|fl| fl.id == *id) {
                if *id == "tokens" && words.first().is_some_and(|w| w == "import") {
                    continue;
                }
                chosen.push((flag, os(v)));
            }
        }
        for _ in 0..rng.below(4) {
            let flag = &flags[rng.below(flags.len())];
            chosen.push((flag, value(flag, rng, f, 1.0)));
        }
        for _ in 0..1 + rng.below(2) {
            let flag = &flags[rng.below(flags.len())];
            let v = value(flag, rng, f, 0.0);
            match chosen.iter_mut().find(|(fl, _)| fl.id == flag.id) {
                Some(slot) => slot.1 = v,
                None => chosen.push((flag, v)),
            }
        }
    } else {
        // The default backend is the GPU, which on CI is lavapipe: a command's default sizes
        // (gpt2-medium for `analyze variance --measured`) take minutes there, so the CPU is
        // named unless a drawn flag names another backend (twice: a clean clap error).
        if let Some(flag) = flags.iter().find(|fl| fl.id == "backend") {
            chosen.push((flag, os("cpu")));
        }
        // What the command requires, valid, so that most invocations reach its code.
        for flag in flags.iter().filter(|fl| fl.required) {
            chosen.push((flag, value(flag, rng, f, 1.0)));
        }
        for _ in 0..rng.below(7) {
            let flag = &flags[rng.below(flags.len())];
            // A flag given twice is a clean clap error: now and then.
            if chosen.iter().any(|(fl, _)| fl.id == flag.id) && !rng.chance(0.05) {
                continue;
            }
            chosen.push((flag, value(flag, rng, f, 0.85)));
        }
    }
    // Outputs go into the fixture directory unless hostile.
    for flag in flags.iter().filter(|fl| fl.id == "out") {
        if !chosen.iter().any(|(fl, _)| fl.id == "out") && rng.chance(0.9) {
            chosen.push((flag, valid("out", rng, f, &[])));
        }
    }
    for (flag, v) in chosen {
        match &flag.long {
            Some(long) if flag.takes_value => {
                args.push(os(&format!("--{long}")));
                args.push(v);
            }
            Some(long) => args.push(os(&format!("--{long}"))),
            None => args.push(v),
        }
    }
    // Now and then a stray word, or a flag's `=` form.
    match rng.below(40) {
        0 => args.push(os("--help")),
        1 => args.push(os("--no-such-flag")),
        2 => args.push(hostile(rng, f)),
        3 => args.insert(2.min(args.len()), os("--version")),
        _ => {}
    }
    args
}

fn show(args: &[OsString]) -> String {
    args.iter()
        .map(|a| {
            let s = a.to_string_lossy();
            if s.len() > 40 {
                format!("{}…({} bytes)", &s[..20], s.len())
            } else {
                format!("{s:?}")
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether `message` names something the user gave or can change: a flag, a file, a setting.
fn names_something(message: &str, args: &[OsString]) -> bool {
    const SETTINGS: [&str; 12] = [
        "--",
        "`",
        "config",
        "preset",
        "checkpoint",
        "metrics",
        "meta.json",
        ".bin",
        "safetensors",
        "directory",
        "file",
        "run",
    ];
    SETTINGS.iter().any(|s| message.contains(s))
        || args[1..].iter().map(|a| a.to_string_lossy()).any(|a| {
            // A flag given, or its setting as a config names it (--seq-len: seq_len).
            let key = a.strip_prefix("--").map(|k| k.replace('-', "_"));
            a.len() >= 2 && message.contains(a.as_ref()) || key.is_some_and(|k| k.len() >= 2 && message.contains(&k))
        })
}

/// Whether `args` ask for long work: a command that trains at sizes the user chooses (`train`,
/// `sweep`, `bench`, `analyze variance --measured`, a view that trains a fresh model `--step`
/// steps first: their defaults take seconds on a busy machine), a patching
/// table (a forward for each site and position of the prompt: every site by default), a number of
/// at least `LONG` (steps, tokens, batches), or the GPU, which lavapipe emulates slowly. Every
/// other command at the generator's sizes ends well within `DEADLINE`.
fn asks_for_long_work(args: &[OsString]) -> bool {
    let words: Vec<String> = args.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    let trains = matches!(words.get(1).map(String::as_str), Some("train" | "sweep" | "bench"))
        || words.iter().any(|w| w == "--measured" || w == "--step")
        || words.get(2).is_some_and(|w| w == "patch");
    trains
        || words.iter().any(|a| {
            a == "gpu"
                || a.split([',', '='])
                    .any(|v| v.parse::<f64>().is_ok_and(|x| x.abs() >= LONG as f64 || x.is_nan()))
        })
}

/// What the watchdog watches: when the current invocation started (None: between them).
type Watched = Arc<Mutex<Option<Instant>>>;

fn watchdog(watched: Watched, done: Arc<std::sync::atomic::AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !done.load(std::sync::atomic::Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
            // Under the lock, so that a request meant for one invocation never reaches the next.
            let started = watched.lock().unwrap();
            if started.is_some_and(|s| s.elapsed() > DEADLINE) {
                resmem_cli::request_stop(true);
            }
        }
    })
}

/// Every flag of every subcommand has valid values in the fuzzer, so that its invocations get
/// past parsing: a new flag fails here until it has some.
#[test]
fn the_fuzzer_knows_a_valid_value_for_every_flag() {
    let dir = tempfile::tempdir().unwrap();
    // Files for the damaged copies some values are.
    let corpus = dir.path().join("corpus");
    std::fs::create_dir(&corpus).unwrap();
    for file in ["meta.json", "train.bin", "val.bin"] {
        std::fs::write(corpus.join(file), "{}").unwrap();
    }
    for file in ["c", "config", "experiment"] {
        std::fs::write(dir.path().join(file), "x = 1\n").unwrap();
    }
    let f = Fixtures {
        root: dir.path().to_path_buf(),
        runs: vec![dir.path().join("run"), dir.path().join("rmt")],
        checkpoint: dir.path().join("c"),
        corpus: dir.path().join("corpus"),
        text: dir.path().join("text"),
        regular: dir.path().join("regular"),
        config: dir.path().join("config"),
        experiment: dir.path().join("experiment"),
        params: dir.path().join("params"),
        fresh: std::cell::Cell::new(0),
    };
    let mut all = vec![];
    leaves(&resmem_cli::command(), vec![], &mut all);
    let mut rng = Rng::new(1);
    let mut missing: Vec<String> = (all.iter())
        .flat_map(|(words, flags)| flags.iter().map(move |fl| (words, fl)))
        .filter(|(_, fl)| fl.takes_value && valid_or_none(&fl.id, &mut rng, &f, &fl.possible).is_none())
        .map(|(words, fl)| format!("{} --{}", words.join(" "), fl.id))
        .collect();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "flags without a valid value in the fuzzer:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_cli_survives_generated_arguments() {
    let dir = tempfile::tempdir().unwrap();
    // Relative outputs (an empty or long --out) land in the temporary directory, not the repo.
    let cwd = dir.path().join("cwd");
    std::fs::create_dir(&cwd).unwrap();
    std::env::set_current_dir(&cwd).unwrap();
    // wgpu and Mesa write harmless errors without a runtime dir.
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        let runtime = std::env::temp_dir().join("resmem-xdg");
        std::fs::create_dir_all(&runtime).unwrap();
        std::env::set_var("XDG_RUNTIME_DIR", runtime);
    }
    resmem_cli::console::set_quiet(true);
    // Valid but large work (a gpt2-medium measured on the CPU) is refused, as in a small machine.
    resmem_cli::limit_memory(512 << 20);
    let f = fixtures(dir.path());

    let mut all = vec![];
    leaves(&resmem_cli::command(), vec![], &mut all);
    let names: Vec<String> = all.iter().map(|(w, _)| w.join(" ")).collect();
    for want in [
        "train",
        "sweep",
        "eval",
        "sample",
        "count",
        "analyze variance",
        "analyze buckets",
        "analyze residual",
        "data prepare",
        "plot",
        "bench",
    ] {
        assert!(names.iter().any(|n| n == want), "no subcommand {want} in {names:?}");
    }
    assert!(names.iter().any(|n| n.starts_with("import ")) && names.iter().any(|n| n.starts_with("export ")));

    // Panics are recorded, not printed: the message and where.
    let panicked: Arc<Mutex<Option<String>>> = Arc::default();
    let slot = panicked.clone();
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let at = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let text = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_default();
        *slot.lock().unwrap() = Some(format!("{at}: {text}"));
    }));

    let watched: Watched = Arc::default();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let dog = watchdog(watched.clone(), done.clone());

    let seed = std::env::var("RESMEM_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            now.map_or(1, |d| d.as_nanos() as u64)
        });
    let invocations: usize = std::env::var("RESMEM_FUZZ_INVOCATIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(INVOCATIONS);
    eprintln!("fuzz_cli: seed {seed} (RESMEM_FUZZ_SEED={seed} repeats this run)");
    let mut rng = Rng::new(seed);
    // Each invocation before it runs, for one that aborts the process.
    let trace = std::env::var_os("RESMEM_FUZZ_TRACE");
    let start = Instant::now();
    let mut panics: BTreeMap<String, (usize, String)> = BTreeMap::new();
    let mut vague: Vec<String> = vec![];
    let mut hangs: Vec<String> = vec![];
    let mut unexplained: Vec<String> = vec![];
    let (mut ok, mut failed, mut stopped, mut parsing) = (0usize, 0usize, 0usize, 0usize);
    let mut slowest = (Duration::ZERO, String::new());
    let mut per_leaf: BTreeMap<String, usize> = BTreeMap::new();
    let mut parse_kinds: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..invocations {
        let leaf = &all[i % all.len()];
        let deep = rng.chance(0.15);
        let args = invocation(leaf, &mut rng, &f, deep);
        *per_leaf.entry(leaf.0.join(" ")).or_default() += 1;
        {
            let mut w = watched.lock().unwrap();
            resmem_cli::request_stop(false);
            *w = Some(Instant::now());
        }
        if let Some(trace) = &trace {
            use std::io::Write;
            let mut t = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(trace)
                .unwrap();
            writeln!(t, "{i}: {}", show(&args)).unwrap();
        }
        let t0 = Instant::now();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| resmem_cli::run(args.clone())));
        let took = t0.elapsed();
        *watched.lock().unwrap() = None;
        if took > slowest.0 {
            slowest = (took, show(&args));
        }
        if took > HANG {
            hangs.push(format!("{took:?}: {}", show(&args)));
        }
        match result {
            Ok(Ok(())) => ok += 1,
            Ok(Err(e)) => {
                failed += 1;
                let message = format!("{e:#}");
                if let Some(c) = resmem_cli::clap_error(&e) {
                    parsing += 1;
                    *parse_kinds.entry(format!("{:?}", c.kind())).or_default() += 1;
                }
                if message.contains("interrupted") {
                    stopped += 1;
                    if !asks_for_long_work(&args) {
                        unexplained.push(format!("{took:?}: {}", show(&args)));
                    }
                }
                let help = resmem_cli::clap_error(&e).is_some_and(|c| {
                    matches!(
                        c.kind(),
                        clap::error::ErrorKind::DisplayHelp
                            | clap::error::ErrorKind::DisplayVersion
                            | clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                    )
                });
                if !help && !names_something(&message, &args) {
                    vague.push(format!("{}\n    -> {message}", show(&args)));
                }
            }
            Err(_) => {
                let what = panicked.lock().unwrap().take().unwrap_or_default();
                let site = what.split(": ").next().unwrap_or_default().to_string();
                let entry = panics
                    .entry(site)
                    .or_insert((0, format!("{what}\n    resmem {}", show(&args))));
                entry.0 += 1;
            }
        }
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    dog.join().unwrap();
    resmem_cli::request_stop(false);
    let _ = std::panic::take_hook();
    std::panic::set_hook(default_hook);
    resmem_cli::console::set_quiet(false);
    let count = ok + failed + panics.values().map(|p| p.0).sum::<usize>();
    // Straight to stderr, past the test harness's capture, so that CI logs show it.
    let mut log = std::io::stderr();
    use std::io::Write;
    let _ = writeln!(
        log,
        "fuzz_cli: {count} invocations of {} subcommands in {:.1} s (seed {seed}): {ok} succeeded, {failed} \
         failed cleanly ({parsing} at argument parsing, {stopped} stopped by the watchdog), {} panicked at {} sites; \
         slowest {:.2} s: {}",
        all.len(),
        start.elapsed().as_secs_f64(),
        count - ok - failed,
        panics.len(),
        slowest.0.as_secs_f64(),
        slowest.1
    );
    let _ = writeln!(log, "fuzz_cli: per subcommand {per_leaf:?}");
    let _ = writeln!(log, "fuzz_cli: argument errors by kind {parse_kinds:?}");
    let _ = writeln!(
        log,
        "fuzz_cli: {} invocations stopped by the watchdog, {} of them by no flag that asks for long work",
        stopped,
        unexplained.len()
    );
    assert!(count >= invocations, "only {count} invocations ran");
    assert!(
        unexplained.is_empty(),
        "work the watchdog had to stop, which no flag asked for (seed {seed}):\n{}",
        unexplained.join("\n")
    );
    let panic_list: Vec<String> = panics.values().map(|(n, first)| format!("{n}× {first}")).collect();
    assert!(panics.is_empty(), "panics:\n{}", panic_list.join("\n"));
    assert!(hangs.is_empty(), "invocations past {HANG:?}:\n{}", hangs.join("\n"));
    assert!(
        vague.is_empty(),
        "{} errors name no flag, file or setting:\n{}",
        vague.len(),
        vague.iter().take(30).cloned().collect::<Vec<_>>().join("\n")
    );
}
