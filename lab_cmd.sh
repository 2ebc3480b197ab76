#!/bin/bash
# lab only (untracked): unpack the bundle, run lab_stages.sh, tar results after each stage
set -u
mkdir -p /tmp/u /tmp/r && tar -C /tmp/u -xf dist/webfpm-linux-x64.tar
export R=/tmp/u/webfpm/run XDG_RUNTIME_DIR=/tmp M=synthetic:qwen3-30b-a3b
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export LIM="--max-num-seqs 32 --max-model-len 2600 --max-num-batched-tokens 2048"
export WEBFPM_CWD=$PWD
T0=$(date +%s)
stage() {
  local lim=$1; shift
  local name=$1; shift
  echo "=== [$(( $(date +%s) - T0 ))s] $name: $*" | tee -a /tmp/r/log.txt
  timeout -k 5 "$lim" "$@" > "/tmp/r/$name.txt" 2>&1
  echo "--- rc=$? [$(( $(date +%s) - T0 ))s]" | tee -a /tmp/r/log.txt
  tail -n 40 "/tmp/r/$name.txt"
  tar -C /tmp -cf "$OUT/results.tar" r
}
export -f stage
export T0
source ./lab_stages.sh
