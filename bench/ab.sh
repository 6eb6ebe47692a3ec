#!/usr/bin/env bash
# Two resmem binaries on one model, interleaved (A, B, A, B, …), each `resmem bench --json` with
# the same flags; then each one's median step, and per kernel family (and, on a GPU with
# timestamps, per kernel) the median ms a step of A and of B and B / A, with the noise band that
# each binary's rounds show against each other (A/A, B/B). On a noisy machine or a borrowed GPU
# this is the comparison that holds: both sides see the same minutes.
#
#   bench/ab.sh OLD NEW [resmem bench flags…]
#   bench/ab.sh /tmp/resmem.old target/release/resmem --backend cpu --arch rmt --batch 32 --seq-len 128 --context 128
#   ROUNDS=3 bench/ab.sh .gpubin/resmem.old .gpubin/resmem --preset gpt2-small --data data/shakespeare-gpt2
#
# ROUNDS (default 3) pairs of runs; FLAGS_B, flags for B's runs only (one build with and without
# an option: FLAGS_B=--k-slices bench/ab.sh R R …); KEEP=DIR keeps every run's JSON there; PYTHON
# (default python3) summarises. Each side keeps the tuning cache it finds, as a user's would: give A its
# own cache directory (XDG_CACHE_HOME) where its candidates differ from B's.
set -euo pipefail
if [[ $# -lt 2 ]]; then
    echo "usage: bench/ab.sh OLD NEW [resmem bench flags…]" >&2
    exit 2
fi
A=$1 B=$2
shift 2
for bin in "$A" "$B"; do
    [[ -x $bin ]] || { echo "error: $bin is not an executable resmem" >&2; exit 2; }
done
ROUNDS=${ROUNDS:-3}
PYTHON=${PYTHON:-python3}
if [[ -n ${KEEP:-} ]]; then
    OUT=$KEEP
    mkdir -p "$OUT"
else
    OUT=$(mktemp -d)
    trap 'rm -rf "$OUT"' EXIT
fi
for round in $(seq 1 "$ROUNDS"); do
    for side in A B; do
        bin=$A extra=()
        # shellcheck disable=SC2206
        [[ $side == B ]] && bin=$B extra=(${FLAGS_B:-})
        echo "round $round: $side" >&2
        if ! "$bin" bench "$@" "${extra[@]}" --json >"$OUT/$side-$round.json" 2>"$OUT/$side-$round.err"; then
            echo "error: $side ($bin) failed: $(tail -3 "$OUT/$side-$round.err")" >&2
            exit 1
        fi
    done
done
rounds="$ROUNDS rounds interleaved"
[[ $ROUNDS == 1 ]] && rounds="1 round"
echo "bench/ab.sh, $rounds: A = $A, B = $B${FLAGS_B:+ $FLAGS_B}"
echo "flags: $*"
"$PYTHON" - "$OUT" "$ROUNDS" <<'EOF'
import json, statistics, sys

out, rounds = sys.argv[1], int(sys.argv[2])
runs = {s: [json.load(open(f"{out}/{s}-{r}.json")) for r in range(1, rounds + 1)] for s in "AB"}


def median(values):
    return statistics.median(values) if values else float("nan")


def label(key, row):
    # A kernel can run in more than one family (the key gradient in both backwards).
    return row["family"] if key == "families" else f"{row['kernel']} ({row['family']})"


def per(side, key):
    """Median over rounds of each row's ms a step, by its label."""
    rows = {}
    for run in runs[side]:
        for row in run[key]:
            rows.setdefault(label(key, row), []).append(row["ms_per_step"])
    return {n: median(v) for n, v in rows.items()}


first = runs["A"][0]
print(f"{first['arch']} on {first['backend']}, batch {first['batch']}×{first['seq_len']}")
print()
step = {s: [run["ms_per_step"]["median"] for run in runs[s]] for s in "AB"}
print("| | A | B | B / A |")
print("|---|---:|---:|---:|")
print("| step, ms (median of rounds) | {:.2f} | {:.2f} | {:.3f} |".format(
    median(step["A"]), median(step["B"]), median(step["B"]) / median(step["A"])))
print("| each round's step, ms | {} | {} | {} |".format(
    " · ".join(f"{v:.2f}" for v in step["A"]), " · ".join(f"{v:.2f}" for v in step["B"]),
    " · ".join(f"{b / a:.3f}" for a, b in zip(step["A"], step["B"]))))
# The noise band: each side's rounds against each other (A/A and B/B), the ratios a binary
# shows against itself on this machine in these minutes. A B / A inside it is no difference.
self_ratios = [x / y for s in "AB" for i, x in enumerate(step[s]) for j, y in enumerate(step[s]) if i != j]
print()
if self_ratios:
    print("Noise band (each side's rounds against each other, A/A and B/B): {:.3f} to {:.3f}; "
          "a B / A inside it is not a difference.".format(min(self_ratios), max(self_ratios)))
else:
    print("Noise band: none with one round (ROUNDS=3 or more measures it); B / A alone is not a verdict.")
for key, title in [("families", "family"), ("kernels", "kernel (family)")]:
    a, b = per("A", key), per("B", key)
    if not a and not b:
        continue
    print()
    print(f"| {title} | A ms/step | B ms/step | B / A |")
    print("|---|---:|---:|---:|")
    rows = sorted(set(a) | set(b), key=lambda n: -max(a.get(n, 0), b.get(n, 0)))
    for n in rows[:12] if key == "kernels" else rows:
        ra, rb = a.get(n), b.get(n)
        ratio = f"{rb / ra:.3f}" if ra and rb else "–"
        fa = f"{ra:.3f}" if ra is not None else "–"
        fb = f"{rb:.3f}" if rb is not None else "–"
        print(f"| {n} | {fa} | {fb} | {ratio} |")
EOF
