//! `resmem plot` end to end on tiny CPU runs: what the figures say (legends, colours, axis
//! extents, error bars, a log2 axis), the seed table of a sweep, PNG output, and a clear error
//! for every bad input.

mod common;

use common::{ok, resmem, s, stderr, stdout};
use serde_json::json;
use std::path::{Path, PathBuf};

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

/// Every text of an SVG, unescaped, with its x and y positions.
fn texts_at(svg: &str) -> Vec<(String, f64, f64)> {
    svg.match_indices("<text ")
        .map(|(i, _)| {
            let rest = &svg[i..];
            let open_end = rest.find('>').unwrap();
            let close = rest.find("</text>").unwrap();
            let open = &rest[..open_end];
            let text = rest[open_end + 1..close]
                .trim()
                .replace("&apos;", "'")
                .replace("&quot;", "\"")
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&amp;", "&");
            (text, num(open, "x"), num(open, "y"))
        })
        .collect()
}

/// A polyline: its stroke colour, stroke width and points.
type Stroke = (String, f64, Vec<(f64, f64)>);

fn strokes(svg: &str) -> Vec<Stroke> {
    let widths = tags(svg, "polyline").into_iter().map(|t| num(t, "stroke-width"));
    polylines(svg)
        .into_iter()
        .zip(widths)
        .map(|((c, p), w)| (c, w, p))
        .collect()
}

/// The level bars of stroke width `width` in a colour (not black, not the key's dark grey),
/// as (colour, left x, right x, y).
fn bars(svg: &str, width: f64) -> Vec<(String, f64, f64, f64)> {
    strokes(svg)
        .into_iter()
        .filter(|(c, w, p)| {
            *w == width && c != "#000000" && c != "#404040" && p.len() == 2 && p[0].1 == p[1].1 && p[0].0 != p[1].0
        })
        .map(|(c, _, p)| (c, p[0].0.min(p[1].0), p[0].0.max(p[1].0), p[0].1))
        .collect()
}

/// The smallest and largest of `values`.
fn span(values: impl Iterator<Item = f64>) -> (f64, f64) {
    values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| (lo.min(v), hi.max(v)))
}

/// The filled circles as (fill colour, x, y).
fn dots(svg: &str) -> Vec<(String, f64, f64)> {
    tags(svg, "circle")
        .into_iter()
        .filter(|t| attr(t, "fill") != "none")
        .map(|t| (attr(t, "fill").to_string(), num(t, "cx"), num(t, "cy")))
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
/// at run `a`, seed 1 at `b`). Each test loss is its final validation loss less 0.5.
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
            "test_loss": fin.map(|f| f - 0.5), "test_tokens": 8192, "device": "cpu",
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
    // The test loss is one number per run, never a curve; the tuning loss is --x tuning's.
    fails(
        &["plot", s(&a), "--x", "step", "--y", "test_loss", "--out", fig],
        &["one number per finished run", "--x d_k", "--x comparison"],
    );
    fails(
        &["plot", s(&dir), "--x", "d_k", "--y", "tuning_loss", "--out", fig],
        &["--x tuning"],
    );
    fails(
        &["plot", s(&dir), "--x", "tuning", "--y", "tuning_loss", "--out", fig],
        &["no sweep", "has a tuning", "[tune]"],
    );
    fails(
        &[
            "plot",
            s(&dir),
            s(&a),
            "--x",
            "tuning",
            "--y",
            "tuning_loss",
            "--out",
            fig,
        ],
        &["is a run directory"],
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

/// `--x comparison`: each declared comparison of a sweep's summary (its directory, or the
/// summary file) as a labelled row, coloured by its verdict (blue where a is better, grey where
/// the interval does not say); a summary with none is refused with what to declare.
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
        resmem(&[
            "plot",
            s(&sweep),
            "--x",
            "comparison",
            "--y",
            "val_loss",
            "--out",
            s(&svg),
        ])
    };
    let out = plot();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.contains("rmt − transformer") && text.contains("d_k=8 − d_k=4"),
        "labels"
    );
    // Each row's 95% bar in its verdict's colour: the key beside the chart holds every colour,
    // so the bars are what say it.
    let colours: Vec<String> = bars(&text, 3.0).into_iter().map(|b| b.0).collect();
    assert!(
        colours.iter().any(|c| c == "#1F77B4"),
        "the resolved row is blue: {colours:?}"
    );
    assert!(
        colours.iter().any(|c| c == "#808080"),
        "the unresolved row is grey: {colours:?}"
    );
    // The summary kept as a file elsewhere (docs/experiments/NAME.json) draws the same figure.
    let kept = tmp.path().join("kept.json");
    std::fs::copy(sweep.join("summary.json"), &kept).unwrap();
    let again = tmp.path().join("again.svg");
    ok(&[
        "plot",
        s(&kept),
        "--x",
        "comparison",
        "--y",
        "val_loss",
        "--out",
        s(&again),
    ]);
    assert_eq!(
        std::fs::read_to_string(&again).unwrap(),
        text,
        "a summary file and its sweep directory"
    );
    // These comparisons have no test_loss: the error names the loss they have.
    let o = resmem(&[
        "plot",
        sweep.to_str().unwrap(),
        "--x",
        "comparison",
        "--y",
        "test_loss",
        "--out",
        svg.to_str().unwrap(),
    ]);
    assert!(
        !o.status.success() && stderr(&o).contains("give --y val_loss"),
        "{}",
        stderr(&o)
    );
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

/// `--y test_loss` against a setting: each point's final model on the test slice, the mean and
/// min..max over seeds as for the validation loss; a point without one is left out, and said.
#[test]
fn test_losses_are_plotted_against_a_setting() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = sweep(tmp.path());
    let fig = tmp.path().join("test.svg");
    let o = resmem(&["plot", s(&dir), "--x", "d_k", "--y", "test_loss", "--out", s(&fig)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    // The fixture's test losses are its final validation losses less 0.5.
    let want = [
        ("variant=rmt", "4", 2, 4.7, 4.6, 4.8),
        ("variant=rmt", "8", 2, 4.425, 4.4, 4.45),
        ("variant=rmt", "32", 2, 4.2, 4.1, 4.3),
        ("variant=transformer", "4", 1, 5.0, 5.0, 5.0),
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
        stderr(&o).contains("d_k=8 seed=0 variant=transformer") && stderr(&o).contains("test_loss"),
        "{}",
        stderr(&o)
    );
    let svg = std::fs::read_to_string(&fig).unwrap();
    let labels: Vec<String> = texts(&svg).into_iter().map(|t| t.0).collect();
    assert!(
        labels.iter().any(|l| l == "test loss (final model, test slice)"),
        "{labels:?}"
    );
    // The legend sits right of the data: every group's label right of every bar.
    let texts = texts_at(&svg);
    let right = tags(&svg, "line")
        .into_iter()
        .filter(|t| attr(t, "stroke") != "#000000")
        .map(|t| num(t, "x1").max(num(t, "x2")))
        .fold(f64::NEG_INFINITY, f64::max);
    for group in ["variant=rmt", "variant=transformer"] {
        let x = texts.iter().find(|t| t.0 == group).unwrap().1;
        assert!(x > right, "{group} at x {x}, on the data (up to {right})");
    }
}

/// `--x comparison --y test_loss`: each comparison's test_loss interval coloured by its verdict,
/// a sequential one's repeated interval as a thin bar around its 95% bar (as much wider as it
/// is) with its look in the label, Holm's verdict naming the better arm where the family has 2
/// tests or more, the trends in a panel below, and a key right of the chart saying what each
/// colour means. `--y val_loss` draws the final validation loss's intervals instead.
#[test]
fn comparisons_show_test_loss_sequential_looks_holm_trends_and_a_key() {
    let tmp = tempfile::tempdir().unwrap();
    let sweep = tmp.path().join("s");
    std::fs::create_dir_all(&sweep).unwrap();
    let metric = |name: &str, per_seed: [f64; 3], low: f64, high: f64, verdict: &str| {
        json!({"metric": name, "statistic": "a - b", "method": "t", "per_seed": per_seed,
            "estimate": per_seed.iter().sum::<f64>() / 3.0, "sd": 0.05, "low": low, "high": high,
            "verdict": verdict, "seeds_for_power": 4, "noisy": false, "p": 0.01})
    };
    let mut first = metric("test_loss", [-0.3, -0.2, -0.25], -0.35, -0.15, "a better");
    // The repeated interval is twice as wide as the 95% one.
    first["sequential"] = json!({"boundary": "O'Brien–Fleming", "looks": [3, 6], "z_boundaries": [2.797, 1.977],
        "z_seen": [4.2], "stopped_at": 1, "seeds": 3, "resolved": true, "low": -0.45, "high": -0.05,
        "verdict": "a better", "repeated_p": 0.003});
    first["holm"] = json!({"family": 3, "p": 0.02, "verdict": "a better"});
    let mut second = metric("test_loss", [0.2, 0.3, 0.25], 0.1, 0.4, "b better");
    second["holm"] = json!({"family": 3, "p": 0.09, "verdict": "not resolved"});
    let mut slope = metric("test_loss", [-0.05, -0.04, -0.06], -0.07, -0.03, "decreasing");
    slope["statistic"] = json!("slope per doubling of d_k");
    slope["holm"] = json!({"family": 3, "p": 0.03, "verdict": "decreasing"});
    let summary = json!({
        "experiment": "decisions", "swept": ["d_k"], "points": [],
        "comparisons": [
            {"a": "rmt", "b": "transformer",
             "metrics": [first, metric("final_val_loss", [-0.1, 0.1, 0.0], -0.2, 0.2, "not resolved")]},
            {"a": "d_k=8", "b": "d_k=4", "metrics": [second]},
        ],
        "trends": [{"axis": "d_k", "select": null, "scale": "log2", "claim": null, "values": [4.0, 8.0, 32.0],
            "seeds": ["0", "1", "2"], "result": slope}],
    });
    std::fs::write(sweep.join("summary.json"), summary.to_string()).unwrap();
    let fig = tmp.path().join("c.svg");
    let out = ok(&[
        "plot",
        s(&sweep),
        "--x",
        "comparison",
        "--y",
        "test_loss",
        "--out",
        s(&fig),
    ]);
    assert!(out.contains("2 comparisons, 1 trend"), "{out}");
    let svg = std::fs::read_to_string(&fig).unwrap();
    let texts = texts_at(&svg);
    let text = |t: &str| {
        texts
            .iter()
            .find(|x| x.0 == t)
            .cloned()
            .unwrap_or_else(|| panic!("no text `{t}` in {texts:?}"))
    };
    // The labels, with their looks and Holm's verdicts under them.
    for t in [
        "rmt − transformer",
        "look 1 of 2, 3 seeds, Holm: rmt better",
        "d_k=8 − d_k=4",
        "Holm: not resolved",
        "slope along d_k",
        "per doubling of d_k, Holm: decreasing",
    ] {
        text(t);
    }
    // Each row's 95% bar is level with its label, in its verdict's colour.
    let thick = bars(&svg, 3.0);
    let bar_at = |label: &str| {
        let y = text(label).2;
        thick
            .iter()
            .filter(|b| (b.3 - y).abs() < 16.0)
            .min_by(|a, b| (a.3 - y).abs().total_cmp(&(b.3 - y).abs()))
            .cloned()
            .unwrap_or_else(|| panic!("no bar beside {label}: {thick:?}"))
    };
    let (blue, orange, grey) = ("#1F77B4", "#FF7F0E", "#808080");
    let rmt = bar_at("rmt − transformer");
    assert_eq!(rmt.0, blue);
    let dk = bar_at("d_k=8 − d_k=4");
    assert_eq!(dk.0, orange);
    let trend = bar_at("slope along d_k");
    assert_eq!(trend.0, blue, "a decreasing trend is below 0");
    assert!(
        trend.3 > dk.3 + 60.0,
        "the trend is in its own panel below the comparisons"
    );
    // The repeated interval: a thin bar on the sequential row alone, around its 95% bar and
    // twice as wide.
    let thin = bars(&svg, 1.0);
    assert_eq!(thin.len(), 1, "only the sequential comparison has one: {thin:?}");
    let r = &thin[0];
    assert!(
        (r.3 - rmt.3).abs() < 1.0 && r.1 < rmt.1 && r.2 > rmt.2,
        "{r:?} around {rmt:?}"
    );
    let ratio = (r.2 - r.1) / (rmt.2 - rmt.1);
    assert!((ratio - 2.0).abs() < 0.1, "repeated / 95% width {ratio}");
    // The key: each colour's swatch beside what it means, right of all the data.
    let swatch = |label: &str| {
        let (_, x, y) = text(label);
        tags(&svg, "rect")
            .into_iter()
            .find(|t| num(t, "x") < x && (num(t, "y") + num(t, "height") / 2.0 - y).abs() < 8.0)
            .map(|t| attr(t, "fill").to_string())
            .unwrap_or_else(|| panic!("no swatch beside {label}"))
    };
    assert_eq!(swatch("a better / decreasing"), blue);
    assert_eq!(swatch("b better / increasing"), orange);
    assert_eq!(swatch("not resolved"), grey);
    assert!(texts.iter().any(|t| t.0.starts_with("repeated interval")), "{texts:?}");
    let right = thick.iter().chain(&thin).map(|b| b.2).fold(f64::NEG_INFINITY, f64::max);
    for label in ["mean over seeds", "95% interval", "not resolved"] {
        assert!(text(label).1 > right, "the key's {label} is on the data");
    }

    // --y val_loss: the final validation loss's interval (not resolved); the second comparison
    // has none and is left out, and said; the look and Holm belong to test_loss, as the trend.
    let o = resmem(&[
        "plot",
        s(&sweep),
        "--x",
        "comparison",
        "--y",
        "val_loss",
        "--out",
        s(&fig),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("d_k=8 − d_k=4") && stderr(&o).contains("final_val_loss"),
        "{}",
        stderr(&o)
    );
    let svg = std::fs::read_to_string(&fig).unwrap();
    let texts: Vec<String> = texts_at(&svg).into_iter().map(|t| t.0).collect();
    assert!(texts.iter().any(|t| t == "rmt − transformer"), "{texts:?}");
    for gone in [
        "d_k=8 − d_k=4",
        "slope along d_k",
        "look 1 of 2, 3 seeds, Holm: rmt better",
    ] {
        assert!(!texts.iter().any(|t| t == gone), "{gone} in {texts:?}");
    }
    let colours: Vec<String> = bars(&svg, 3.0).into_iter().map(|b| b.0).collect();
    assert_eq!(colours, [grey]);
    assert!(bars(&svg, 1.0).is_empty());
    fails(
        &["plot", s(&sweep), "--x", "comparison", "--y", "loss", "--out", s(&fig)],
        &["--y test_loss", "--y val_loss"],
    );
}

/// `--x tuning`: per arm a colour, each seed's tuning loss a cross (a failed seed left out), the
/// means dots joined by a line on a log axis of the tuned setting, the fitted parabola dashed
/// over [low, high] and lowest at the chosen value, which a star marks; an arm without a fit has
/// no dashes, its star on its chosen mean. Only `--y tuning_loss`, and one numeric setting.
#[test]
fn the_tuning_is_drawn_on_a_log_axis_with_its_fit_and_choice() {
    let tmp = tempfile::tempdir().unwrap();
    let sweep = tmp.path().join("s");
    std::fs::create_dir_all(&sweep).unwrap();
    let row = |lr: &str, per_seed: serde_json::Value, mean: Option<f64>| json!({"settings": [["lr", lr]], "dirs": [], "per_seed": per_seed, "mean": mean});
    // loss = a + b·x + c·x², x = ln lr: lowest, 2.0, at lr = 10^-1.5, halfway from 0.01 to 0.1.
    let (c, x_min) = (0.2, 10f64.powf(-1.5).ln());
    let (b, a) = (-2.0 * c * x_min, 2.0 + c * x_min * x_min);
    let tuning = |rmt_rows: serde_json::Value| {
        json!({
            "experiment": "tuned", "swept": [], "points": [],
            "tuning": [
                {"arm": "variant=rmt", "rows": rmt_rows, "chosen": [["lr", "0.0316"]], "at_edge": false,
                 "widened": [], "fit": {"setting": "lr", "low": 0.001, "high": 0.1, "points": 9, "a": a, "b": b,
                 "c": c, "minimum": 0.0316, "fitted_loss": 2.0, "convex": true}},
                {"arm": "variant=transformer", "chosen": [["lr", "0.01"]], "at_edge": true, "fit": null,
                 "rows": [row("0.001", json!([3.5, null, 3.3]), None), row("0.01", json!([2.9, 3.0, 3.1]), Some(3.0)),
                          row("0.1", json!([3.2, 3.3, 3.4]), Some(3.3))]},
            ]
        })
        .to_string()
    };
    let rmt_rows = json!([
        row("0.001", json!([3.0, 3.2, 3.1]), Some(3.1)),
        row("0.01", json!([2.0, 2.2, 2.1]), Some(2.1)),
        row("0.1", json!([2.6, 2.8, 2.7]), Some(2.7)),
    ]);
    std::fs::write(sweep.join("summary.json"), tuning(rmt_rows)).unwrap();
    let fig = tmp.path().join("t.svg");
    let out = ok(&[
        "plot",
        s(&sweep),
        "--x",
        "tuning",
        "--y",
        "tuning_loss",
        "--out",
        s(&fig),
    ]);
    assert!(out.contains("2 arms tuned over lr"), "{out}");
    let svg = std::fs::read_to_string(&fig).unwrap();
    let texts = texts_at(&svg);
    let (blue, orange) = ("#1F77B4", "#FF7F0E");
    // The legend's left edge: the data lie left of it.
    let legend_x = texts
        .iter()
        .find(|t| t.0 == "variant=rmt: lr=0.0316")
        .unwrap_or_else(|| panic!("no legend entry for rmt: {texts:?}"))
        .1;
    let means = |colour: &str| {
        let mut d: Vec<(f64, f64)> = dots(&svg)
            .into_iter()
            .filter(|d| d.0 == colour && d.1 < legend_x - 30.0)
            .map(|d| (d.1, d.2))
            .collect();
        d.sort_by(|p, q| p.0.total_cmp(&q.0));
        d
    };
    let rmt = means(blue);
    assert_eq!(rmt.len(), 3, "{rmt:?}");
    let xs = [rmt[0].0, rmt[1].0, rmt[2].0];
    // 0.001, 0.01, 0.1: equal steps on a log axis.
    assert!(
        ((xs[1] - xs[0]) - (xs[2] - xs[1])).abs() <= 1.5,
        "{xs:?} is not a log axis"
    );
    // A lower loss is lower on the page: 2.1 (0.01) below 2.7 (0.1) below 3.1 (0.001).
    assert!(rmt[1].1 > rmt[2].1 && rmt[2].1 > rmt[0].1, "{rmt:?}");
    // The transformer has no mean at 0.001 (a seed failed), and so no dot there.
    let transformer = means(orange);
    let txs: Vec<f64> = transformer.iter().map(|d| d.0).collect();
    assert!(
        txs.len() == 2 && (txs[0] - xs[1]).abs() < 1.0 && (txs[1] - xs[2]).abs() < 1.0,
        "{txs:?} against {xs:?}"
    );
    // Its crosses: two seeds at 0.001 (one failed), three at each other value.
    let crosses: Vec<f64> = tags(&svg, "line")
        .into_iter()
        .filter(|t| attr(t, "stroke") == orange && num(t, "x1") < num(t, "x2") && num(t, "y1") < num(t, "y2"))
        .map(|t| (num(t, "x1") + num(t, "x2")) / 2.0)
        .collect();
    for (x, want) in xs.iter().zip([2, 3, 3]) {
        let n = crosses.iter().filter(|c| (*c - x).abs() < 1.5).count();
        assert_eq!(n, want, "crosses at x {x}: {crosses:?}");
    }
    // The fit: short dashes in rmt's colour over [0.001, 0.1], lowest halfway from 0.01 to 0.1.
    let dashes: Vec<Vec<(f64, f64)>> = strokes(&svg)
        .into_iter()
        .filter(|(c, w, p)| {
            let len: f64 = p.windows(2).map(|w| (w[1].0 - w[0].0).hypot(w[1].1 - w[0].1)).sum();
            *w == 2.0 && c == blue && len < 12.0 && p[0].0 < legend_x - 30.0
        })
        .map(|(_, _, p)| p)
        .collect();
    assert!(dashes.len() > 5, "no dashed fit: {dashes:?}");
    let points: Vec<(f64, f64)> = dashes.into_iter().flatten().collect();
    assert!(points.iter().all(|p| p.0 >= xs[0] - 1.0 && p.0 <= xs[2] + 1.0));
    // The curve is flat at its bottom: the middle of the points within a pixel of it.
    let bottom = points.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
    let flat = span(points.iter().filter(|p| p.1 >= bottom - 1.0).map(|p| p.0));
    let lowest = ((flat.0 + flat.1) / 2.0, bottom);
    let half = (xs[1] + xs[2]) / 2.0;
    assert!(
        (lowest.0 - half).abs() < 8.0,
        "the fit is lowest at x {}, not {half}",
        lowest.0
    );
    assert!(
        !strokes(&svg).iter().any(|(c, w, p)| *w == 2.0
            && c == orange
            && p.len() >= 2
            && p[0].0 < legend_x - 30.0
            && {
                let len: f64 = p.windows(2).map(|w| (w[1].0 - w[0].0).hypot(w[1].1 - w[0].1)).sum();
                len < 12.0
            }),
        "the transformer has no fit, so no dashes"
    );
    // The stars: rmt's at the fit's lowest point, the transformer's on its mean at 0.01.
    let star = |colour: &str| {
        let tag = tags(&svg, "polygon")
            .into_iter()
            .find(|t| {
                attr(t, "fill") == colour && {
                    let x: f64 = attr(t, "points")
                        .split_whitespace()
                        .next()
                        .unwrap()
                        .split(',')
                        .next()
                        .unwrap()
                        .parse()
                        .unwrap();
                    x < legend_x - 30.0
                }
            })
            .unwrap_or_else(|| panic!("no {colour} star"));
        let p: Vec<(f64, f64)> = attr(tag, "points")
            .split_whitespace()
            .map(|p| {
                let (x, y) = p.split_once(',').unwrap();
                (x.parse().unwrap(), y.parse().unwrap())
            })
            .collect();
        let n = p.len() as f64;
        (
            p.iter().map(|q| q.0).sum::<f64>() / n,
            p.iter().map(|q| q.1).sum::<f64>() / n,
        )
    };
    let (sx, sy) = star(blue);
    assert!(
        (sx - half).abs() < 3.0 && (sy - lowest.1).abs() < 4.0,
        "star at ({sx}, {sy}), fit lowest at {lowest:?}"
    );
    let (tx, ty) = star(orange);
    assert!(
        (tx - transformer[0].0).abs() < 2.0 && (ty - transformer[0].1).abs() < 3.0,
        "star at ({tx}, {ty}), mean at {:?}",
        transformer[0]
    );
    // The legend and the axis.
    let labels: Vec<&str> = texts.iter().map(|t| t.0.as_str()).collect();
    for want in [
        "one tuning seed's loss",
        "parabola fitted in ln lr",
        "the lr chosen",
        "lr (log scale)",
        "0.001",
        "0.01",
        "0.1",
    ] {
        assert!(labels.contains(&want), "no text {want} in {labels:?}");
    }
    assert!(
        labels.iter().any(|l| l.starts_with("variant=transformer: lr=0.01")),
        "{labels:?}"
    );
    assert!(
        labels.iter().any(|l| l.contains("edge")),
        "at_edge is not said: {labels:?}"
    );

    // What --x tuning refuses.
    fails(
        &["plot", s(&sweep), "--x", "tuning", "--y", "val_loss", "--out", s(&fig)],
        &["--y tuning_loss"],
    );
    let two = json!([{"settings": [["lr", "0.01"], ["warmup_frac", "0.1"]], "per_seed": [2.0, 2.1, 2.2], "mean": 2.1}]);
    std::fs::write(sweep.join("summary.json"), tuning(two)).unwrap();
    fails(
        &[
            "plot",
            s(&sweep),
            "--x",
            "tuning",
            "--y",
            "tuning_loss",
            "--out",
            s(&fig),
        ],
        &["variant=rmt", "lr, warmup_frac", "one numeric setting"],
    );
    let words = json!([{"settings": [["lr", "cosine"]], "per_seed": [2.0, 2.1, 2.2], "mean": 2.1}]);
    std::fs::write(sweep.join("summary.json"), tuning(words)).unwrap();
    fails(
        &[
            "plot",
            s(&sweep),
            "--x",
            "tuning",
            "--y",
            "tuning_loss",
            "--out",
            s(&fig),
        ],
        &["cosine", "not a positive number"],
    );
}

/// Runs that differ only by their seed are one arm: one colour and one legend entry ("lr=0.001
/// (3 seeds)"); arms past Tableau's 10 colours still get colours of their own; the legend sits
/// right of the plot, never on a curve; a title wider than the figure wraps, whole.
#[test]
fn curves_are_coloured_by_arm_with_the_legend_beside_the_plot() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("base");
    train(&base, "0.001");
    let config = std::fs::read_to_string(base.join("config.toml")).unwrap();
    // A copy of the run at (lr, seed) whose training loss is `level` at every logged step.
    let copy = |name: &str, lr: &str, seed: u32, level: f64| {
        let dir = tmp.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        let cfg: Vec<String> = config
            .lines()
            .map(|l| match l {
                l if l.starts_with("lr = ") => format!("lr = {lr}"),
                l if l.starts_with("seed = ") => format!("seed = {seed}"),
                l => l.to_string(),
            })
            .collect();
        std::fs::write(dir.join("config.toml"), cfg.join("\n") + "\n").unwrap();
        let rows = [1, 3, 6].map(|step| {
            json!({"step": step, "loss": level, "lr": 0.001, "tokens_per_s": 1.0, "elapsed_s": step}).to_string()
        });
        std::fs::write(dir.join("metrics.jsonl"), rows.join("\n") + "\n").unwrap();
        dir
    };
    // Two arms of three seeds: lr=0.001 at losses 5.0, 5.1, 5.2; lr=0.003 at 4.0, 4.1, 4.2.
    let mut dirs = vec![];
    for seed in 0..3 {
        dirs.push(copy(&format!("slow{seed}"), "0.001", seed, 5.0 + 0.1 * f64::from(seed)));
        dirs.push(copy(&format!("fast{seed}"), "0.003", seed, 4.0 + 0.1 * f64::from(seed)));
    }
    let title = "Two learning rates of the tiny RMT on the copy task, three seeds each, drawn as one colour per \
                 arm so that the seeds of an arm read as one, with a title far wider than the figure";
    let fig = tmp.path().join("arms.svg");
    let mut args = vec!["plot"];
    args.extend(dirs.iter().map(|d| s(d)));
    args.extend(["--x", "step", "--y", "loss", "--out", s(&fig), "--title", title]);
    let out = ok(&args);
    assert!(out.contains("6 curves"), "{out}");
    let svg = std::fs::read_to_string(&fig).unwrap();
    let placed = texts_at(&svg);
    let legend: Vec<&(String, f64, f64)> = placed.iter().filter(|t| t.0.contains('=')).collect();
    let names: Vec<&str> = legend.iter().map(|t| t.0.as_str()).collect();
    assert_eq!(names, ["lr=0.001 (3 seeds)", "lr=0.003 (3 seeds)"]);
    let lines = polylines(&svg);
    let curves: Vec<&(String, Vec<(f64, f64)>)> = lines.iter().filter(|(_, p)| p.len() == 3).collect();
    // A legend entry's colour: its sample, a short level line beside it.
    let colour_of = |label: &str| {
        let (_, _, y) = legend.iter().find(|t| t.0 == label).unwrap();
        lines
            .iter()
            .find(|(c, p)| c != "#000000" && p.len() == 2 && p[0].1 == p[1].1 && (p[0].1 - y).abs() < 12.0)
            .unwrap_or_else(|| panic!("no legend line beside {label}"))
            .0
            .clone()
    };
    let (slow, fast) = (colour_of("lr=0.001 (3 seeds)"), colour_of("lr=0.003 (3 seeds)"));
    assert_ne!(slow, fast);
    // Each arm's three seeds share their steps: one mean line in a band from the lowest to the
    // highest seed. The higher losses (lr=0.001) are the upper line, in its colour.
    let mut by_height: Vec<&(String, Vec<(f64, f64)>)> = curves.clone();
    by_height.sort_by(|a, b| a.1[0].1.total_cmp(&b.1[0].1));
    let colours: Vec<&str> = by_height.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(colours, [&slow, &fast], "{by_height:?}");
    assert_eq!(svg.matches("<polygon").count(), 2, "a band for each arm");
    assert!(
        placed.iter().any(|t| t.0.starts_with("band:")),
        "the legend says what the band is"
    );
    // The legend is right of every curve.
    let right = curves
        .iter()
        .flat_map(|c| c.1.iter().map(|p| p.0))
        .fold(f64::NEG_INFINITY, f64::max);
    assert!(
        legend.iter().all(|t| t.1 > right),
        "{legend:?} on the curves (up to x {right})"
    );
    // The title: whole, over several centred lines above everything else.
    let title_lines: Vec<&(String, f64, f64)> =
        placed.iter().filter(|t| t.1 == 512.0 && title.contains(&t.0)).collect();
    assert!(title_lines.len() >= 2, "the title is not wrapped: {placed:?}");
    let joined: Vec<&str> = title_lines.iter().map(|t| t.0.as_str()).collect();
    assert_eq!(joined.join(" "), title);
    let bottom = title_lines.iter().map(|t| t.2).fold(f64::NEG_INFINITY, f64::max);
    let top = curves
        .iter()
        .flat_map(|c| c.1.iter().map(|p| p.1))
        .chain(legend.iter().map(|t| t.2));
    assert!(top.fold(f64::INFINITY, f64::min) > bottom + 10.0);

    // Twelve arms of one seed: twelve colours, past Tableau's ten.
    let dirs: Vec<PathBuf> = (1..=12)
        .map(|i| copy(&format!("lr{i}"), &format!("0.00{i:02}"), 0, 4.0 + 0.05 * f64::from(i)))
        .collect();
    let fig = tmp.path().join("twelve.svg");
    let mut args = vec!["plot"];
    args.extend(dirs.iter().map(|d| s(d)));
    args.extend(["--x", "step", "--y", "loss", "--out", s(&fig)]);
    ok(&args);
    let svg = std::fs::read_to_string(&fig).unwrap();
    let mut colours: Vec<String> = polylines(&svg)
        .into_iter()
        .filter(|(_, p)| p.len() == 3)
        .map(|(c, _)| c)
        .collect();
    colours.sort();
    colours.dedup();
    assert_eq!(colours.len(), 12, "{colours:?}");
    let labels: Vec<String> = texts(&svg)
        .into_iter()
        .map(|t| t.0)
        .filter(|t| t.starts_with("lr="))
        .collect();
    assert_eq!(labels.len(), 12, "one entry per arm: {labels:?}");
}

/// `--x scaling` draws the committed scaling fit (docs/experiments/scaling.json): each size's
/// mean where its parameters and loss put it on log scales, in both panels, and the legend's
/// exponents and multiplier as the summary has them; other losses and sweeps without a fit
/// are refused.
#[test]
fn the_scaling_fit_is_drawn_on_log_scales_with_its_intervals() {
    let tmp = tempfile::tempdir().unwrap();
    let summary = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/experiments/scaling.json");
    let fig = tmp.path().join("fit.svg");
    let out = ok(&[
        "plot",
        s(&summary),
        "--x",
        "scaling",
        "--y",
        "test_loss",
        "--out",
        s(&fig),
    ]);
    assert!(out.contains("2 fitted power laws"), "{out}");
    let svg = std::fs::read_to_string(&fig).unwrap();
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    let families = json["scaling"]["families"].as_array().unwrap();
    let text: String = texts(&svg).into_iter().map(|t| t.0 + " ").collect();
    for f in families {
        let fit = &f["params_fit"];
        let alpha = format!(
            "α {:.3} [{:.3}, {:.3}]",
            fit["alpha"].as_f64().unwrap(),
            fit["alpha_low"].as_f64().unwrap(),
            fit["alpha_high"].as_f64().unwrap()
        );
        // The legend wraps its lines; the words are there in order.
        assert!(text.contains(&alpha), "{alpha} in {text}");
    }
    let m = &json["scaling"]["multipliers"][0];
    assert!(
        text.contains(&format!("{:.2}×", m["params"].as_f64().unwrap())),
        "{text}"
    );
    // Per family one colour of dots: its sizes' means in each panel (and one in the legend).
    let dots = dots(&svg);
    for f in families {
        let sizes = f["sizes"].as_array().unwrap();
        let colour = dots
            .iter()
            .map(|d| d.0.as_str())
            .find(|&c| dots.iter().filter(|d| d.0 == c).count() == 2 * sizes.len() + 1)
            .unwrap_or_else(|| panic!("no colour has {} dots: {dots:?}", 2 * sizes.len() + 1));
        let mine: Vec<&(String, f64, f64)> = dots.iter().filter(|d| d.0 == colour).collect();
        // The left panel's means: more parameters sit further right and, at a lower loss, lower
        // down (SVG's y grows downwards).
        let mut left: Vec<(f64, f64)> = mine.iter().map(|d| (d.1, d.2)).collect();
        left.sort_by(|a, b| a.0.total_cmp(&b.0));
        let left = &left[..sizes.len()];
        let losses: Vec<f64> = sizes.iter().map(|z| z["mean_test_loss"].as_f64().unwrap()).collect();
        for k in 1..left.len() {
            assert!(left[k].0 > left[k - 1].0);
            assert_eq!(
                left[k].1 > left[k - 1].1,
                losses[k] < losses[k - 1],
                "{left:?} {losses:?}"
            );
        }
    }
    fails(
        &[
            "plot",
            s(&summary),
            "--x",
            "scaling",
            "--y",
            "val_loss",
            "--out",
            s(&fig),
        ],
        &["--y test_loss"],
    );
    let no_fit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/experiments/hybrid.json");
    fails(
        &[
            "plot",
            s(&no_fit),
            "--x",
            "scaling",
            "--y",
            "test_loss",
            "--out",
            s(&fig),
        ],
        &["has no [scaling] fit"],
    );
}

/// An arm's seeds on shared steps are one mean within a band; where one seed lacks an
/// evaluation the others have, each seed is drawn alone and the legend says why.
#[test]
fn seeds_missing_an_evaluation_are_drawn_alone_and_say_so() {
    let tmp = tempfile::tempdir().unwrap();
    let runs: Vec<PathBuf> = ["0", "1"]
        .iter()
        .map(|seed| {
            let out = tmp.path().join(format!("seed{seed}"));
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
                "--seed",
                seed,
                "--out",
                s(&out),
            ]);
            out
        })
        .collect();
    let plot = |name: &str| {
        let fig = tmp.path().join(name);
        ok(&[
            "plot",
            s(&runs[0]),
            s(&runs[1]),
            "--x",
            "step",
            "--y",
            "val_loss",
            "--out",
            s(&fig),
        ]);
        texts(&std::fs::read_to_string(&fig).unwrap())
            .into_iter()
            .map(|(t, _)| t)
            .collect::<Vec<_>>()
            // The legend wraps a long label over lines.
            .join(" ")
    };
    let together = plot("together.svg");
    assert!(together.contains("band: the seeds"), "{together}");
    assert!(!together.contains("each seed alone"), "{together}");
    // Seed 1 loses its evaluation at step 3.
    let metrics = runs[1].join("metrics.jsonl");
    let kept: Vec<String> = std::fs::read_to_string(&metrics)
        .unwrap()
        .lines()
        .filter(|l| !(l.contains("\"val_loss\"") && l.contains("\"step\":3,")))
        .map(String::from)
        .collect();
    std::fs::write(&metrics, kept.join("\n") + "\n").unwrap();
    let apart = plot("apart.svg");
    assert!(apart.contains("each seed alone: their x values differ"), "{apart}");
    assert!(!apart.contains("band: the seeds"), "{apart}");
}
