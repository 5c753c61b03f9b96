#!/usr/bin/env bash
# The paper path on one GPU (issue 28), as one prepared run of under 8 minutes on a lent H200:
#   1. the kit's missing packages from carried wheels (benchmarks/gpu_wheels.sh, run first on a networked machine)
#   2. the three stand-ins built on CUDA (envs/bfcl/standins.py)
#   3. each paper profile rehearsed in bf16 on CUDA: one process under DeepSpeed ZeRO-3
#      (configs/accelerate/zero3_1gpu.yaml), its rollouts on the continuous-batching engine (rollout.engine auto on
#      CUDA) inside the ZeRO-3-gathered policy, a resume and an evaluation (training/rehearsal.py)
#   4. generated tokens/s of the continuous-batching engine against plain HF generate, on the Qwen3 stand-in
# and prints one table. Run through the device tool from the repository root:
#   run(command="bash benchmarks/gpu_check.sh", carry=[".whl", ".cache/bfcl"], timeout_s=540)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/gpu_check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 COEVOLVE_TORCH_THREADS=4
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "carried wheels did not install (run benchmarks/gpu_wheels.sh here first)"; exit 1; }
DS_BUILD_OPS=0 python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/site \
    .whl/deepspeed-*.tar.gz || echo "deepspeed did not build: the ZeRO-3 rehearsals will fail"
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name(0))" \
    || exit 1
python3 -c "from coevolve_lib.envs.bfcl import standins; print(standins.build_all())" 2>&1 | tail -3 | tee "$OUT/standins.log"
for profile in paper-qwen3-4b paper-qwen2.5-7b paper-qwen3-30b-a3b; do
    timeout 150 python3 -m coevolve_lib rehearse --profile "$profile" --out "$OUT/$profile" \
        --set training.launch.num_processes=1 --set training.launch.accelerate_config=configs/accelerate/zero3_1gpu.yaml \
        --set training.dtype=bfloat16 \
        > "$OUT/$profile.log" 2>&1 || echo "$profile: rehearsal failed, see $OUT/$profile.log (tail below)"
    tail -3 "$OUT/$profile.log"
done
timeout 120 python3 benchmarks/bench_rollout_tokens.py --model .cache/models/standin-qwen3-4b --device cuda \
    --tasks 32 --samples 8 --tool-docs compact --max-new-tokens 48 --engines continuous_batching,generate --repeats 2 \
    > "$OUT/tokens.txt" 2>&1 || echo "tokens/s benchmark failed"
python3 - "$OUT" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
print("| profile | architecture | seconds | tool calls parsed | rounds | resumed | evaluated |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for path in sorted(out.glob("paper-*/rehearsal.json")):
    r = json.loads(path.read_text())
    print(f"| {r['profile']} | {r['architecture']} | {r['seconds']} | {r['tool_calls_parsed']} | {r['rounds']} | "
          f"{r['resumed']} | {r['evaluated']} |")
print((out / "tokens.txt").read_text()[-1500:] if (out / "tokens.txt").exists() else "no tokens/s table")
PY
