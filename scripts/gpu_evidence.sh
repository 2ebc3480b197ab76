#!/usr/bin/env bash
# Collects the figures the issues ask for on a GPU host, through the offline bundle. Run from
# the repository root with the bundle at dist/webfpm-linux-x64.tar (`deno task bundle`):
#   scripts/gpu_evidence.sh OUTDIR STAGE...
# stages: validate perf attention bench kvwarm library fidelity logits dp tasks coldread, and validate=KERNEL,KERNEL
# (validate for those kernels only; tasks: EVIDENCE_TASKS, see there) (fidelity scores the libraries that
# kvwarm and library wrote into the same OUTDIR; elsewhere, run `deno task fidelity` later)
# On a two-GPU host, scripts/gpu_evidence_pair.sh runs two of these side by side, one per GPU.
# Seen on the H200 (2026-11-30): validate took over 200 s (production-shaped CPU references;
# EVIDENCE_VALIDATE_LIMIT) plus the tensor-core rows under their own bound; perf ~3 min; bench
# runs are bounded by EVIDENCE_BENCH_S (prefill runs at ~2-3k tokens/s today, so the sweeps
# use the medium grid within EVIDENCE_SEQS requests and EVIDENCE_LEN tokens).
# EVIDENCE_PEER=off skips the PyTorch peer (perf then compares with GPU.md's peer figures);
# EVIDENCE_PEER=DIR takes the peer's peer-decode.json and peer-prefill.json from DIR (a run
# earlier the same day on the same machine) instead of running it again.
# EVIDENCE_PROFILE: the decode points perf profiles per kernel (default 1x1024,8x1024,64x1024);
# EVIDENCE_PREFILL_PROFILE: the prefill shapes it profiles (default 1x2048).
# EVIDENCE_AB="NAME=FLAGS;NAME=FLAGS": perf-decode again per named set of extra flags at the
# EVIDENCE_AB_POINTS (default --batch 1,8,64 --ctx 1024,8192), writing h200-decode-NAME.json
# and profile-NAME*.json (kernel forms compared in one call); EVIDENCE_PREFILL=off skips
# perf-prefill (any other value runs it). The attention stage runs perf-attention at
# EVIDENCE_ATTENTION_POINTS (default 64x8192,8x131072,64x1024) with EVIDENCE_ATTENTION_FLAGS
# (default none: each form in the model's own split plan; e.g. "--split-waves 768,1536" for more).
# Every stage writes its logs and JSON under OUTDIR and never stops the next stage.
set -uo pipefail
set -f # flags in EVIDENCE_* values are split on spaces, never globbed
out=${1:?usage: scripts/gpu_evidence.sh OUTDIR STAGE...}
shift
mkdir -p "$out"
root=$(pwd)
bundle="$root/dist/webfpm-linux-x64.tar"
[ -f "$bundle" ] || { echo "no bundle at $bundle (deno task bundle)" >&2; exit 2; }
unpack=${TMPDIR:-/tmp}/webfpm-evidence-$$
mkdir -p "$unpack" && tar xf "$bundle" -C "$unpack"
# Each command is bounded (seconds, EVIDENCE_LIMIT, default 240) so one stuck command
# cannot eat the lent machine's call; what it wrote so far stays under OUTDIR.
limit=${EVIDENCE_LIMIT:-240}
run() { timeout -k 10 "$limit" "$unpack/webfpm/run" "$@"; }
# bench's own soft timeout (checked between points), and the hard bound above it
bench_s=${EVIDENCE_BENCH_S:-150}
run_bench() { timeout -k 10 $((bench_s + 90)) "$unpack/webfpm/run" bench --timeout "$bench_s" "$@"; }
model=${EVIDENCE_MODEL:-synthetic:qwen3-30b-a3b}
# The engine limits of the library, the served replay and the sweeps (so their domains agree).
seqs=${EVIDENCE_SEQS:-32}
len=${EVIDENCE_LEN:-2600}
limits="--max-num-seqs $seqs --max-model-len $len --max-num-batched-tokens ${EVIDENCE_TOKENS:-2048}"
log() { printf '\n=== %s %s\n' "$(date -u +%H:%M:%S)" "$*"; }
# --peer only where the peer wrote its file (no PyTorch or no CUDA: GPU.md's figures).
peer() { [ -s "$1" ] && printf -- '--peer\n%s\n' "$1"; }
export PYTHONUNBUFFERED=1
# EVIDENCE_GPU=N: this run on NVIDIA GPU N only (two runs side by side on a two-GPU host),
# through the bundle's device-select layer, as bench --dp picks a GPU per rank.
if [ -n "${EVIDENCE_GPU:-}" ]; then
  bus=$(nvidia-smi -i "$EVIDENCE_GPU" --query-gpu=pci.bus_id --format=csv,noheader | tr A-F a-f)
  [ -n "$bus" ] || { echo "EVIDENCE_GPU=$EVIDENCE_GPU: nvidia-smi names no such GPU" >&2; exit 2; }
  IFS=':.' read -r dom b d f <<<"$bus"
  export DRI_PRIME="pci-${dom: -4}_${b}_${d}_${f}!"
  echo "GPU $EVIDENCE_GPU ($bus): DRI_PRIME=$DRI_PRIME"
fi

for stage in "$@"; do
  # validate=a,b: the validate stage for these kernels only (two GPUs can share a full run:
  # "validate=embedding,...,paged_attention" on one, the rest on the other)
  if [[ "$stage" == validate=* ]]; then
    only_kernels="${stage#validate=}"
    stage=validate
  else
    only_kernels="${EVIDENCE_VALIDATE_KERNELS:-}"
  fi
  case "$stage" in
    validate)
      log "validate (every kernel, every variant)"
      nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$out/gpu.txt" 2>&1
      # Tensor-core (subgroup-matrix) forms apart and last, with a short bound: one of their
      # earlier forms hung the H200. Later stages leave them out unless they all passed.
      # production-shaped CPU references take minutes in TypeScript: a longer bound
      # EVIDENCE_VALIDATE_KERNELS=a,b: only these kernels (e.g. the ones changed since a full run)
      mapfile -t only < <([ -n "$only_kernels" ] && printf -- '--kernel\n%s\n' "$only_kernels")
      WEBFPM_NO_SUBGROUP_MATRIX=1 limit=${EVIDENCE_VALIDATE_LIMIT:-420} run validate "${only[@]}" \
        --json "$out/validate.json" 2>&1 | tee "$out/validate.txt" | tail -8
      [ "${EVIDENCE_SGMAT:-on}" = on ] || continue
      # the tensor-core rows of every kernel (gemm, gemm_tc, the MoE *_tc): in the part of a
      # split run whose list has gemm
      [ -z "$only_kernels" ] || [[ ",$only_kernels," == *,gemm,* ]] || continue
      if limit=${EVIDENCE_SGMAT_LIMIT:-240} run validate --variant "${EVIDENCE_SGMAT_VARIANTS:-f16-sgmat,f16-tc16,f16-tc32,f16-tc64,f16-tc,f16-tcdw,f16-tcs}" \
        --json "$out/validate-sgmat.json" >"$out/validate-sgmat.txt" 2>&1; then
        echo "subgroup-matrix forms: all pass"
      else
        echo "subgroup-matrix forms failed or hung (rc $?): left out of later stages"
        export WEBFPM_NO_SUBGROUP_MATRIX=1
      fi
      tail -25 "$out/validate-sgmat.txt"
      ;;
    perf)
      log "PyTorch peer (decode, CUDA graphs) and webfpm perf-decode"
      peer_from=${EVIDENCE_PEER:-on}
      if [ -d "$peer_from" ]; then
        cp "$peer_from/peer-decode.json" "$peer_from/peer-prefill.json" "$out/"
      elif [ "$peer_from" = on ]; then
        timeout -k 10 "$limit" python3 scripts/peers/torch_moe_peer.py decode \
          --out "$out/peer-decode.json" 2>&1 | tee "$out/peer-decode.txt" | tail -8
      fi
      mapfile -t p < <(peer "$out/peer-decode.json")
      profile=${EVIDENCE_PROFILE:-1x1024,8x1024,64x1024}
      run perf-decode --model $model --kv-cache-gb ${EVIDENCE_KV_GB:-40} "${p[@]}" \
        --json "$out/h200-decode.json" --profile "$profile" --profile-json "$out/profile.json" \
        2>&1 | tee "$out/perf-decode.txt" | tail -80
      # EVIDENCE_LANES_AB=1: the same points again with the one-key-per-lane decode attention
      if [ "${EVIDENCE_LANES_AB:-0}" = 1 ]; then
        run perf-decode --model $model --kv-cache-gb ${EVIDENCE_KV_GB:-40} "${p[@]}" \
          --decode-attention lanes --json "$out/h200-decode-lanes.json" --profile "$profile" \
          --profile-json "$out/profile-lanes.json" 2>&1 | tee "$out/perf-decode-lanes.txt" | tail -40
      fi
      # EVIDENCE_PACKED_AB=1: the same points again with f16 read as 32-bit words
      if [ "${EVIDENCE_PACKED_AB:-0}" = 1 ]; then
        WEBFPM_F16_PACKED=1 run perf-decode --model $model --kv-cache-gb ${EVIDENCE_KV_GB:-40} \
          "${p[@]}" --json "$out/h200-decode-packed.json" --profile "$profile" \
          --profile-json "$out/profile-packed.json" 2>&1 |
          tee "$out/perf-decode-packed.txt" | tail -40
      fi
      IFS=';' read -ra ab_sets <<<"${EVIDENCE_AB:-}"
      for ab in "${ab_sets[@]}"; do
        [[ "$ab" =~ ^[A-Za-z0-9_-]+= ]] || { [ -z "$ab" ] || echo "EVIDENCE_AB: '$ab' is not NAME=FLAGS" >&2; continue; }
        name=${ab%%=*}
        log "perf-decode A/B $name: ${ab#*=}"
        # shellcheck disable=SC2086
        run perf-decode --model $model --kv-cache-gb ${EVIDENCE_KV_GB:-40} "${p[@]}" \
          ${EVIDENCE_AB_POINTS:---batch 1,8,64 --ctx 1024,8192} ${ab#*=} \
          --json "$out/h200-decode-$name.json" --profile "$profile" \
          --profile-json "$out/profile-$name.json" 2>&1 | tee "$out/perf-decode-$name.txt" | tail -30
      done
      [ "${EVIDENCE_PREFILL:-on}" = off ] && continue
      log "PyTorch peer (prefill) and webfpm perf-prefill"
      [ "$peer_from" = on ] && timeout -k 10 "$limit" python3 \
        scripts/peers/torch_moe_peer.py prefill --out "$out/peer-prefill.json" 2>&1 |
        tee "$out/peer-prefill.txt" | tail -5
      mapfile -t p < <(peer "$out/peer-prefill.json")
      run perf-prefill --model $model --kv-cache-gb ${EVIDENCE_KV_GB:-20} "${p[@]}" \
        --json "$out/h200-prefill.json" --profile "${EVIDENCE_PREFILL_PROFILE:-1x2048}" \
        --profile-json "$out/profile-prefill.json" 2>&1 | tee "$out/perf-prefill.txt" | tail -30
      ;;
    attention)
      log "perf-attention: decode attention alone at deep KV, per form and split plan"
      # shellcheck disable=SC2086
      run perf-attention --points ${EVIDENCE_ATTENTION_POINTS:-64x8192,8x131072,64x1024} \
        ${EVIDENCE_ATTENTION_FLAGS:-} \
        --json "$out/h200-attention.json" 2>&1 | tee "$out/perf-attention.txt" | tail -60
      ;;
    bench)
      log "bench: the medium generated grid (decode and prefill), twice (repeatability)"
      # EVIDENCE_GIANT=0: every point median-of-3 (1: every KV-reading point; the prompt-only
      # prefills stay at one sample)
      for i in $(seq "${EVIDENCE_BENCH_RUNS:-2}"); do
        run_bench --model $model --mode agg --grid medium --kv-cache-gb ${EVIDENCE_KV_GB:-60} \
          ${EVIDENCE_GIANT:+--giant-kv-threshold $EVIDENCE_GIANT} --kvwarm off $limits --out "$out/bench-medium-$i.json" 2>&1 |
          tee "$out/bench-medium-$i.txt" | tail -8
      done
      ;;
    kvwarm)
      log "kvwarm evidence: the same decode points on fake KV and on real KV, router counts"
      for regime in fake real; do
        run kvwarm-evidence --regime $regime --model $model --batches 1,8,32 --ctx 1024,4096 \
          --max-model-len 4200 --kv-cache-gb ${EVIDENCE_KV_GB:-20} --out-dir "$out/kvwarm" \
          2>&1 | tee "$out/kvwarm-$regime.txt" | tail -4
      done
      run kvwarm-evidence --compare --out-dir "$out/kvwarm" 2>&1 | tee "$out/kvwarm-compare.txt"
      log "bench: the decode sweep with real-KV seeding (kvwarm on) and without (cost)"
      for kv in on off; do
        run_bench --model $model --mode decode --grid medium --kv-cache-gb ${EVIDENCE_KV_GB:-60} \
          --kvwarm $kv --content text $limits --out "$out/bench-decode-kvwarm-$kv.json" 2>&1 |
          tee "$out/bench-decode-kvwarm-$kv.txt" | tail -6
      done
      ;;
    library)
      log "bench: the prefill sweep of the latency library (text content)"
      run_bench --model $model --mode prefill --grid medium --kv-cache-gb ${EVIDENCE_KV_GB:-60} \
        --content text $limits --out "$out/bench-prefill.json" 2>&1 |
        tee "$out/bench-prefill.txt" | tail -6
      ;;
    fidelity)
      log "served traffic: a trace within the library's limits, replayed, then scored"
      run trace-gen --out "$out/trace.jsonl" --requests "${EVIDENCE_REQUESTS:-100}" \
        --prompt-max $((len / 2)) --output-max $((len / 5)) 2>&1 | tail -2
      run replay --model $model --trace "$out/trace.jsonl" --out "$out/served.jsonl" \
        --kv-cache-gb ${EVIDENCE_KV_GB:-60} $limits 2>&1 | tail -4
      for kv in on off; do
        lib="$out/bench-decode-kvwarm-$kv.json"
        [ -f "$lib" ] && [ -f "$out/bench-prefill.json" ] || continue
        run fidelity --library "$lib,$out/bench-prefill.json" --served "$out/served.jsonl" \
          --json "$out/fidelity-kvwarm-$kv.json" 2>&1 | tee "$out/fidelity-kvwarm-$kv.txt" |
          tail -12
      done
      ;;
    tasks)
      # EVIDENCE_TASKS="TASK ARGS;TASK ARGS": any deno tasks through the bundle, in order, each
      # logged to OUTDIR/task-N-TASK.txt (kernel forms and model options A/B'd in one call);
      # "OUT" in ARGS is replaced by OUTDIR.
      IFS=';' read -ra task_lines <<<"${EVIDENCE_TASKS:-}"
      i=0
      for line in "${task_lines[@]}"; do
        [ -n "${line// /}" ] || continue
        i=$((i + 1))
        line=${line//OUT/$out}
        read -ra words <<<"$line"
        log "task $i: ${line}"
        run "${words[@]}" 2>&1 | tee "$out/task-$i-${words[0]}.txt" | tail -${EVIDENCE_TASK_TAIL:-40}
      done
      ;;
    logits)
      # End-to-end logits of kernel forms against the defaults: `logits` on one prompt of
      # EVIDENCE_LOGITS_TOKENS deterministic token ids (default 64: 4 rows an expert on
      # Qwen3-30B-A3B, the MoE decode forms), f16, with the defaults and then per
      # EVIDENCE_LOGITS_AB "NAME=FLAGS;..." set, each compared with `logits-diff` (JSON in
      # OUTDIR/logits-diff-NAME.json). The logits files are removed afterwards (40 MB each at 64
      # tokens) unless EVIDENCE_KEEP_LOGITS=1. A run that fails or times out leaves its log.
      ids=$(awk -v n="${EVIDENCE_LOGITS_TOKENS:-64}" \
        'BEGIN { for (i = 0; i < n; i++) printf "%s%d", (i ? "," : ""), (i * 7919) % 151000 + 1 }')
      # the defaults first ("default=", no flags), then each set, diffed against the defaults
      IFS=';' read -ra ab <<<"default=;${EVIDENCE_LOGITS_AB:-lane=--moe-tc-decode-rows -1;fma=--tensor-core-rows 0 --moe-tensor-core-rows 0 --prefill-attention fma}"
      for pair in "${ab[@]}"; do
        [ -n "${pair// /}" ] || continue
        name=${pair%%=*}
        read -ra flags <<<"${pair#*=}"
        log "logits: $name (${flags[*]:-the defaults})"
        run logits --model $model --dtype f16 --token-ids "$ids" "${flags[@]}" \
          --out "$out/logits-$name.safetensors" >"$out/logits-$name.txt" 2>&1
        tail -3 "$out/logits-$name.txt"
        if [ "$name" != default ] && [ -f "$out/logits-default.safetensors" ] &&
          [ -f "$out/logits-$name.safetensors" ]; then
          run logits-diff "$out/logits-default.safetensors" "$out/logits-$name.safetensors" \
            --json "$out/logits-diff-$name.json" 2>&1 | tee "$out/logits-diff-$name.txt"
        fi
      done
      if [ "${EVIDENCE_KEEP_LOGITS:-0}" != 1 ]; then # (no globs here: set -f)
        for pair in "${ab[@]}"; do rm -f "$out/logits-${pair%%=*}.safetensors"; done
      fi
      ;;
    coldread)
      # Is each layer's slow first read (session 43) the Vulkan driver's mapping of a buffer a
      # weight? The loads alone over 48 copies a buffer each and in arenas, with and without
      # a 64 KB pretouch; CUDA's allocator (PyTorch) read the same way; then the model with its
      # weights a buffer each, in arenas, and with its KV cache in arenas too, in turn twice
      # (EVIDENCE_COLD_BATCH, ctx 1024).
      log "the cold read: probe-reads a buffer each / arenas, PyTorch, perf-decode by placement"
      for v in "l1:--layers 1" "l48:--layers 48" "l48-arena:--layers 48 --placement arena" \
        "l48-pt:--layers 48 --pretouch 64" "l48-arena-pt:--layers 48 --placement arena --pretouch 64"; do
        run probe-reads --patterns gu.tiles,dn.tiles --configs wg8k.r2 ${v#*:} \
          --json "$out/probe-reads-${v%%:*}.json" >"$out/probe-reads-${v%%:*}.txt" 2>&1
        grep -E "^(gu|dn)\.tiles +wg" "$out/probe-reads-${v%%:*}.txt"
      done
      # (EVIDENCE_PEER=off: no PyTorch; EVIDENCE_GPU=N: CUDA on that GPU too)
      if [ "${EVIDENCE_PEER:-on}" != off ]; then
        cuda=()
        [ -z "${EVIDENCE_GPU:-}" ] ||
          cuda=(env CUDA_DEVICE_ORDER=PCI_BUS_ID "CUDA_VISIBLE_DEVICES=$EVIDENCE_GPU")
        "${cuda[@]}" timeout -k 10 "$limit" python3 scripts/peers/torch_cold_reads.py --layers 48 \
          --out "$out/torch-cold-reads.json" 2>&1 | tee "$out/torch-cold-reads.txt"
      fi
      for round in 1 2; do
        for v in "each:" "arena:--weight-placement arena" \
          "arena-kv:--weight-placement arena --kv-placement arena"; do
          run perf-decode --model $model --batch "${EVIDENCE_COLD_BATCH:-1,8,64}" --ctx 1024 \
            --kv-cache-gb "${EVIDENCE_KV_GB:-40}" ${v#*:} \
            --json "$out/decode-${v%%:*}-$round.json" >"$out/decode-${v%%:*}-$round.txt" 2>&1
          grep -E "^[0-9]+ x [0-9]+: GPU" "$out/decode-${v%%:*}-$round.txt" | sed "s/^/${v%%:*}: /"
        done
      done
      ;;
    dp)
      log "two ranks in lockstep (one GPU each where the host has two)"
      nvidia-smi -L >"$out/gpus.txt" 2>&1
      # kvwarm on with short chains, so the stage settlement rounds show within the bound
      run_bench --model $model --mode decode --grid medium --kv-cache-gb ${EVIDENCE_KV_GB:-40} \
        --dp 2 --kvwarm on --content text $limits --out "$out/bench-dp.json" 2>&1 | tee "$out/bench-dp.txt" | tail -20
      ;;
    *)
      echo "unknown stage $stage (validate perf attention bench kvwarm library fidelity logits dp tasks coldread)" >&2
      ;;
  esac
done
log "done"
