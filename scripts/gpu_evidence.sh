#!/usr/bin/env bash
# Collects the figures the issues ask for on a GPU host, through the offline bundle, in
# stages that each fit one 10-minute call of a lent machine. Run from the repository root
# with the bundle at dist/webfpm-linux-x64.tar (build it with `deno task bundle`):
#   scripts/gpu_evidence.sh OUTDIR validate perf       # one H200
#   scripts/gpu_evidence.sh OUTDIR bench kvwarm         # one H200
#   scripts/gpu_evidence.sh OUTDIR fidelity             # one H200
#   scripts/gpu_evidence.sh OUTDIR dp                   # two H200s in one host
# Every stage writes its logs and JSON under OUTDIR and never stops the next stage.
set -uo pipefail
out=${1:?usage: scripts/gpu_evidence.sh OUTDIR STAGE...}
shift
mkdir -p "$out"
root=$(pwd)
bundle="$root/dist/webfpm-linux-x64.tar"
[ -f "$bundle" ] || { echo "no bundle at $bundle (deno task bundle)" >&2; exit 2; }
unpack=${TMPDIR:-/tmp}/webfpm-evidence
mkdir -p "$unpack" && tar xf "$bundle" -C "$unpack"
run() { "$unpack/webfpm/run" "$@"; }
model=synthetic:qwen3-30b-a3b
log() { printf '\n=== %s %s\n' "$(date -u +%H:%M:%S)" "$*"; }

for stage in "$@"; do
  case "$stage" in
    validate)
      log "validate (every kernel, every variant)"
      nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$out/gpu.txt" 2>&1
      run validate --json "$out/validate.json" 2>&1 | tee "$out/validate.txt" | tail -15
      ;;
    perf)
      log "PyTorch peer (decode, CUDA graphs) and webfpm perf-decode"
      python3 scripts/peers/torch_moe_peer.py decode --out "$out/peer-decode.json" 2>&1 | tail -8
      run perf-decode --model $model --kv-cache-gb 40 --peer "$out/peer-decode.json" \
        --json "$out/h200-decode.json" --profile 64x1024 --profile-json "$out/profile-64x1024.json" \
        2>&1 | tee "$out/perf-decode.txt" | tail -40
      log "PyTorch peer (prefill) and webfpm perf-prefill"
      python3 scripts/peers/torch_moe_peer.py prefill --out "$out/peer-prefill.json" 2>&1 | tail -5
      run perf-prefill --model $model --kv-cache-gb 20 --peer "$out/peer-prefill.json" \
        --json "$out/h200-prefill.json" 2>&1 | tee "$out/perf-prefill.txt" | tail -12
      ;;
    bench)
      log "bench: generated decode and prefill grids, twice (repeatability)"
      for i in 1 2; do
        run bench --model $model --mode agg --kv-cache-gb 60 --kvwarm off --timeout 200 \
          --out "$out/bench-fake-$i.json" 2>&1 | tee "$out/bench-fake-$i.txt" | tail -6
      done
      ;;
    kvwarm)
      log "bench: decode grid with real-KV seeding (kvwarm on), text content"
      run bench --model $model --mode decode --kv-cache-gb 60 --kvwarm on --content text \
        --timeout 400 --out "$out/bench-real.json" 2>&1 | tee "$out/bench-real.txt" | tail -12
      ;;
    fidelity)
      log "served traffic: trace, replay, fidelity of the real-KV and fake-KV libraries"
      run trace-gen --out "$out/trace.jsonl" --requests 300 2>&1 | tail -2
      run replay --model $model --trace "$out/trace.jsonl" --out "$out/served.jsonl" \
        --kv-cache-gb 60 2>&1 | tail -4
      for lib in real fake-1; do
        [ -f "$out/bench-$lib.json" ] || continue
        run fidelity --library "$out/bench-$lib.json" --served "$out/served.jsonl" \
          --json "$out/fidelity-$lib.json" 2>&1 | tee "$out/fidelity-$lib.txt" | tail -12
      done
      ;;
    dp)
      log "two ranks in lockstep (one GPU each where the host has two)"
      nvidia-smi -L >"$out/gpus.txt" 2>&1
      run bench --model $model --mode decode --kv-cache-gb 40 --dp 2 --timeout 300 \
        --out "$out/bench-dp.json" 2>&1 | tee "$out/bench-dp.txt" | tail -20
      ;;
    *)
      echo "unknown stage $stage (validate perf bench kvwarm fidelity dp)" >&2
      ;;
  esac
done
log "done"
