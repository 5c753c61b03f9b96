#!/usr/bin/env bash
# The rollout engines on one GPU, as one prepared run (issue 11): the continuous-batching engine against the true
# lower bound and plain generate, and the re-feeding engine it replaces, with SmolLM2-135M at 32 tasks x 8 samples
# on BFCL's multi-turn train tasks; then the warm-started tiny policy on its D_0 pool. Needs the kit's venv
# (`make setup`) on the GPU machine; prints the benchmark tables and writes their JSON lines to $OUT (default .).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-.}
PY=.venv/bin/python
$PY -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name(0))"
$PY benchmarks/bench_rollout_tokens.py --model smollm2-135m --device cuda --pool bfcl --tasks 32 --samples 8 \
    --engines continuous_batching,generate --repeats 3 | tee "$OUT/rollout_smollm2_cuda.txt"
$PY benchmarks/bench_rollout_tokens.py --model coevolve_lib/data/warm_start/tiny --device cuda --tasks 16 --samples 4 \
    --engines continuous_batching,kv_cache,generate --repeats 3 | tee "$OUT/rollout_tiny_cuda.txt"
