#!/usr/bin/env bash
# The PyTorch eager peer and `resmem bench` back to back on the CPU, on bench/RESULTS.md's toy
# configs (copy task, B 32, T 128, f32, steps 1-3 warm-up and 4-13 timed), then a side-by-side
# table of tokens/s (B·T over the median timed step, both sides).
#
#   bench/peers/run.sh            # both configs, twice each, interleaved
#   ROUNDS=1 bench/peers/run.sh   # once each
#
# PYTHON names an interpreter with torch (default: /work/venv-bench/bin/python, else python3);
# CARGO_TARGET_DIR is honoured. Set up PyTorch once with
#   python3 -m venv /work/venv-bench && /work/venv-bench/bin/pip install torch
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-2}
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x /work/venv-bench/bin/python ]]; then PYTHON=/work/venv-bench/bin/python; else PYTHON=python3; fi
fi
"$PYTHON" -c "import torch" 2>/dev/null || {
    echo "error: $PYTHON has no torch; install it (see the top of $0) or set PYTHON" >&2
    exit 1
}
cargo build --release -q -p resmem-cli
R="${CARGO_TARGET_DIR:-target}/release/resmem"
# KEEP=DIR keeps every run's JSON there.
if [[ -n "${KEEP:-}" ]]; then
    OUT=$KEEP
    mkdir -p "$OUT"
else
    OUT=$(mktemp -d)
    trap 'rm -rf "$OUT"' EXIT
fi

common=(--context 128 --seq-len 128 --batch 32 --backend cpu --warmup 3 --steps 10 --json)
rmt=(--arch rmt --d-k 32 --d-v 32 --rank 8 --layers 4 --d-ff 1024)
tf=(--arch transformer --d-model 256 --layers 4 --heads 8 --head-dim 32 --d-ff 1024)
for round in $(seq "$ROUNDS"); do
    for arch in rmt transformer; do
        echo "round $round: $arch (pytorch, then resmem)" >&2
        "$PYTHON" bench/peers/torch_peer.py --arch "$arch" --batch 32 --seq-len 128 --warmup 3 --steps 10 \
            --json >"$OUT/torch-$arch-$round.json"
        if [[ $arch == rmt ]]; then flags=("${rmt[@]}"); else flags=("${tf[@]}"); fi
        "$R" bench "${flags[@]}" "${common[@]}" >"$OUT/resmem-$arch-$round.json"
    done
done

"$PYTHON" - "$OUT" "$ROUNDS" <<'EOF'
import json, os, platform, sys
out, rounds = sys.argv[1], int(sys.argv[2])
load = lambda name: json.load(open(os.path.join(out, name)))
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
t0 = load("torch-rmt-1.json")
r0 = load("resmem-rmt-1.json")
loadavg = " ".join(open("/proc/loadavg").read().split()[:3])
print(f"machine: {cpu}, {os.cpu_count()} cores, load average {loadavg} at the end; torch {t0['torch']} ({t0['threads']} threads); resmem {r0['backend']}")
print()
print("| model | PyTorch eager tokens/s | resmem tokens/s | resmem / PyTorch |")
print("|---|---:|---:|---:|")
names = {"rmt": "toy RMT (L4 R8 D_k32 D_v32 D_FF1024)", "transformer": "transformer twin (L4 D256 8×32 D_FF1024)"}
for arch in ["rmt", "transformer"]:
    t = [load(f"torch-{arch}-{i}.json")["tokens_per_s"] for i in range(1, rounds + 1)]
    r = [load(f"resmem-{arch}-{i}.json")["tokens_per_s"] for i in range(1, rounds + 1)]
    ratio = " · ".join(f"{b / a:.2f}" for a, b in zip(t, r))
    fmt = lambda xs: " · ".join(f"{x:,.0f}" for x in xs)
    print(f"| {names[arch]} | {fmt(t)} | {fmt(r)} | {ratio} |")
EOF
