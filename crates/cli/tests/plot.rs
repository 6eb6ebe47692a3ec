//! `resmem plot` end to end on tiny CPU runs: what the figures say (legends, colours, axis
//! extents, error bars, a log2 axis), the seed table of a sweep, PNG output, and a clear error
//! for every bad input.

use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn resmem(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_resmem")).args(args).output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

fn ok(args: &[&str]) -> String {
    let o = resmem(args);
    assert!(o.status.success(), "resmem {args:?} failed: {}", stderr(&o));
    stdout(&o)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Trains the tiny RMT on copy for 6 CPU steps at `lr`, evaluating at steps 3 and 6.
fn train(out: &Path, lr: &str) {
    ok(&[
        "train",
        "--backend",
        "cpu",
        "--preset",
        "tiny-rmt",
        "--task",
        "copy",
        "--steps",
        "6",
        "--eval-every",
        "3",
        "--lr",
        lr,
        "--out",
        s(out),
    ]);
}

/// Two runs that differ only in the learning rate: `a` at 0.001, `b` at 0.003.
fn two_runs(root: &Path) -> (PathBuf, PathBuf) {
    let (a, b) = (root.join("a"), root.join("b"));
    train(&a, "0.001");
    train(&b, "0.003");
    (a, b)
}

/// The final training loss a run logged.
fn final_loss(run: &Path) -> f64 {
    let text = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    last["loss"].as_f64().unwrap()
}

/// The self-closing or opening tags `<name …>` of an SVG.
fn tags<'a>(svg: &'a str, name: &str) -> Vec<&'a str> {
    let open = format!("<{name} ");
    svg.match_indices(&open)
        .map(|(i, _)| {
            let end = svg[i..].find('>').unwrap();
            &svg[i..i + end]
        })
        .collect()
}

fn attr<'a>(tag: &'a str, name: &str) -> &'a str {
    let key = format!(" {name}=\"");
    let start = tag.find(&key).unwrap_or_else(|| panic!("no {name} in {tag}")) + key.len();
    let len = tag[start..].find('"').unwrap();
    &tag[start..start + len]
}

fn num(tag: &str, name: &str) -> f64 {
    attr(tag, name).parse().unwrap()
}

/// Every text of an SVG with its y position.
fn texts(svg: &str) -> Vec<(String, f64)> {
    svg.match_indices("<text ")
        .map(|(i, _)| {
            let rest = &svg[i..];
            let open_end = rest.find('>').unwrap();
            let close = rest.find("</text>").unwrap();
            (
                rest[open_end + 1..close].trim().to_string(),
                num(&rest[..open_end], "y"),
            )
        })
        .collect()
}

/// The polylines as (stroke colour, points).
fn polylines(svg: &str) -> Vec<(String, Vec<(f64, f64)>)> {
    tags(svg, "polyline")
        .into_iter()
        .map(|t| {
            let points = attr(t, "points")
                .split_whitespace()
                .map(|p| {
                    let (x, y) = p.split_once(',').unwrap();
                    (x.parse().unwrap(), y.parse().unwrap())
                })
                .collect();
            (attr(t, "stroke").to_string(), points)
        })
        .collect()
}

/// The number after `from` … `to` for axis `axis` in `wrote …: N curves; x (AXIS) from A to B`.
fn x_extent(out: &str, axis: &str) -> (f64, f64) {
    let key = format!("x ({axis}) from ");
    let rest = &out[out.find(&key).unwrap_or_else(|| panic!("no `{key}` in {out}")) + key.len()..];
    let (a, rest) = rest.split_once(" to ").unwrap();
    let b = rest.split([',', ' ']).next().unwrap();
    (a.parse().unwrap(), b.parse().unwrap())
}

#[test]
fn curves_are_labelled_by_what_differs_and_axes_reach_the_last_step() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = two_runs(tmp.path());
    let fig = tmp.path().join("loss.svg");
    let out = ok(&["plot", s(&a), s(&b), "--x", "step", "--y", "loss", "--out", s(&fig)]);
    assert!(out.contains(&format!("wrote {}: 2 curves", fig.display())), "{out}");
    let svg = std::fs::read_to_string(&fig).unwrap();

    // The legend names the one setting that differs, and nothing else of the configs.
    let texts = texts(&svg);
    let legend: Vec<&(String, f64)> = texts.iter().filter(|(t, _)| t.contains('=')).collect();
    let names: Vec<&str> = legend.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(names, ["lr=0.001", "lr=0.003"], "{texts:?}");

    // Two curves of three logged steps each, in two colours, each shown in the legend beside
    // its label.
    let lines = polylines(&svg);
    let curves: Vec<&(String, Vec<(f64, f64)>)> = lines.iter().filter(|(_, p)| p.len() == 3).collect();
    assert_eq!(curves.len(), 2, "{lines:?}");
    assert_ne!(curves[0].0, curves[1].0, "the curves share a colour");
    let colour_of = |label: &str| {
        let y = legend.iter().find(|(t, _)| t == label).unwrap().1;
        let sample = lines
            .iter()
            // The grid's lines are black; a legend's sample is a short level line in colour.
            .find(|(c, p)| c != "#000000" && p.len() == 2 && p[0].1 == p[1].1 && (p[0].1 - y).abs() < 12.0)
            .unwrap_or_else(|| panic!("no legend line beside {label} at y {y}: {lines:?}"));
        sample.0.clone()
    };
    let (slow, fast) = (colour_of("lr=0.001"), colour_of("lr=0.003"));
    assert_ne!(slow, fast);
    let end_y = |colour: &str| curves.iter().find(|(c, _)| c == colour).unwrap().1[2].1;
    // The higher learning rate ends at the lower loss, so its curve ends lower on the page
    // (larger y).
    assert!(final_loss(&b) < final_loss(&a));
    assert!(end_y(&fast) > end_y(&slow), "lr=0.003 should end below lr=0.001");

    // Tokens: 6 steps of batch 32 × T 16; the first logged step is 1.
    let fig = tmp.path().join("tokens.svg");
    let out = ok(&["plot", s(&a), s(&b), "--x", "tokens", "--y", "loss", "--out", s(&fig)]);
    assert_eq!(x_extent(&out, "tokens"), (512.0, 6.0 * 32.0 * 16.0), "{out}");
    let svg = std::fs::read_to_string(&fig).unwrap();
    assert!(svg.contains("tokens (step × batch × T)"));

    // FLOPs: 3 × the forward FLOPs per token that `resmem count` gives, times the tokens.
    let count = ok(&[
        "count",
        "--arch",
        "rmt",
        "--preset",
        "tiny-rmt",
        "--seq-len",
        "16",
        "--vocab",
        "256",
        "--json",
    ]);
    let count: serde_json::Value = serde_json::from_str(&count).unwrap();
    let per_token = count["flops_fwd"].as_f64().unwrap() / 16.0;
    let fig = tmp.path().join("flops.svg");
    let out = ok(&["plot", s(&a), s(&b), "--x", "flops", "--y", "loss", "--out", s(&fig)]);
    let (lo, hi) = x_extent(&out, "flops");
    assert!((lo / (3.0 * per_token * 512.0) - 1.0).abs() < 1e-9, "{out}");
    assert!((hi / (3.0 * per_token * 3072.0) - 1.0).abs() < 1e-9, "{out}");
    assert!(std::fs::read_to_string(&fig).unwrap().contains("3× forward"));

    // Validation curves: the two evaluations of each run, with a dot at each.
    let fig = tmp.path().join("val.svg");
    let out = ok(&["plot", s(&a), s(&b), "--x", "step", "--y", "val_loss", "--out", s(&fig)]);
    assert_eq!(x_extent(&out, "step"), (3.0, 6.0), "{out}");
    let svg = std::fs::read_to_string(&fig).unwrap();
    assert_eq!(
        polylines(&svg)
            .iter()
            .filter(|(c, p)| c != "#000000" && p.len() == 2 && p[0].1 != p[1].1)
            .count(),
        2
    );
    assert!(tags(&svg, "circle").len() >= 4);
}

#[test]
fn wall_time_adds_the_segments_of_a_resumed_run() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a");
    train(&a, "0.001");
    // elapsed_s restarts at the resume after step 3: 1, 2 | 0.5, 1.5 → 1, 2, 2.5, 3.5.
    let rows = [(1, 1.0), (3, 2.0), (4, 0.5), (6, 1.5)].map(|(step, elapsed)| {
        json!({"step": step, "loss": 5.0, "lr": 0.001, "tokens_per_s": 1.0, "elapsed_s": elapsed}).to_string()
    });
    std::fs::write(a.join("metrics.jsonl"), rows.join("\n") + "\n").unwrap();
    let fig = tmp.path().join("time.svg");
    let out = ok(&["plot", s(&a), "--x", "time", "--y", "loss", "--out", s(&fig)]);
    assert!(out.contains("1 curve;"), "{out}");
    assert_eq!(x_extent(&out, "time"), (1.0, 3.5), "{out}");
    assert!(std::fs::read_to_string(&fig).unwrap().contains("wall time (s)"));
}

#[test]
fn a_png_is_a_png_of_the_figure_size() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = two_runs(tmp.path());
    let fig = tmp.path().join("figs").join("loss.png");
    ok(&[
        "plot",
        s(&a),
        s(&b),
        "--x",
        "step",
        "--y",
        "loss",
        "--out",
        s(&fig),
        "--title",
        "two rates",
    ]);
    let png = std::fs::read(&fig).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(&png[12..16], b"IHDR");
    let be = |i: usize| u32::from_be_bytes(png[i..i + 4].try_into().unwrap());
    assert_eq!((be(16), be(20)), (1024, 640));
    // A blank white page compresses to a few kB; curves, text and a grid do not.
    assert!(png.len() > 20_000, "{} bytes: is anything drawn?", png.len());
}

/// A sweep directory over real runs: d_k 4, 8, 32 × seeds 0, 1 of an `rmt` variant, one
/// `transformer` point, one point without a final loss and one failed point (seed 0 points
/// at run `a`, seed 1 at `b`).
fn sweep(root: &Path) -> PathBuf {
    let dir = root.join("sweep");
    std::fs::create_dir_all(&dir).unwrap();
    train(&dir.join("a"), "0.001");
    train(&dir.join("b"), "0.003");
    let point = |d_k: u32, seed: u32, variant: &str, status: &str, fin: Option<f64>, best: Option<f64>| {
        json!({
            "dir": if seed == 0 { "a" } else { "b" },
            "label": format!("d_k={d_k} seed={seed} variant={variant}"),
            "settings": {"d_k": d_k, "seed": seed, "variant": variant},
            "status": status, "params": 1000, "flops_per_token": 2000.0, "tokens": 3072,
            "final_val_loss": fin, "best_val_loss": best, "wall_s": 1.5,
        })
    };
    let summary = json!({
        "experiment": "d_k sweep",
        "swept": ["d_k", "variant"],
        "points": [
            point(4, 0, "rmt", "done", Some(5.1), Some(5.0)),
            point(4, 1, "rmt", "done", Some(5.3), Some(5.2)),
            point(8, 0, "rmt", "done", Some(4.9), Some(4.8)),
            point(8, 1, "rmt", "done", Some(4.95), Some(4.9)),
            point(32, 0, "rmt", "done", Some(4.6), Some(4.5)),
            point(32, 1, "rmt", "done", Some(4.8), Some(4.7)),
            point(4, 0, "transformer", "done", Some(5.5), Some(5.4)),
            point(8, 0, "transformer", "done", None, Some(5.3)),
            point(16, 0, "rmt", "failed", None, None),
        ],
    });
    std::fs::write(
        dir.join("summary.json"),
        serde_json::to_string_pretty(&summary).unwrap(),
    )
    .unwrap();
    dir
}

/// The table rows as (group, value, seeds, mean, min, max).
fn table(out: &str) -> Vec<(String, String, usize, f64, f64, f64)> {
    out.lines()
        .skip(1)
        .take_while(|l| !l.starts_with("wrote"))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 6, "{l}");
            let n = |i: usize| f[i].parse::<f64>().unwrap();
            (f[0].into(), f[1].into(), f[2].parse().unwrap(), n(3), n(4), n(5))
        })
        .collect()
}

#[test]
fn a_sweep_plots_seed_means_with_min_max_bars_on_a_log2_axis() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = sweep(tmp.path());
    let fig = tmp.path().join("dk.svg");
    let o = resmem(&["plot", s(&dir), "--x", "d_k", "--y", "val_loss", "--out", s(&fig)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (out, err) = (stdout(&o), stderr(&o));
    assert!(
        out.lines()
            .next()
            .unwrap()
            .split_whitespace()
            .eq(["group", "d_k", "seeds", "mean", "min", "max"]),
        "{out}"
    );
    // The rows: the mean, min and max over seeds of what the summary says.
    let want = [
        ("variant=rmt", "4", 2, 5.2, 5.1, 5.3),
        ("variant=rmt", "8", 2, 4.925, 4.9, 4.95),
        ("variant=rmt", "32", 2, 4.7, 4.6, 4.8),
        ("variant=transformer", "4", 1, 5.5, 5.5, 5.5),
    ];
    let rows = table(&out);
    assert_eq!(rows.len(), want.len(), "{out}");
    for (row, w) in rows.iter().zip(want) {
        assert_eq!((row.0.as_str(), row.1.as_str(), row.2), (w.0, w.1, w.2), "{out}");
        for (got, want) in [(row.3, w.3), (row.4, w.4), (row.5, w.5)] {
            assert!((got - want).abs() < 1e-4, "{got} vs {want} in {out}");
        }
    }
    assert!(
        out.contains(&format!("wrote {}: 2 lines, 4 points", fig.display())),
        "{out}"
    );
    // What was left out, and why.
    assert!(
        err.contains("d_k=16 seed=0 variant=rmt") && err.contains("failed"),
        "{err}"
    );
    assert!(
        err.contains("d_k=8 seed=0 variant=transformer") && err.contains("final_val_loss"),
        "{err}"
    );

    let svg = std::fs::read_to_string(&fig).unwrap();
    // Error bars: a vertical line in a series colour at each (group, d_k); zero length where
    // there is one seed.
    let bars: Vec<(f64, f64)> = tags(&svg, "line")
        .into_iter()
        .filter(|t| attr(t, "stroke") != "#000000" && num(t, "x1") == num(t, "x2"))
        .map(|t| (num(t, "x1"), (num(t, "y2") - num(t, "y1")).abs()))
        .collect();
    assert_eq!(bars.len(), 4, "{bars:?}");
    assert_eq!(bars.iter().filter(|b| b.1 > 0.0).count(), 3, "{bars:?}");
    // log2: 4 → 8 is one doubling, 8 → 32 two, so the second gap is twice the first.
    let mut xs: Vec<f64> = bars.iter().map(|b| b.0).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    assert_eq!(xs.len(), 3, "{xs:?}");
    let ratio = (xs[2] - xs[1]) / (xs[1] - xs[0]);
    assert!((ratio - 2.0).abs() < 0.05, "gaps {xs:?} are not on a log2 axis");
    let labels: Vec<String> = texts(&svg).into_iter().map(|t| t.0).collect();
    for want in [
        "4",
        "8",
        "32",
        "d_k (log scale)",
        "variant=rmt",
        "variant=transformer",
        "d_k sweep",
    ] {
        assert!(labels.iter().any(|l| l == want), "no text {want} in {labels:?}");
    }

    // String settings are categories in order of appearance; best_val_loss is accepted.
    let fig = tmp.path().join("variant.png");
    let out = ok(&[
        "plot",
        s(&dir),
        "--x",
        "variant",
        "--y",
        "best_val_loss",
        "--out",
        s(&fig),
    ]);
    let rows = table(&out);
    let row = rows.iter().find(|r| r.0 == "d_k=8" && r.1 == "transformer").unwrap();
    assert_eq!((row.2, row.3), (1, 5.3), "{out}");
    let row = rows.iter().find(|r| r.0 == "d_k=32" && r.1 == "rmt").unwrap();
    assert!((row.3 - 4.6).abs() < 1e-9 && row.4 == 4.5 && row.5 == 4.7, "{out}");

    // Curves of a sweep: its finished runs, each once.
    let fig = tmp.path().join("curves.svg");
    let out = ok(&["plot", s(&dir), s(&dir), "--x", "step", "--y", "loss", "--out", s(&fig)]);
    assert!(out.contains("2 curves"), "{out}");
    let svg = std::fs::read_to_string(&fig).unwrap();
    let labels: Vec<String> = texts(&svg).into_iter().map(|t| t.0).collect();
    assert!(labels.iter().any(|l| l == "lr=0.001"), "{labels:?}");
}

/// Runs `args`, expects a failure whose message has every one of `words`.
fn fails(args: &[&str], words: &[&str]) {
    let o = resmem(args);
    let err = stderr(&o);
    assert!(!o.status.success(), "resmem {args:?} succeeded:\n{}", stdout(&o));
    assert!(!err.contains("panicked"), "resmem {args:?} panicked: {err}");
    for w in words {
        assert!(err.contains(w), "resmem {args:?}: `{w}` not in: {err}");
    }
}

#[test]
fn bad_inputs_are_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path();
    let a = root.join("a");
    train(&a, "0.001");
    let fig = root.join("f.svg");
    let fig = s(&fig);

    // A PATH given twice is one curve, not an error.
    let out = ok(&["plot", s(&a), s(&a), "--x", "step", "--y", "loss", "--out", fig]);
    assert!(out.contains("1 curve;"), "{out}");

    let empty = root.join("empty");
    std::fs::create_dir(&empty).unwrap();
    fails(
        &["plot", s(&empty), "--x", "step", "--y", "loss", "--out", fig],
        &["empty", "neither a run directory", "nor a sweep directory"],
    );
    fails(
        &[
            "plot",
            s(&root.join("missing")),
            "--x",
            "step",
            "--y",
            "loss",
            "--out",
            fig,
        ],
        &["missing", "does not exist"],
    );
    fails(
        &["plot", s(&a), "--x", "step", "--y", "loss", "--out", "f.pdf"],
        &["f.pdf", ".png", ".svg"],
    );

    // A run that has logged nothing.
    let fresh = root.join("fresh");
    std::fs::create_dir(&fresh).unwrap();
    std::fs::copy(a.join("config.toml"), fresh.join("config.toml")).unwrap();
    std::fs::write(fresh.join("metrics.jsonl"), "").unwrap();
    fails(
        &["plot", s(&a), s(&fresh), "--x", "step", "--y", "loss", "--out", fig],
        &["fresh", "no metrics rows"],
    );

    // A run that never evaluated.
    let noval = root.join("noval");
    std::fs::create_dir(&noval).unwrap();
    std::fs::copy(a.join("config.toml"), noval.join("config.toml")).unwrap();
    let rows: Vec<String> = std::fs::read_to_string(a.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let mut row: serde_json::Value = serde_json::from_str(l).unwrap();
            row.as_object_mut().unwrap().remove("val_loss");
            row.to_string() + "\n"
        })
        .collect();
    std::fs::write(noval.join("metrics.jsonl"), rows.concat()).unwrap();
    fails(
        &["plot", s(&a), s(&noval), "--x", "step", "--y", "val_loss", "--out", fig],
        &[s(&noval), "no val_loss rows", "--y loss", "--eval-every"],
    );

    // A setting no sweep has: the error lists the ones they have.
    let dir = sweep(root);
    fails(
        &["plot", s(&dir), "--x", "width", "--y", "val_loss", "--out", fig],
        &["width", "d_k, seed, variant"],
    );
    fails(
        &["plot", s(&a), "--x", "width", "--y", "loss", "--out", fig],
        &["width", "step, tokens, flops or time"],
    );
    fails(
        &["plot", s(&dir), s(&a), "--x", "d_k", "--y", "val_loss", "--out", fig],
        &["is a run directory", "--x step"],
    );
    fails(
        &["plot", s(&dir), "--x", "d_k", "--y", "loss", "--out", fig],
        &["--y val_loss"],
    );
    fails(
        &["plot", s(&a), "--x", "step", "--y", "best_val_loss", "--out", fig],
        &["best_val_loss", "--x d_k"],
    );
    let broken = root.join("broken");
    std::fs::create_dir(&broken).unwrap();
    std::fs::write(broken.join("summary.json"), "{\"points\": 3}").unwrap();
    fails(
        &["plot", s(&broken), "--x", "d_k", "--y", "val_loss", "--out", fig],
        &["summary.json", "not a sweep summary"],
    );
}

#[test]
fn runs_of_two_architectures_are_labelled_by_arch_not_by_its_dimensions() {
    let tmp = tempfile::tempdir().unwrap();
    let (rmt, transformer) = (tmp.path().join("r"), tmp.path().join("t"));
    train(&rmt, "0.001");
    ok(&[
        "train",
        "--backend",
        "cpu",
        "--preset",
        "tiny-transformer",
        "--task",
        "copy",
        "--steps",
        "6",
        "--eval-every",
        "3",
        "--lr",
        "0.001",
        "--out",
        s(&transformer),
    ]);
    let fig = tmp.path().join("arch.svg");
    ok(&[
        "plot",
        s(&rmt),
        s(&transformer),
        "--x",
        "flops",
        "--y",
        "val_loss",
        "--out",
        s(&fig),
    ]);
    let svg = std::fs::read_to_string(&fig).unwrap();
    let legend: Vec<String> = texts(&svg)
        .into_iter()
        .map(|t| t.0)
        .filter(|t| t.contains("arch="))
        .collect();
    assert_eq!(legend.len(), 2, "{legend:?}");
    assert!(
        legend[0].starts_with("arch=rmt") && legend[1].starts_with("arch=transformer"),
        "{legend:?}"
    );
    // d_k and d_model only change with the architecture: the arch already says them.
    for dim in ["d_k=", "d_model=", "n_heads="] {
        assert!(legend.iter().all(|l| !l.contains(dim)), "{legend:?}");
    }
}

/// `--x comparison`: each declared comparison of a sweep's summary as a labelled row, coloured
/// by its verdict (blue where a is better, grey where the interval does not say); a summary
/// with none is refused with what to declare.
#[test]
fn declared_comparisons_are_drawn_as_intervals() {
    let tmp = tempfile::tempdir().unwrap();
    let sweep = tmp.path().join("s");
    std::fs::create_dir_all(&sweep).unwrap();
    let metric = |low: f64, high: f64, verdict: &str| {
        serde_json::json!({"metric": "final_val_loss", "statistic": "a - b", "method": "t",
            "per_seed": [low, high], "estimate": (low + high) / 2.0, "sd": 0.1, "low": low, "high": high,
            "verdict": verdict, "seeds_for_power": 4, "noisy": false})
    };
    let summary = serde_json::json!({
        "experiment": "e", "swept": [], "points": [],
        "comparisons": [
            {"a": "rmt", "b": "transformer", "metrics": [metric(-0.3, -0.1, "a better")]},
            {"a": "d_k=8", "b": "d_k=4", "metrics": [metric(-0.2, 0.1, "not resolved")]},
        ]
    });
    std::fs::write(sweep.join("summary.json"), summary.to_string()).unwrap();
    let svg = tmp.path().join("c.svg");
    let plot = || {
        Command::new(env!("CARGO_BIN_EXE_resmem"))
            .args([
                "plot",
                sweep.to_str().unwrap(),
                "--x",
                "comparison",
                "--y",
                "val_loss",
                "--out",
            ])
            .arg(&svg)
            .output()
            .unwrap()
    };
    let out = plot();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.contains("rmt − transformer") && text.contains("d_k=8 − d_k=4"),
        "labels"
    );
    assert!(text.contains("#1F77B4"), "the resolved row is blue");
    assert!(text.contains("#808080"), "the unresolved row is grey");
    std::fs::write(sweep.join("summary.json"), r#"{"swept": [], "points": []}"#).unwrap();
    let out = plot();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("declare [[compare]]"), "{err}");
}

/// `--y mixing_gain` draws a hyper-connected run's composite gain at each evaluation, as its
/// log₁₀ (the metrics' value: mHC's stays at 10⁰), and refuses a run that never logged one.
#[test]
fn the_mixing_gain_is_plotted_for_hyper_connections_only() {
    let root = tempfile::tempdir().unwrap();
    let hc = root.path().join("hc");
    ok(&[
        "train",
        "--backend",
        "cpu",
        "--arch",
        "hc",
        "--steps",
        "6",
        "--eval-every",
        "3",
        "--out",
        s(&hc),
    ]);
    let logged: Vec<f64> = std::fs::read_to_string(hc.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["mixing_gain"][0].as_f64())
        .collect();
    assert_eq!(logged.len(), 2, "a gain at steps 3 and 6");
    let out = root.path().join("gain.svg");
    ok(&["plot", s(&hc), "--x", "step", "--y", "mixing_gain", "--out", s(&out)]);
    let svg = std::fs::read_to_string(&out).unwrap();
    assert!(
        texts(&svg).iter().any(|(t, _)| t.contains("composite gain")),
        "no axis names the gain"
    );
    let points: Vec<(f64, f64)> = polylines(&svg).into_iter().flat_map(|(_, p)| p).collect();
    assert!(!points.is_empty(), "no curve");
    let rmt = root.path().join("rmt");
    train(&rmt, "0.001");
    let o = resmem(&["plot", s(&rmt), "--x", "step", "--y", "mixing_gain", "--out", s(&out)]);
    assert!(
        !o.status.success() && stderr(&o).contains("only hyper-connected models"),
        "{}",
        stderr(&o)
    );
    assert!(
        logged.iter().all(|g| (g - 1.0).abs() < 1e-4),
        "mHC's forward gain: {logged:?}"
    );
}
