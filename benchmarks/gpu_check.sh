#!/usr/bin/env bash
# The paper path on one lent GPU (issues 28, 46), as one prepared run through the device tool. For a GPU node of your
# own, follow docs/gpu-first-run.md instead: this script fits a lent machine's limits, not a user's node.
#
#   bash benchmarks/gpu_check.sh [PROFILE ...]      (default: the three paper profiles)
#   run(command="bash benchmarks/gpu_check.sh", carry=[".whl", ".cache/bfcl"], timeout_s=570)
#
# Budget, in wall seconds from the script's start; every step's timeout is cut to what is left of
# GPU_CHECK_BUDGET_S (default 540, under the call's timeout_s 570 and the tool's 600 s per call):
#   set-up      <= 90   the carried wheels into /tmp/site (benchmarks/gpu_wheels.sh, run here first), DeepSpeed built
#                       with no ops, CUDA seen, every carried package's requirements met by the image or the wheels
#   stand-ins   <= 60   the stand-ins of the profiles named, built on CUDA (engine/standins.py)
#   rehearsals  <= 120 each: the profile rehearsed in bf16 on CUDA, one process under DeepSpeed ZeRO-3
#                       (configs/accelerate/zero3_1gpu.yaml), the continuous-batching engine inside the gathered
#                       policy, a real kill, the resume, the evaluation (training/rehearsal.py)
#   tokens/s    <= 60   the continuous-batching engine against plain generate, on the Qwen3 stand-in
# A lent session has 15 minutes of device time: one call of all three (570 s and a start of 1-3 min) leaves no time
# for a rerun. When a rerun matters, run one profile first with a budget half as long:
#   run(command="GPU_CHECK_BUDGET_S=270 bash benchmarks/gpu_check.sh paper-qwen3-4b", carry=[...], timeout_s=300)
# What comes back (a lent device returns at most 8 files from $OUT): summary.md (the table and each log's tail),
# setup.log, tokens.txt and one <profile>.json per profile (its rehearsal.json). The run folders (checkpoints:
# ~1.5 GB) stay in $WORK, off $OUT; the stand-ins in .cache/models.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/gpu_check}
WORK=${WORK:-/tmp/gpu_check}
BUDGET_S=${GPU_CHECK_BUDGET_S:-540}
PROFILES=("${@:-paper-qwen3-4b paper-qwen2.5-7b paper-qwen3-30b-a3b}")
read -r -a PROFILES <<< "${PROFILES[*]}"
mkdir -p "$OUT" "$WORK"
export PYTHONUNBUFFERED=1 COEVOLVE_TORCH_THREADS=4
# seconds left of the budget for a step that wants $1, 5 kept for the summary (at least 1: `timeout 0` never stops)
cap() { local left=$((BUDGET_S - SECONDS - 5)); ((left > $1)) && left=$1; ((left < 1)) && left=1; echo "$left"; }

(
    timeout "$(cap 60)" python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || { echo "carried wheels did not install (run benchmarks/gpu_wheels.sh here first)"; exit 1; }
    DS_BUILD_OPS=0 timeout "$(cap 60)" python3 -m pip install -q --no-index --no-deps --no-build-isolation \
        --target /tmp/site .whl/deepspeed-*.tar.gz || echo "deepspeed did not build: the ZeRO-3 rehearsals will fail"
    PYTHONPATH=/tmp/site python3 - <<'PY'
# Every carried package's requirements, met by the image or by another carried package (else: one line naming them).
from importlib.metadata import distributions, PackageNotFoundError, version
from packaging.requirements import Requirement
missing = set()
for dist in distributions(path=["/tmp/site"]):
    for text in dist.requires or []:
        requirement = Requirement(text)
        if requirement.marker and not requirement.marker.evaluate({"extra": ""}):
            continue
        try:
            version(requirement.name)
        except PackageNotFoundError:
            missing.add(f"{requirement.name} (for {dist.metadata['Name']})")
print("requirements: all met" if not missing else f"requirements: MISSING {', '.join(sorted(missing))}")
PY
    python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; print(torch.cuda.get_device_name(0))"
) > "$OUT/setup.log" 2>&1 || { cat "$OUT/setup.log"; exit 1; }
cat "$OUT/setup.log"
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH

timeout "$(cap 60)" python3 - "${PROFILES[@]}" <<'PY' || echo "stand-ins did not build"
import sys
from coevolve_lib.engine import standins
from coevolve_lib.training.rehearsal import rehearsal_run
print(standins.build_all([rehearsal_run(profile)[0].model for profile in sys.argv[1:]]))
PY
for profile in "${PROFILES[@]}"; do
    timeout "$(cap 120)" python3 -m coevolve_lib rehearse --profile "$profile" --out "$WORK/$profile" \
        --set training.launch.num_processes=1 --set training.launch.accelerate_config=configs/accelerate/zero3_1gpu.yaml \
        --set training.dtype=bfloat16 > "$WORK/$profile.log" 2>&1 || echo "$profile: rehearsal failed (rc $?)"
    cp "$WORK/$profile/rehearsal.json" "$OUT/$profile.json" 2>/dev/null
done
timeout "$(cap 60)" python3 benchmarks/bench_rollout_tokens.py --model .cache/models/standin-qwen3-4b --device cuda \
    --tasks 32 --samples 8 --tool-docs compact --max-new-tokens 48 --engines continuous_batching,generate --repeats 2 \
    > "$OUT/tokens.txt" 2>&1 || echo "tokens/s benchmark failed or ran out of budget"
python3 - "$OUT" "$WORK" "${PROFILES[@]}" <<'PY' | tee "$OUT/summary.md"
import json, sys
from pathlib import Path
out, work, names = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
print("| profile | architecture | seconds | tool calls parsed | weights moved | rounds | failed checks |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for name in names:
    path = out / f"{name}.json"
    if not path.exists():
        print(f"| {name} | - | - | - | - | - | no rehearsal.json |")
        continue
    r = json.loads(path.read_text())
    print(f"| {name} | {r['architecture']} | {r['seconds']} | {r['tool_calls_parsed']} | {r['weights_moved']} | "
          f"{r['rounds']} | {'; '.join(r['failed_checks']) or 'none'} |")
for name in names:
    log = work / f"{name}.log"
    print(f"\n{name}.log, last lines:\n" + "\n".join(log.read_text(errors="replace").splitlines()[-15:])
          if log.exists() else f"\nno {name}.log")
print("\n" + ((out / "tokens.txt").read_text()[-1500:] if (out / "tokens.txt").exists() else "no tokens/s table"))
PY
echo "gpu_check: ${SECONDS} s of a ${BUDGET_S} s budget"
