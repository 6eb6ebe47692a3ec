#!/usr/bin/env bash
# Training in the fast class against the strict class (issue 41): each tiny preset on the copy
# task and small-rmt on Shakespeare (GPT-2 BPE), STEPS steps in each class from each seed, their
# final validation losses side by side with the classes' difference and the strict class's own
# spread over seeds. On a GPU with cooperative matrices the fast class runs on them; on
# `BACKEND=cpu` it is the CPU twin; elsewhere the fast runs say they ran strict (the table's last
# column reads backend.json).
#
#   bench/fast-follows.sh [RESMEM]              # prints a Markdown table
#
# Variables: BACKEND (default gpu), STEPS (default 300), SEEDS (default "1"), KEEP (where the
# runs go; default bench/fast-follows-out), DATA (a GPT-2 corpus; default data/shakespeare-gpt2;
# small-rmt is left out where it is missing), RUNS (the runs to make; default every one).
set -uo pipefail
cd "$(dirname "$0")/.."
R=${1:-${RESMEM:-target/release/resmem}}
BACKEND=${BACKEND:-gpu}
STEPS=${STEPS:-300}
SEEDS=${SEEDS:-1}
KEEP=${KEEP:-bench/fast-follows-out}
DATA=${DATA:-data/shakespeare-gpt2}
RUNS=${RUNS:-tiny-transformer tiny-rmt tiny-memoryformer tiny-hybrid tiny-hc small-rmt}
[[ -x $R ]] || { echo "error: $R is not an executable; build it with cargo build --release -p resmem-cli" >&2; exit 1; }
mkdir -p "$KEEP"
status=0
for name in $RUNS; do
    case $name in
        tiny-*) flags=(--arch "${name#tiny-}" --task copy) ;;
        small-rmt)
            [[ -d $DATA ]] || { echo "small-rmt: left out, no $DATA (cargo xtask corpus)" >&2; continue; }
            flags=(--preset small-rmt --data "$DATA") ;;
        *) echo "unknown run $name" >&2; exit 2 ;;
    esac
    for seed in $SEEDS; do
        for class in strict fast; do
            out="$KEEP/$name-$class-$seed"
            rm -rf "$out"
            if ! timeout 600 "$R" train "${flags[@]}" --backend "$BACKEND" --precision $class --steps "$STEPS" \
                --seed "$seed" --out "$out" >"$out.log" 2>&1; then
                echo "training $name --precision $class --seed $seed failed: $(tail -3 "$out.log")" >&2; status=1
            fi
        done
    done
done
python3 - "$KEEP" "$STEPS" "$BACKEND" "$SEEDS" $RUNS <<'EOF'
import json, os, sys
keep, steps, backend, seeds, runs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4].split(), sys.argv[5:]

def final(run):
    try:
        rows = [json.loads(l) for l in open(os.path.join(keep, run, "metrics.jsonl"))]
        ran = json.load(open(os.path.join(keep, run, "backend.json")))
        return next(r["val_loss"] for r in reversed(rows) if r.get("val_loss") is not None), ran
    except (OSError, ValueError, StopIteration):
        return None, None

print(f"`BACKEND={backend} STEPS={steps} SEEDS=\"{' '.join(seeds)}\" bench/fast-follows.sh`: final validation loss")
print()
print("| run | seed | strict | fast | fast − strict | fast ran on |")
print("|---|---:|---:|---:|---:|---|")
for name in runs:
    strict_by_seed = []
    for seed in seeds:
        (s, _), (f, ran) = final(f"{name}-strict-{seed}"), final(f"{name}-fast-{seed}")
        if s is None and f is None:
            continue
        strict_by_seed.append(s)
        fmt = lambda v: f"{v:.5g}" if v is not None else "failed"
        diff = f"{f - s:+.2e}" if s is not None and f is not None else "–"
        where = f"{ran['device']}, {ran.get('precision', '?')} class" if ran else "–"
        print(f"| {name} | {seed} | {fmt(s)} | {fmt(f)} | {diff} | {where} |")
    done = [v for v in strict_by_seed if v is not None]
    if len(done) > 1:
        print(f"| {name} | strict over seeds | {min(done):.5g}–{max(done):.5g} | | spread {max(done) - min(done):.2e} | |")
EOF
exit $status
