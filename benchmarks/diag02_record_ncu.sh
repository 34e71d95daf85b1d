#!/usr/bin/env bash
# diag-02: record Nsight Compute raw-page CSVs of the kernels in benchmarks/diag02_kernels.py (run on the H200).
#
#   bash benchmarks/diag02_record_ncu.sh modules/11-diagnostics/02-ncu-bottleneck/fixtures/h200
#
# One ncu run per kernel: the script launches it twice, ncu profiles the second launch only (--launch-skip 1
# --launch-count 1, filtered by kernel name). The sections are the ones whose rules the lesson re-implements
# (SpeedOfLight -> SOLBottleneck, LaunchStats -> Tail Effect, Occupancy -> TheoreticalOccupancy,
# MemoryWorkloadAnalysis_Tables -> SharedMemoryConflicts); --metrics adds the counters no section prints as totals
# (DRAM bytes and the FP32 thread-instruction counts of NCU's roofline). --print-units base keeps every value in base
# units (byte, nsecond), which is what the lesson's reader accepts. Needs ncu on PATH and permission to read GPU
# performance counters (root, or the driver's NVreg_RestrictProfilingToAdminUsers=0).
set -euo pipefail
out=${1:?usage: $0 OUT_DIR}
mkdir -p "$out"
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python}

metrics=dram__bytes.sum
metrics+=,smsp__sass_thread_inst_executed_op_fadd_pred_on.sum
metrics+=,smsp__sass_thread_inst_executed_op_fmul_pred_on.sum
metrics+=,smsp__sass_thread_inst_executed_op_ffma_pred_on.sum
metrics+=,smsp__sass_inst_executed_op_shared_ld.sum,smsp__sass_inst_executed_op_shared_st.sum
metrics+=,smsp__inst_executed_op_ldsm.sum
metrics+=,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum
metrics+=,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum
metrics+=,smsp__maximum_warps_avg_per_active_cycle,smsp__warps_active.avg.peak_sustained

declare -A kernel=(  # case -> ncu --kernel-name filter
  [copy]=regex:^copy_f32$
  [gemm]='regex:gemm|nvjet|xmma|cutlass'
  [tiny]=regex:^tiny_add$
  [occ]=regex:^smem_hog$
  [transpose]=regex:^transpose_naive$
  [tail]=regex:^fma_tail$
)

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  ncu --version | tail -n 1
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
} > "$out/recorded.txt"

for case in copy gemm tiny occ transpose tail; do
  echo "== $case" >&2
  ncu --section SpeedOfLight --section LaunchStats --section Occupancy --section MemoryWorkloadAnalysis_Tables \
      --metrics "$metrics" --kernel-name "${kernel[$case]}" --launch-skip 1 --launch-count 1 \
      --csv --page raw --print-units base \
      "$py" "$here/diag02_kernels.py" "$case" > "$out/$case.raw.txt"
  # keep the table (quoted lines) and the GEMM's FLOP count line; drop ==PROF== and program chatter
  grep '^"' "$out/$case.raw.txt" > "$out/$case.csv"
  grep '^{"gemm_flops"' "$out/$case.raw.txt" > "$out/gemm_flops.json" || true
  rm "$out/$case.raw.txt"
done
[ -s "$out/gemm_flops.json" ] || rm -f "$out/gemm_flops.json"
echo "wrote $out" >&2
