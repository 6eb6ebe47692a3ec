#!/usr/bin/env bash
# Each small preset learns Shakespeare in GPT-2's BPE to a validation loss well under the train
# split's unigram entropy (below 0.92 of it), the loss of a model that ignores context. Too long
# for the tests (about 15 minutes on 2 cores): crates/cli/tests/shakespeare.rs keeps the workflow
# (train, eval, sample) for small-rmt, and this script checks every preset.
#   cargo build --release -p resmem-cli && bench/shakespeare-presets.sh [RESMEM_BINARY] [BACKEND]
set -euo pipefail
bin=${1:-target/release/resmem}
backend=${2:-cpu}
data=data/shakespeare-gpt2
texts=target/corpus/shakespeare
[ -f "$data/meta.json" ] && [ -d "$texts" ] || { echo "no $data or $texts: run \`cargo xtask corpus\` first" >&2; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
# The entropy `resmem data prepare` prints for the same texts and tokenizer.
unigram=$("$bin" data prepare --text "$texts" --tokenizer gpt2 --out "$dir/corpus" |
  sed -n 's/.*unigram entropy of train: \([0-9.]*\).*/\1/p')
echo "$bin, --backend $backend, $(date -u +%Y-%m-%d); unigram entropy $unigram nats"
printf '%-20s %6s %9s %8s %s\n' preset steps val_loss /unigram verdict
failed=0
for run in small-rmt:150 small-memoryformer:150 small-hybrid:150 small-transformer:300; do
  preset=${run%%:*} steps=${run##*:}
  "$bin" train --backend "$backend" --preset "$preset" --steps "$steps" --eval-every "$steps" \
    --data "$data" --out "$dir/$preset" >"$dir/$preset.log" 2>&1 ||
    { echo "$preset: training failed" >&2; cat "$dir/$preset.log" >&2; exit 1; }
  val=$("$bin" eval --backend "$backend" --json --run "$dir/$preset" | jq .val_loss)
  verdict=$(awk -v v="$val" -v u="$unigram" 'BEGIN { print (v < 0.92 * u) ? "learns" : "FAILS" }')
  [ "$verdict" = learns ] || failed=1
  printf '%-20s %6s %9.4f %8.3f %s\n' "$preset" "$steps" "$val" "$(awk -v v="$val" -v u="$unigram" 'BEGIN { print v / u }')" "$verdict"
done
exit $failed
