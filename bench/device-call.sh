#!/usr/bin/env bash
# The GPU report in one call of a lent device machine (no network there): build and gather here,
# run there, get one archive back.
#
#   bench/device-call.sh prepare     # here: release binary, GPU test binary, Vulkan loader debs
#   bench/device-call.sh run         # there, in the repository root; carry target/gpucarry,
#                                    # data/shakespeare-gpt2 and .gl; writes $OUT/gpu.tgz
#
# Why the debs: the lent machines have NVIDIA's driver and its ICD file but no Vulkan loader,
# and NVIDIA's ICD (libGLX_nvidia) needs glvnd's libGLdispatch; without them every resmem
# command there says "no WebGPU adapter was found" (bench/RESULTS.md, 2026-11-27). `run` also
# points the loader at the driver's own ICD file.
#
# Variables for `run`: LIMIT (seconds for bench/gpu.sh; default 380), and any of bench/gpu.sh's
# (UNTUNED=0, AB=0, FOLLOW=0, RUNS for bench/fast-follows.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
case ${1:-} in
prepare)
    set -e
    cargo build --release -p resmem-cli
    tests=$(cargo test --release --no-run -p resmem-engine --test gpu_vs_cpu --message-format=json 2>/dev/null |
        python3 -c 'import json,sys; print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("executable")][-1])')
    mkdir -p target/gpucarry/tests .gl
    cp target/release/resmem target/gpucarry/resmem
    cp "$tests" target/gpucarry/tests/gpu_vs_cpu
    strip target/gpucarry/resmem target/gpucarry/tests/gpu_vs_cpu
    grep -qx '/.gl/' .gitignore || echo '/.gl/' >>.gitignore
    if ! ls .gl/libvulkan1_*.deb .gl/libglvnd0_*.deb >/dev/null 2>&1; then
        lists=$(mktemp -d)
        mkdir -p "$lists/partial"
        o=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 "-oDir::State::Lists=$lists")
        apt-get "${o[@]}" update >/dev/null
        (cd .gl && apt-get "${o[@]}" download libvulkan1 libglvnd0 libegl1 libgl1 libglx0 libgles2 libopengl0)
    fi
    [[ -f data/shakespeare-gpt2/train.bin ]] || cargo xtask corpus
    du -sh target/gpucarry data/shakespeare-gpt2 .gl
    echo "carry: target/gpucarry data/shakespeare-gpt2 .gl; command: bench/device-call.sh run"
    ;;
run)
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
    icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
    [[ -f $icd ]] && export VK_DRIVER_FILES=$icd
    keep=/tmp/gpu-report
    rm -rf "$keep" && mkdir -p "$keep"
    start=$(date +%s)
    stamp() { echo "$1: rc $2 at $(($(date +%s) - start)) s"; }
    # The probe first: the adapter's cooperative-matrix configurations (wgpu's HAL log) and the
    # fast class's kernels against their twin, before any timing can hang the driver.
    RUST_LOG=wgpu_hal::vulkan::adapter=debug timeout 60 target/gpucarry/resmem selftest --precision fast \
        >"$keep/probe.txt" 2>"$keep/probe-hal.log"
    stamp probe $?
    timeout 90 target/gpucarry/tests/gpu_vs_cpu fast --test-threads 1 >"$keep/fast-tests.txt" 2>&1
    stamp "fast tests" $?
    RESMEM=target/gpucarry/resmem TESTS=target/gpucarry/tests TEST_TIMEOUT=${TEST_TIMEOUT:-120} KEEP=$keep \
        timeout "${LIMIT:-380}" bench/gpu.sh >"$keep/gpu.log" 2>&1
    stamp bench/gpu.sh $?
    # One archive: the device tool returns a limited number of files, and no checkpoints.
    tar czf "${OUT:-/tmp}/gpu.tgz" -C /tmp --exclude='*.safetensors' gpu-report
    head -40 "$keep/probe.txt"
    tail -5 "$keep/fast-tests.txt"
    ;;
*)
    echo "usage: bench/device-call.sh prepare|run" >&2
    exit 2
    ;;
esac
