#!/usr/bin/env bash
# The PyTorch eager peer and `resmem bench` back to back on the CPU (or CUDA and resmem's GPU
# backend, DEVICE=cuda), on bench/RESULTS.md's toy configs (copy task, B 32, T 128, f32, steps
# 1-3 warm-up and 4-13 timed), then a side-by-side table of tokens/s (B·T over the median timed
# step, both sides), a row per PyTorch precision with resmem's class beside it.
#
#   bench/peers/run.sh            # both configs, twice each, interleaved
#   ROUNDS=1 bench/peers/run.sh   # once each
#   SIZE=mid bench/peers/run.sh   # issue 23's mid size instead, where the vocabulary weighs
#                                 # little: L 6, R 12, D_k = D_v = 64 against D 768, 12×64
#                                 # heads, D_FF 3,072, batch 8, T 256, steps 1-2 warm-up, 3-7 timed
#   PRECISIONS="strict tf32 bf16" bench/peers/run.sh
#                                 # the peer in each of its precisions (torch_peer.py
#                                 # --precision; default strict alone): strict (f32, TF32 off)
#                                 # beside resmem's strict class, tf32 and bf16 (autocast)
#                                 # beside its fast class where this resmem has `--precision`
#                                 # (else beside its strict class, and the table says so)
#   DEVICE=cuda bench/peers/run.sh
#                                 # the peer on CUDA and resmem on its GPU backend (default
#                                 # cpu): where TF32 means something
#
# PYTHON names an interpreter with torch (default: /work/venv-bench/bin/python, else python3);
# CARGO_TARGET_DIR is honoured. Set up PyTorch once with
#   python3 -m venv /work/venv-bench && /work/venv-bench/bin/pip install torch
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-2}
PRECISIONS=${PRECISIONS:-strict}
DEVICE=${DEVICE:-cpu}
for p in $PRECISIONS; do
    case $p in
    strict | tf32 | bf16) ;;
    *)
        echo "error: PRECISIONS holds strict, tf32 and bf16, not \"$p\"" >&2
        exit 1
        ;;
    esac
done
case $DEVICE in
cpu) backend=cpu ;;
cuda) backend=gpu ;;
*)
    echo "error: DEVICE is cpu or cuda, not ${DEVICE}" >&2
    exit 1
    ;;
esac
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x /work/venv-bench/bin/python ]]; then PYTHON=/work/venv-bench/bin/python; else PYTHON=python3; fi
fi
"$PYTHON" -c "import torch" 2>/dev/null || {
    echo "error: $PYTHON has no torch; install it (see the top of $0) or set PYTHON" >&2
    exit 1
}
cargo build --release -q -p resmem-cli
R="${CARGO_TARGET_DIR:-target}/release/resmem"
# resmem's class beside each peer precision: strict beside strict, fast beside tf32 and bf16,
# where this resmem has `--precision` (issue 41); else every row is resmem's strict class.
has_precision=0
bench_help=$("$R" bench --help 2>/dev/null || true)
[[ $bench_help == *--precision* ]] && has_precision=1
class_of() {
    if [[ $1 != strict && $has_precision == 1 ]]; then echo fast; else echo strict; fi
}
classes=$(for p in $PRECISIONS; do class_of "$p"; done | sort -u | paste -sd ' ')
# KEEP=DIR keeps every run's JSON there.
if [[ -n "${KEEP:-}" ]]; then
    OUT=$KEEP
    mkdir -p "$OUT"
else
    OUT=$(mktemp -d)
    trap 'rm -rf "$OUT"' EXIT
fi

# The shapes, as flags both sides take: the run's, the RMT's and its twin's; and resmem's context.
case ${SIZE:-toy} in
toy)
    run=(--batch 32 --seq-len 128 --warmup 3 --steps 10)
    ctx=128
    rmt=(--arch rmt --d-k 32 --d-v 32 --rank 8 --layers 4 --d-ff 1024)
    tf=(--arch transformer --d-model 256 --layers 4 --heads 8 --head-dim 32 --d-ff 1024)
    ;;
mid)
    run=(--batch 8 --seq-len 256 --warmup 2 --steps 5)
    ctx=256
    rmt=(--arch rmt --d-k 64 --d-v 64 --rank 12 --layers 6 --d-ff 3072)
    tf=(--arch transformer --d-model 768 --layers 6 --heads 12 --head-dim 64 --d-ff 3072)
    ;;
*)
    echo "error: SIZE is toy or mid, not ${SIZE}" >&2
    exit 1
    ;;
esac
for round in $(seq "$ROUNDS"); do
    for arch in rmt transformer; do
        echo "round $round: $arch (pytorch: $PRECISIONS; then resmem: $classes)" >&2
        if [[ $arch == rmt ]]; then flags=("${rmt[@]}"); else flags=("${tf[@]}"); fi
        for p in $PRECISIONS; do
            "$PYTHON" bench/peers/torch_peer.py "${flags[@]}" "${run[@]}" --device "$DEVICE" --precision "$p" \
                --json >"$OUT/torch-$arch-$p-$round.json"
        done
        for c in $classes; do
            class_flags=()
            [[ $has_precision == 1 ]] && class_flags=(--precision "$c")
            "$R" bench "${flags[@]}" "${run[@]}" --context "$ctx" --backend "$backend" \
                ${class_flags[@]+"${class_flags[@]}"} --json \
                >"$OUT/resmem-$arch-$c-$round.json"
        done
    done
done

classes_of=$(for p in $PRECISIONS; do echo "$p=$(class_of "$p")"; done)
"$PYTHON" - "$OUT" "$ROUNDS" "${SIZE:-toy}" "$has_precision" $classes_of <<'EOF'
import json, os, platform, sys
out, rounds, size, has_precision = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1"
class_of = dict(pair.split("=") for pair in sys.argv[5:])
load = lambda name: json.load(open(os.path.join(out, name)))
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
first = next(iter(class_of))
t0 = load(f"torch-rmt-{first}-1.json")
r0 = load(f"resmem-rmt-{class_of[first]}-1.json")
loadavg = " ".join(open("/proc/loadavg").read().split()[:3])
print(f"machine: {cpu}, {os.cpu_count()} cores, load average {loadavg} at the end; torch {t0['torch']} ({t0['threads']} threads) "
      f"on {t0['device']}; resmem {r0['backend']}")
if not has_precision and any(p != "strict" for p in class_of):
    print("this resmem has no `--precision`: the tf32 and bf16 rows set its strict class beside them")
print()
print("| model | PyTorch precision | PyTorch eager tokens/s | resmem class | resmem tokens/s | resmem / PyTorch |")
print("|---|---|---:|---|---:|---:|")
names = {
    "toy": {"rmt": "toy RMT (L4 R8 D_k32 D_v32 D_FF1024)", "transformer": "transformer twin (L4 D256 8×32 D_FF1024)"},
    "mid": {"rmt": "mid RMT (L6 R12 D_k64 D_v64 D_FF3072, B8 T256)", "transformer": "its twin (L6 D768 12×64 D_FF3072)"},
}[size]
for arch in ["rmt", "transformer"]:
    for p, c in class_of.items():
        t = [load(f"torch-{arch}-{p}-{i}.json")["tokens_per_s"] for i in range(1, rounds + 1)]
        r = [load(f"resmem-{arch}-{c}-{i}.json")["tokens_per_s"] for i in range(1, rounds + 1)]
        ratio = " · ".join(f"{b / a:.2f}" for a, b in zip(t, r))
        fmt = lambda xs: " · ".join(f"{x:,.0f}" for x in xs)
        print(f"| {names[arch]} | {p} | {fmt(t)} | {c} | {fmt(r)} | {ratio} |")
EOF
