mkdir -p /tmp/lab
export EVIDENCE_LIMIT=220 EVIDENCE_TASK_TAIL=20 EVIDENCE_PEER=benchmarks/peer-h200-2026-11-30
D="perf-decode --model synthetic:qwen3-30b-a3b --kv-cache-gb 20 --batch 64,128 --ctx 1024"
T1="$D --json OUT/d-default.json;$D --moe-tensor-core-rows 2 --json OUT/d-moetc2.json --profile 128x1024 --profile-json OUT/p-moetc2.json"
EVIDENCE_GPU=0 timeout -k 5 330 scripts/gpu_evidence.sh /tmp/lab/gpu0 perf >/tmp/lab/gpu0.log 2>&1 &
EVIDENCE_GPU=1 EVIDENCE_TASKS="$T1" timeout -k 5 330 scripts/gpu_evidence.sh /tmp/lab/gpu1 tasks >/tmp/lab/gpu1.log 2>&1 &
wait
tail -n 3 /tmp/lab/gpu0.log /tmp/lab/gpu1.log; tar czf $OUT/lab.tgz -C /tmp lab
