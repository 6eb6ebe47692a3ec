#!/usr/bin/env bash
# The GPU report in one command, for a machine with a GPU and no network: the kernels checked
# against their CPU twins (`resmem selftest`, in both numeric classes), `resmem bench` at the toy
# pair and at the papers' sizes in the strict class and the fast class (`--precision fast`: f16
# multiplicands and f32 sums on cooperative matrices, where the adapter has them), each RMT's step
# against its transformer's, and the PyTorch peer on the same shapes where torch is there (f32 with
# TF32 off, and on CUDA also TF32 and bf16 autocast, the fast class's counterparts).
# It prints a dated Markdown section for bench/RESULTS.md and keeps every JSON beside it.
#
#   cargo build --release -p resmem-cli                 # beforehand, where cargo is
#   cargo xtask corpus                                   # data/shakespeare-gpt2, for the papers' sizes
#   bench/gpu.sh                                         # then, on the GPU machine
#   DRY=1 bench/gpu.sh                                   # a quick end-to-end pass (1 timed step each; the papers' sizes at B 2, T 64)
#
# Variables: RESMEM (the binary; default target/release/resmem), DATA (a GPT-2 corpus; default
# data/shakespeare-gpt2), KEEP (where the JSONs and the section go; default bench/gpu-out),
# TESTS (a folder of GPU test binaries from `cargo test --release --no-run`, run as the kernel
# check where given), PYTHON (an interpreter with torch; default python3), BACKEND (default gpu),
# TEST_TIMEOUT (seconds per test binary; default 300), UNTUNED=0 and AB=0 (leave out the
# untuned toy pair and the A/B of options, for a short device call), DRY=1 (one warm-up and one timed step each, and the papers'
# sizes at batch 2 and T 64, for checking the script itself, even on an emulated GPU).
set -uo pipefail
cd "$(dirname "$0")/.."
R=${RESMEM:-target/release/resmem}
DATA=${DATA:-data/shakespeare-gpt2}
KEEP=${KEEP:-bench/gpu-out}
PYTHON=${PYTHON:-python3}
BACKEND=${BACKEND:-gpu}
mkdir -p "$KEEP"
[[ -x $R ]] || { echo "error: $R is not an executable; build it with cargo build --release -p resmem-cli, or set RESMEM" >&2; exit 1; }
if [[ -n ${DRY:-} ]]; then timing=(--warmup 1 --steps 1); peer_timing=(--warmup 1 --steps 1)
else timing=(--warmup 3 --steps 10); peer_timing=(--warmup 3 --steps 10); fi
torch_ok=0
"$PYTHON" -c "import torch" 2>/dev/null && torch_ok=1
cuda_ok=0
[[ $torch_ok == 1 ]] && "$PYTHON" -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null && cuda_ok=1
peer_device=cpu
[[ $cuda_ok == 1 ]] && peer_device=cuda
status=0

# 1. resmem bench and the peer on each pair: name, resmem flags, peer flags. Then the toy pair
# untuned, and the A/B of the options a GPU must decide.
pairs=(
    "toy-rmt|--arch rmt --d-k 32 --d-v 32 --rank 8 --layers 4 --d-ff 1024 --context 128 --seq-len 128 --batch 32|--arch rmt --d-k 32 --d-v 32 --rank 8 --layers 4 --d-ff 1024 --seq-len 128 --batch 32"
    "toy-transformer|--arch transformer --d-model 256 --layers 4 --heads 8 --head-dim 32 --d-ff 1024 --context 128 --seq-len 128 --batch 32|--arch transformer --d-model 256 --layers 4 --heads 8 --head-dim 32 --d-ff 1024 --seq-len 128 --batch 32"
    "table9-46m|--preset table9-46m --data $DATA|--arch rmt --d-k 32 --d-v 32 --rank 12 --layers 6 --d-ff 1536 --seq-len 512 --batch 8 --vocab 50257"
    "table9-46m-transformer|--preset table9-46m-transformer --data $DATA|--arch transformer --d-model 384 --heads 12 --head-dim 32 --layers 6 --d-ff 1536 --seq-len 512 --batch 8 --vocab 50257"
    "gpt2-small-rmt|--preset gpt2-small-rmt --data $DATA|--arch rmt --d-k 12 --d-v 64 --rank 12 --layers 12 --d-ff 3072 --seq-len 512 --batch 8 --vocab 50257"
    "gpt2-small|--preset gpt2-small --data $DATA|--arch transformer --d-model 768 --heads 12 --head-dim 64 --layers 12 --d-ff 3072 --seq-len 512 --batch 8 --vocab 50257"
)
for pair in "${pairs[@]}"; do
    IFS='|' read -r name flags peer <<<"$pair"
    echo "bench: $name" >&2
    small=()
    [[ -n ${DRY:-} && $name != toy-* ]] && small=(--batch 2 --seq-len 64)
    # shellcheck disable=SC2086
    for class in strict fast; do
        suffix=""
        [[ $class == fast ]] && suffix=-fast
        # shellcheck disable=SC2086
        if ! timeout 300 "$R" bench $flags "${small[@]}" --backend "$BACKEND" --precision $class "${timing[@]}" --json \
            >"$KEEP/resmem-$name$suffix.json" 2>"$KEEP/resmem-$name$suffix.err"; then
            echo "resmem bench $name --precision $class failed: $(tail -3 "$KEEP/resmem-$name$suffix.err")" >&2; status=1
        fi
    done
    if [[ $torch_ok == 1 ]]; then
        precisions=(strict)
        [[ $cuda_ok == 1 ]] && precisions=(strict tf32 bf16)
        for p in "${precisions[@]}"; do
            suffix=""
            [[ $p != strict ]] && suffix=-$p
            # shellcheck disable=SC2086
            if ! timeout 300 "$PYTHON" bench/peers/torch_peer.py $peer "${small[@]}" --device $peer_device --precision $p \
                "${peer_timing[@]}" --json >"$KEEP/torch-$name$suffix.json" 2>"$KEEP/torch-$name$suffix.err"; then
                echo "torch peer $name --precision $p failed: $(tail -3 "$KEEP/torch-$name$suffix.err")" >&2; status=1
            fi
        done
    fi
done

# The toy pair again with every kernel's default (--no-tune), for what tuning gained. The runs
# above tuned each shape once on their first step and kept the choices in the user's cache.
[[ ${UNTUNED:-1} == 0 ]] || for name in toy-rmt toy-transformer; do
    for pair in "${pairs[@]}"; do
        IFS='|' read -r n flags _ <<<"$pair"
        [[ $n == "$name" ]] || continue
        # shellcheck disable=SC2086
        timeout 300 "$R" bench $flags --backend "$BACKEND" "${timing[@]}" --json --no-tune \
            >"$KEEP/resmem-$name-untuned.json" 2>"$KEEP/resmem-$name-untuned.err" \
            || { echo "resmem bench $name --no-tune failed: $(tail -3 "$KEEP/resmem-$name-untuned.err")" >&2; status=1; }
    done
done

# Options a GPU must decide, each against the default, interleaved (`bench/ab.sh`, B with the
# option): the K slices (`--k-slices`, off until measured) on the weight gradients of the toy
# RMT and table9-46m; wgpu's loop guards (`--loop-guards`, off since they keep drivers from
# unrolling) on the toy RMT and gpt2-small, whose matmuls loop longest.
ab_options=("k-slices|toy-rmt table9-46m" "loop-guards|toy-rmt gpt2-small")
if [[ $BACKEND == gpu && ${AB:-1} != 0 ]]; then
    for entry in "${ab_options[@]}"; do
        IFS='|' read -r option names <<<"$entry"
        for name in $names; do
            for pair in "${pairs[@]}"; do
                IFS='|' read -r n flags _ <<<"$pair"
                [[ $n == "$name" ]] || continue
                small=()
                [[ -n ${DRY:-} && $name != toy-* ]] && small=(--batch 2 --seq-len 64)
                rounds=3
                [[ -n ${DRY:-} ]] && rounds=1
                echo "bench/ab.sh --$option: $name" >&2
                # shellcheck disable=SC2086
                if ! ROUNDS=$rounds FLAGS_B=--$option PYTHON=$PYTHON timeout 300 bench/ab.sh "$R" "$R" $flags "${small[@]}" \
                    --backend "$BACKEND" "${timing[@]}" >"$KEEP/ab-$option-$name.md" 2>"$KEEP/ab-$option-$name.err"; then
                    echo "bench/ab.sh --$option $name failed: $(tail -3 "$KEEP/ab-$option-$name.err")" >&2; status=1
                fi
            done
        done
    done
fi

# Training in the fast class follows the strict class: each tiny preset on the copy task and
# small-rmt on Shakespeare, 300 steps in each class from the same seed (`bench/fast-follows.sh`;
# FOLLOW=0 skips it).
if [[ ${FOLLOW:-1} != 0 ]]; then
    follow_steps=300
    [[ -n ${DRY:-} ]] && follow_steps=4
    echo "bench/fast-follows.sh" >&2
    if ! BACKEND=$BACKEND STEPS=$follow_steps KEEP="$KEEP/follow" DATA=$DATA bench/fast-follows.sh "$R" \
        >"$KEEP/fast-follows.md" 2>"$KEEP/fast-follows.err"; then
        echo "bench/fast-follows.sh failed: $(tail -3 "$KEEP/fast-follows.err")" >&2; status=1
    fi
fi

# 2. The kernels against their CPU twins on awkward shapes (after the timings, so that a hung
# driver cannot cost them): `resmem selftest`, then any GPU test binaries given.
: >"$KEEP/selftest.log"
if ! timeout "${TEST_TIMEOUT:-300}" "$R" selftest --backend "$BACKEND" >"$KEEP/selftest.txt" 2>&1; then
    echo "resmem selftest failed: $(tail -3 "$KEEP/selftest.txt")" >&2; status=1
fi
# The fast class's kernels against their f16 twin, with the adapter's cooperative-matrix
# configurations; wgpu's HAL log lists every raw configuration the driver reports and why each
# was kept or skipped.
if ! RUST_LOG=wgpu_hal::vulkan::adapter=debug timeout "${TEST_TIMEOUT:-300}" "$R" selftest --backend "$BACKEND" \
    --precision fast >"$KEEP/selftest-fast.txt" 2>"$KEEP/selftest-fast-hal.log"; then
    echo "resmem selftest --precision fast failed: $(tail -3 "$KEEP/selftest-fast.txt")" >&2; status=1
fi
if [[ -n ${TESTS:-} ]]; then
    for t in "$TESTS"/*; do
        [[ -x $t ]] || continue
        echo "== $(basename "$t")" >>"$KEEP/selftest.log"
        if ! timeout "${TEST_TIMEOUT:-300}" "$t" --test-threads 1 >>"$KEEP/selftest.log" 2>&1; then
            echo "FAILED: $(basename "$t")" >>"$KEEP/selftest.log"; status=1
        fi
    done
fi

# 3. The section for bench/RESULTS.md.
"$PYTHON" - "$KEEP" "$R" "$BACKEND" "${DRY:-}" <<'EOF' | tee "$KEEP/section.md"
import datetime, json, os, subprocess, sys
keep, binary, backend, dry = sys.argv[1:5]

def load(name):
    try:
        with open(os.path.join(keep, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None

def gpu_name():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30).stdout.strip() or "no nvidia-smi"
    except (OSError, subprocess.SubprocessError):
        return "no nvidia-smi"

print(f"## GPU report, {datetime.date.today().isoformat()}{' (dry run: 1 timed step each, the papers sizes at B 2, T 64)' if dry else ''}")
print()
print(f"`bench/gpu.sh` on {gpu_name()}; resmem `--backend {backend}`"
      + (", adapter as `resmem bench` reports it below" if backend == "gpu" else "") + ".")
selftest = os.path.join(keep, "selftest.txt")
if os.path.exists(selftest):
    print()
    print("`resmem selftest`, every kernel family against its CPU twin:")
    print()
    print("```")
    print(open(selftest).read().rstrip())
    print("```")
selftest = os.path.join(keep, "selftest-fast.txt")
if os.path.exists(selftest):
    print()
    print("`resmem selftest --precision fast`, the fast class against its f16 CPU twin:")
    print()
    print("```")
    print(open(selftest).read().rstrip())
    print("```")
    hal = os.path.join(keep, "selftest-fast-hal.log")
    coop = [l.strip() for l in open(hal, errors="replace")] if os.path.exists(hal) else []
    coop = [l for l in coop if "ooperative" in l][:24]
    if coop:
        print()
        print("The driver's cooperative-matrix configurations as wgpu's HAL logged them:")
        print()
        print("```")
        print("\n".join(coop))
        print("```")
log = open(os.path.join(keep, "selftest.log")).read() if os.path.exists(os.path.join(keep, "selftest.log")) else ""
if log.strip():
    passed = sum(l.startswith("test result: ok") for l in log.splitlines())
    failed = [l for l in log.splitlines() if l.startswith("FAILED") or " FAILED" in l]
    print()
    print(f"Kernels against their CPU twins: {passed} test binaries passed"
          + (f", failures: {'; '.join(failed)}" if failed else ", none failed") + " (selftest.log).")
print()
print("| model | resmem tokens/s | ms/step (median) | matmul path, family timing | peer tokens/s | resmem / peer |")
print("|---|---:|---:|---|---:|---:|")
names = ["toy-rmt", "toy-transformer", "table9-46m", "table9-46m-transformer", "gpt2-small-rmt", "gpt2-small"]
for n in names:
    r, t = load(f"resmem-{n}.json"), load(f"torch-{n}.json")
    rs = f"{r['tokens_per_s']:,.0f}" if r else "failed"
    ms = f"{r['ms_per_step']['median']:.2f}" if r else ""
    path = f"{r['matmul_path']}, {r['family_timing']}" if r else ""
    ts = f"{t['tokens_per_s']:,.0f} ({t['device']})" if t else "–"
    ratio = f"{r['tokens_per_s'] / t['tokens_per_s']:.2f}" if r and t else "–"
    print(f"| {n} | {rs} | {ms} | {path} | {ts} | {ratio} |")
print()
print("Both classes (resmem strict and fast; the peer in f32 with TF32 off, TF32, and bf16 autocast), tokens/s:")
print()
print("| model | resmem strict | resmem fast | fast / strict | peer f32 | peer TF32 | peer bf16 | fast / peer f32 | fast / peer bf16 |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
def tps(x):
    return f"{x['tokens_per_s']:,.0f}" if x else "–"
def ratio(a, b):
    return f"{a['tokens_per_s'] / b['tokens_per_s']:.2f}" if a and b else "–"
for n in names:
    s, f = load(f"resmem-{n}.json"), load(f"resmem-{n}-fast.json")
    p32, ptf, pbf = load(f"torch-{n}.json"), load(f"torch-{n}-tf32.json"), load(f"torch-{n}-bf16.json")
    cls = f" ({f['precision']})" if f and f.get("precision") != "fast" else ""
    print(f"| {n} | {tps(s)} | {tps(f)}{cls} | {ratio(f, s)} | {tps(p32)} | {tps(ptf)} | {tps(pbf)} | {ratio(f, p32)} | {ratio(f, pbf)} |")
def family(r, name):
    return next((x for x in (r or {}).get("families", []) if x["family"] == name), None)
g, gs = load("resmem-gpt2-small-fast.json"), load("resmem-gpt2-small.json")
gr, p32, pbf = load("resmem-gpt2-small-rmt-fast.json"), load("torch-gpt2-small.json"), load("torch-gpt2-small-bf16.json")
mm = family(g, "matmul")
print()
print("The issue's goals (issue 41), each with its figure from this run:")
print()
print("- fast-class matmul at gpt2-small ≥ 150 TFLOP/s: " + (f"{mm['gflops'] / 1e3:,.1f} TFLOP/s" if mm else "–")
      + (f" (strict: {family(gs, 'matmul')['gflops'] / 1e3:,.1f})" if family(gs, "matmul") else ""))
print(f"- gpt2-small fast ≥ 1.5× PyTorch f32: {ratio(g, p32)}; ≥ 0.7× PyTorch bf16: {ratio(g, pbf)}")
print("- gpt2-small-rmt step ≤ 0.8× gpt2-small's, fast class: "
      + (f"{gr['ms_per_step']['median'] / g['ms_per_step']['median']:.2f}" if gr and g else "–"))
for n in ["toy-rmt", "toy-transformer"]:
    print(f"- {n} fast ≥ 1× PyTorch f32: {ratio(load(f'resmem-{n}-fast.json'), load(f'torch-{n}.json'))}")
follows = os.path.join(keep, "fast-follows.md")
if os.path.exists(follows) and os.path.getsize(follows):
    print()
    print("Training in the fast class against the strict class, same seed:")
    print()
    print(open(follows).read().rstrip())
fast_timed = []
for n in names:
    err = os.path.join(keep, f"resmem-{n}-fast.err")
    for line in open(err, errors="replace") if os.path.exists(err) else []:
        if line.strip().startswith(("fast matmul", "attention fast")):
            fast_timed.append(f"- {n}: {line.strip()}")
print()
print("The fast matmul's and the fast attention's candidates as tuning timed them (each candidate's best time, per shape):")
print()
print("\n".join(fast_timed[:48]) if fast_timed else "- none timed (no cooperative matrices, or the choices came from the tuning cache)")
print()
print("RMT step time over its transformer twin's (below 1: the RMT is faster):")
print()
for rmt, tf in [("toy-rmt", "toy-transformer"), ("table9-46m", "table9-46m-transformer"), ("gpt2-small-rmt", "gpt2-small")]:
    a, b = load(f"resmem-{rmt}.json"), load(f"resmem-{tf}.json")
    pa, pb = load(f"torch-{rmt}.json"), load(f"torch-{tf}.json")
    line = f"- {rmt} / {tf}: resmem "
    line += f"{a['ms_per_step']['median'] / b['ms_per_step']['median']:.2f}" if a and b else "–"
    line += ", peer " + (f"{pa['ms_per_step']['median'] / pb['ms_per_step']['median']:.2f}" if pa and pb else "–")
    if a and b:
        line += f"; forward FLOPs per token {a['model_flops_per_token'] / b['model_flops_per_token']:.2f}×"
    print(line)
print()
print("Tuning (tokens/s with the kernels tuned on this adapter over `--no-tune`'s defaults, same run):")
print()
for n in ["toy-rmt", "toy-transformer"]:
    a, b = load(f"resmem-{n}.json"), load(f"resmem-{n}-untuned.json")
    print(f"- {n}: " + (f"{a['tokens_per_s'] / b['tokens_per_s']:.2f}×" if a and b else "–"))
# What tuning timed for the RMT's key gradient (2×2 or 4×4 outputs a thread), from the runs' logs:
# the first run of each shape on this adapter measures it; later ones load the choice.
timed = []
for n in ["toy-rmt", "table9-46m", "gpt2-small-rmt"]:
    err = os.path.join(keep, f"resmem-{n}.err")
    for line in open(err, errors="replace") if os.path.exists(err) else []:
        if line.strip().startswith("key gradient "):
            timed.append(f"- {n}: {line.strip()}")
print()
print("The key gradient's kernels as tuning timed them (each candidate's best time):")
print()
print("\n".join(timed) if timed else "- none timed in this run (the choices came from the tuning cache)")
for option, what, models in [("k-slices", "K slices against one chain over K", ["toy-rmt", "table9-46m"]),
                             ("loop-guards", "wgpu's loop guards against none", ["toy-rmt", "gpt2-small"])]:
    for n in models:
        ab = os.path.join(keep, f"ab-{option}-{n}.md")
        if os.path.exists(ab) and os.path.getsize(ab):
            print()
            print(f"{what}, {n} (`bench/ab.sh`, B with `--{option}`):")
            print()
            print(open(ab).read().rstrip())
for n in [f"{n}{suffix}" for n in names for suffix in ["", "-fast"]]:
    r = load(f"resmem-{n}.json")
    if not r:
        continue
    print()
    print(f"{n} on {r['backend']}, {r.get('precision', 'strict')} class: {r['tokens_per_s']:,.0f} tokens/s, B {r['batch']} T {r['seq_len']}, "
          f"{r['params']:,} parameters; measured peaks: matmul {r['peaks']['matmul_gflops']:,.0f} GFLOP/s (n {r['peaks']['matmul_n']}), "
          f"stream {r['peaks']['stream_gbps']:,.0f} GB/s; percentages of the {r.get('peak_reference', 'measured peaks')}")
    print()
    print("| family | calls | ms/step | share | GFLOP/s | GB/s | of FLOP/s peak | of memory peak | of measured matmul peak |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for f in r["families"]:
        ref = f.get("flops_reference", "measured matmul")
        print(f"| {f['family']} | {f['calls']} | {f['ms_per_step']:.3f} | {100 * f['share']:.0f}% | {f['gflops']:,.0f} | "
              f"{f['gbps']:,.0f} | {100 * f.get('of_flops_peak', f['of_matmul_peak']):.1f}% ({ref}) | "
              f"{100 * f.get('of_memory_peak', f['of_stream_peak']):.1f}% | {100 * f['of_matmul_peak']:.0f}% |")
    if r.get("kernels"):
        print()
        print("Slowest kernels: " + "; ".join(
            f"`{k['kernel']}` ({k['family']}, {k['launches']}×) {k['ms_per_step']:.3f} ms" for k in r["kernels"][:8]) + ".")
    if r.get("tuned"):
        print()
        print("Tuned kernels: " + "; ".join(f"{c}: {k}" for c, k in r["tuned"]) + ".")
EOF
exit $status
