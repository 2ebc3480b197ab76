P="--batch 32,64,128 --ctx 1024"
stage 120 probe $R probe-sgmat
stage 150 validate $R validate --kernel moe_gemm_gate_up_tc,moe_gemm_down_tc --variant f16-tcsr --max-bytes 100000000
stage 120 ab_tcs_1 $R perf-decode $P --moe-tensor-core-decode tcs --steps 8
stage 120 ab_tcsr_1 $R perf-decode $P --moe-tensor-core-decode tcsr --steps 8 --profile 64x1024 --profile-json /tmp/r/prof-tcsr-64x1024.json
stage 120 ab_tcs_2 $R perf-decode $P --moe-tensor-core-decode tcs --steps 8
stage 120 ab_tcsr_2 $R perf-decode $P --moe-tensor-core-decode tcsr --steps 8
