#!/usr/bin/env bash
# SHA-256 of every architecture's training losses (timing fields aside) and final weights, on the
# tiny presets (copy task, both backends) and one small preset on Shakespeare bytes: a refactor
# that promises no behaviour change prints the same list before and after.
#   bench/behaviour-hashes.sh [RESMEM_BINARY] > hashes.txt
set -euo pipefail
bin=${1:-target/release/resmem}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
hash_run() {
  local name=$1; shift
  "$bin" train "$@" --seed 7 --log-every 1 --out "$dir/$name" >"$dir/$name.log" 2>&1 ||
    { echo "$name: training failed; see below" >&2; cat "$dir/$name.log" >&2; exit 1; }
  local m w
  m=$(jq -c 'del(.elapsed_s, .tokens_per_s)' "$dir/$name/metrics.jsonl" | sha256sum | cut -c1-16)
  w=$(sha256sum "$dir/$name/model.safetensors" | cut -c1-16)
  echo "$name losses=$m weights=$w"
}
for arch in transformer rmt memoryformer hybrid hc altup attnres; do
  for backend in cpu gpu; do
    hash_run "tiny-$arch-$backend" --arch "$arch" --backend "$backend" --task copy --steps 20
  done
done
# The transformer's value residual: an option that changes the trunk's attention input.
hash_run tiny-transformer-values-cpu --arch transformer --value-residual half --backend cpu --task copy --steps 20
if [ -d data/shakespeare-bytes ]; then
  hash_run small-rmt-shakespeare-cpu --preset small-rmt --data data/shakespeare-bytes --backend cpu --steps 10
else
  echo "small-rmt-shakespeare-cpu: skipped, no data/shakespeare-bytes (cargo xtask corpus)" >&2
fi
