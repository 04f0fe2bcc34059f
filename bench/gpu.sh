#!/usr/bin/env bash
# The GPU run (issue: GPU figures), on a lent GPU machine: Python 3.12 with torch, transformers,
# PEFT and accelerate, no network. Here, once: download the wheels it lacks into .whl/ (ignored):
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d .whl \
#     trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 peft==0.21.2 transformers==5.24.0
# There: bench/gpu.sh [OUT_DIR [--only grpo]]   (writes gpu_table.md and gpu_results.json to OUT_DIR)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
fi
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
exec python3 bench/gpu.py --out "${1:-${OUT:-bench-gpu-out}}" "${@:2}"
