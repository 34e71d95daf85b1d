#!/usr/bin/env bash
# Issue 26 part 3: grade the GPU-path lessons of modules 02 (cuda-10..17), 04, 06 and 07 on the H200 with
# their references and the round-2 variants (docs/validity/round2/variants), to compare with the CPU grades.
# Run on the GPU machine from the repository root, with .whl carried: nvidia-cutlass (pycute + CuTe headers) and
# tomli-w (a dependency of the package since the split; not on the device image).
# Writes $OUT/attack.tgz (one JSON and one log per lesson) and $OUT/log.
set -u
OUT=${OUT:-/tmp/h200-attack}
mkdir -p "$OUT/attack"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD HPCCOURSE_CUDA=gpu PYTHONUNBUFFERED=1
python3 -c "import torch, cupy, triton; print(torch.__version__, cupy.__version__, triton.__version__, torch.cuda.get_device_name())"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader

declare -A DIR=(
  [cuda-10]=02-cuda/10-register-gemm [cuda-11]=02-cuda/11-wmma [cuda-12]=02-cuda/12-fp8-gemm
  [cuda-13]=02-cuda/13-grouped-gemm [cuda-14]=02-cuda/14-moe-dispatch [cuda-15]=02-cuda/15-flow-matching
  [cuda-16]=02-cuda/16-voxelize [cuda-17]=02-cuda/17-fake-quant [cute-05]=04-cutlass/05-tiled-copy
  [cute-06]=04-cutlass/06-tiled-mma [infer-03]=07-inference/03-paged-attention [runtime-01]=06-runtime/01-dispatcher
)
LESSONS=${LESSONS:-"cuda-10 cuda-11 cuda-12 cuda-13 cuda-14 cuda-15 cuda-16 cuda-17 cute-05 cute-06 infer-03 runtime-01"}

# 1. the references, graded as a learner's `pytest --course-report` would grade them
paths=()
for id in $LESSONS; do paths+=("modules/${DIR[$id]}"); done
python3 -m pytest "${paths[@]}" -p pytest_hpccourse.plugin -p no:cacheprovider -n 12 -q --course-report \
  --course-json "$OUT/attack/references.json" -rs 2>&1 | tail -40

# 2. every round-2 variant, each in its own copy
for id in $LESSONS; do
  for f in docs/validity/round2/variants/"$id".toml docs/validity/round2/variants/"$id".extra.toml; do
    [ -f "$f" ] || continue
    name=$(basename "$f" .toml)
    python3 -m pytest_hpccourse.cli attack "modules/${DIR[$id]}" "$f" -j 8 --timeout 300 \
      --json "$OUT/attack/$name.json" > "$OUT/attack/$name.log" 2>&1
    tail -3 "$OUT/attack/$name.log"
  done
done
tar czf "$OUT/attack.tgz" -C "$OUT" attack
