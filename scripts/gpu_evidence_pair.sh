#!/usr/bin/env bash
# Two evidence runs side by side on a host with two NVIDIA GPUs, one per GPU (each pinned
# through EVIDENCE_GPU), within one bound; then one archive of everything for the caller:
#   scripts/gpu_evidence_pair.sh OUTDIR SECONDS "STAGES ON GPU 0" "STAGES ON GPU 1"
#   e.g. scripts/gpu_evidence_pair.sh /tmp/ev 540 "bench fidelity" "kvwarm validate"
# writes OUTDIR/gpu0/, OUTDIR/gpu1/, their logs, nvidia-smi snapshots and OUTDIR.tgz.
set -uo pipefail
out=${1:?usage: scripts/gpu_evidence_pair.sh OUTDIR SECONDS STAGES0 STAGES1}
bound=${2:?seconds}
mkdir -p "$out"
here=$(dirname "$0")
# shellcheck disable=SC2086
EVIDENCE_GPU=0 timeout -k 5 "$bound" "$here/gpu_evidence.sh" "$out/gpu0" $3 >"$out/gpu0.log" 2>&1 &
# shellcheck disable=SC2086
EVIDENCE_GPU=1 timeout -k 5 "$bound" "$here/gpu_evidence.sh" "$out/gpu1" $4 >"$out/gpu1.log" 2>&1 &
sleep 60
nvidia-smi >"$out/nvidia-smi.txt" 2>&1
wait
tail -n 5 "$out/gpu0.log" "$out/gpu1.log"
tar czf "$out.tgz" -C "$(dirname "$out")" "$(basename "$out")"
echo "wrote $out.tgz"
