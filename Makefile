# Two commands do everything on a fresh machine: `make test` and `make bench`.
# The virtual environment is created once and reused (the stamp file tracks pyproject.toml).
#
# torch: a CPU-only machine without torch gets the pinned CPU wheel (TORCH_PIN); a machine whose
# python3 already imports torch (a GPU box) reuses it through --system-site-packages, so a
# multi-GB CUDA build is never pulled in by accident.

PYTHON      ?= python3
VENV        ?= .venv
TORCH_PIN   ?= torch==2.13.0
TRITON_PIN  ?= triton==3.9.0
PY          := $(VENV)/bin/python
STAMP       := $(VENV)/.installed
PYTEST_ARGS ?= -n auto --dist worksteal  # one worker per core; idle workers take tests from busy ones

.PHONY: help venv test rehearse compat bench probe gpu-compile gpu-check gpu-run gpu-prep gpu-cache gpu-wheels regress regress-update lint format clean

help:
	@echo "make test    create/reuse $(VENV), install, run the whole test suite"
	@echo "make rehearse  the GPU run rehearsed on this CPU, on the box's stack (CI runs it)"
	@echo "make bench   same set-up, then python -m bench \$$ARGS (the default sweep; results/runs/)"
	@echo "make probe   same set-up, then python -m bench.probe \$$ARGS: the length-generalization probe (8.5 min on 2 cores)"
	@echo "make gpu-compile  every kernel the GPU runs launch, compiled for sm_90a and sm_80 here (Triton 3.9 and 3.6)"
	@echo "make gpu-check  on a CUDA machine: the kernel tests on the GPU, then python -m bench sweep=gpu"
	@echo "make gpu-run   the whole GPU run in one call: python3 -m tools.gpurun (docs/gpu.md)"
	@echo "make gpu-prep  what that call carries: .whl/ (make gpu-wheels), .triton-cache/ (make gpu-cache), .audit/"
	@echo "make gpu-cache  the GPU run's harness kernels compiled for sm_90a on the box's stack (a warm Triton cache)"
	@echo "make gpu-wheels  wheels of hydra-core, omegaconf, antlr4, liger-kernel, nvidia-ml-py (Python 3.12) into .whl/"
	@echo "make regress BASE=<ref>  the CPU timing gate: <ref>'s library against this tree's, side by side"
	@echo "make regress  the same suite against the stored results/baselines/cpu.json (exit 1 on regression)"
	@echo "make regress-update  re-measure the baseline (DEVICE=cuda: this GPU's; review the diff before committing it)"
	@echo "make compat  the kernel tests on the GPU box's stack (torch 2.11, Triton $(COMPAT_TRITON)), interpreted"
	@echo "make lint    ruff check + format check"
	@echo "make clean   remove the venv, caches and scratch outputs (keeps committed results)"

venv: $(STAMP)

$(STAMP): pyproject.toml
	@if $(PYTHON) -c "import torch" >/dev/null 2>&1; then \
	    echo "[venv] reusing torch from $(PYTHON): $$($(PYTHON) -c 'import torch; print(torch.__version__)')"; \
	    $(PYTHON) -m venv --system-site-packages $(VENV); \
	else \
	    echo "[venv] no torch on $(PYTHON): installing $(TORCH_PIN) (CPU wheel) and $(TRITON_PIN)"; \
	    $(PYTHON) -m venv $(VENV) && \
	    $(VENV)/bin/python -m pip install -q $(TORCH_PIN) $(TRITON_PIN); \
	fi
	$(VENV)/bin/python -m pip install -q -e '.[test]'
	@touch $@

test: $(STAMP)
	$(PY) -m pytest -m "not rehearsal" $(PYTEST_ARGS)

# The reference GPU machine's stack (docs/gpu.md): Python 3.12, torch 2.11, Triton 3.6 and the packages its
# image has, older than CI's torch 2.13 and Triton 3.9. The kernel tests run there under Triton
# 3.6's interpreter (make compat), the GPU run is rehearsed there (make rehearse), and the
# compile audit compiles there too, so a language feature, an API or a package the box lacks fails
# here before any GPU time is spent. hydra-core, omegaconf and liger-kernel are not installed: the
# GPU run unpacks them from the carried wheels, as on the box. torch 2.11 from PyPI is a CUDA build
# (about 5 GB with its libraries; it runs on a CPU). numpy < 2.3: Triton 3.6's interpreter turns
# 1-element arrays into ints, which newer numpy refuses (the box runs no interpreter).
COMPAT_VENV   ?= .venv-compat
COMPAT_TORCH  ?= torch==2.11.0
COMPAT_TRITON ?= 3.6.0
COMPAT_PYTHON ?= $(shell for p in $$HOME/.pyenv/versions/3.12*/bin/python3.12 python3.12; do \
	$$p -c "" >/dev/null 2>&1 && { echo $$p; exit; }; done; echo $(PYTHON))

$(COMPAT_VENV)/.installed:
	@test -x $(COMPAT_VENV)/bin/python || $(COMPAT_PYTHON) -m venv $(COMPAT_VENV)
	$(COMPAT_VENV)/bin/python -m pip install -q $(COMPAT_TORCH) triton==$(COMPAT_TRITON) 'numpy<2.3' \
		pandas==3.0.6 pyarrow matplotlib tqdm pyyaml scipy pytest pytest-xdist pytest-benchmark
	@$(COMPAT_VENV)/bin/python -c "import platform, torch, triton; \
		print('[compat]', 'python', platform.python_version(), 'torch', torch.__version__, 'triton', triton.__version__)"
	@touch $@

compat: $(COMPAT_VENV)/.installed
	TRITON_INTERPRET=1 $(COMPAT_VENV)/bin/python -m pytest -q -p no:cacheprovider -p no:warnings \
		$(PYTEST_ARGS) tests/posenc_kernels

# The GPU run rehearsed on this CPU on the box's stack (python3 -m tools.gpurun --smoke: every
# part, in order, under Triton's interpreter, the carried wheels and cache unpacked; 4-5 minutes):
# CI runs it after make gpu-cache (docs/gpu.md). The test runs in $(VENV), the GPU run in the box's.
rehearse: $(STAMP) $(COMPAT_VENV)/.installed gpu-wheels
	REHEARSE_PYTHON=$(COMPAT_VENV)/bin/python $(PY) -m pytest -q -m rehearsal tests/tools/gpurun

# Every kernel specialization the GPU runs launch, compiled for sm_90a and sm_80 on this CPU
# under CI's Triton and the GPU box's, read from the cubins (docs/kernels.md): both tables
# written, then exit 1 if either audit failed a kernel (docs/kernels.md lists the rules).
# GPU_COMPILE_TARGETS: the targets under this venv's Triton (the GPU stack's always takes both).
GPU_COMPILE_JOBS ?= 2
GPU_COMPILE_TARGETS ?= sm_90a,sm_80
gpu-compile: $(STAMP) $(COMPAT_VENV)/.installed
	@status=0; \
	$(PY) -m tools.audit --jobs $(GPU_COMPILE_JOBS) --targets $(GPU_COMPILE_TARGETS) || status=1; \
	$(COMPAT_VENV)/bin/python -m tools.audit --jobs $(GPU_COMPILE_JOBS) || status=1; \
	exit $$status

# On a CUDA machine: the kernel tests (the same CI runs under the interpreter, plus the long
# half-precision cases that only a GPU runs), then the GPU sweep (configs/sweep/gpu.yaml).
gpu-check: $(STAMP)
	$(PY) -m pytest -q tests/posenc_kernels
	$(PY) -m bench sweep=gpu

# The whole GPU run on a CUDA machine reached for a limited time (docs/gpu.md): OUT is where its
# log and results archive go (default results/gpu-run/<time>), BUDGET its seconds.
OUT ?=
BUDGET ?=
gpu-run:
	$(PYTHON) -m tools.gpurun $(if $(OUT),--out $(OUT)) $(if $(BUDGET),--budget $(BUDGET)) $(if $(PARTS),--parts $(PARTS))

# What the GPU run needs besides the checkout, made where there is network (docs/gpu.md): the
# wheels, a warm Triton cache of its harness kernels, and, when AUDIT names one, a copy of an
# independent audit script of your own (make gpu-prep AUDIT=path/to/audit.py).
AUDIT ?=
gpu-prep: gpu-wheels gpu-cache
	@mkdir -p .audit
	@if [ -n "$(AUDIT)" ] && [ -f "$(AUDIT)" ]; then cp "$(AUDIT)" .audit/audit.py && \
	echo "copied $(AUDIT) to .audit/audit.py"; else echo "no AUDIT=path: the GPU run skips the audit"; fi

# The GPU run's harness kernels compiled for sm_90a on the box's stack, each part replayed through
# Triton's JIT in a process of its own, then replayed on the archive (exit 1 on a miss): about
# 3 minutes on 2 cores, .triton-cache/cache.tgz (about 3 MB; tools/gpurun/warm.py).
gpu-cache: $(COMPAT_VENV)/.installed gpu-wheels
	$(COMPAT_VENV)/bin/python -m tools.gpurun.warm --jobs $(GPU_COMPILE_JOBS)

# What an offline GPU machine with torch, pandas and matplotlib (e.g. an H200 node, Python 3.12)
# lacks for `python -m bench`, as pure-Python wheels in .whl/ (ignored by git); there:
#   pip install --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
# antlr4-python3-runtime 4.9.3 (omegaconf's pin) is published as a source archive only: built here.
GPU_WHEELS ?= hydra-core==1.3.8 omegaconf==2.3.1 liger-kernel==0.8.5 nvidia-ml-py==13.615.71
GPU_PYTHON ?= 3.12

gpu-wheels:
	$(PYTHON) -m pip download -q --no-deps --only-binary=:all: --python-version $(GPU_PYTHON) \
		--implementation cp --platform manylinux2014_x86_64 -d .whl $(GPU_WHEELS)
	$(PYTHON) -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3
	@ls .whl

# make bench ARGS="cases=[rope] seq_len=[512,2048]": any overrides of python -m bench
ARGS ?=
bench: $(STAMP)
	$(PY) -m bench $(ARGS)

# The length-generalization probe: tiny Transformers trained per encoding, task and seed, then
# evaluated at 1x-8x their training length (bench/probe, docs/probe.md).
probe: $(STAMP)
	$(PY) -m bench.probe $(ARGS)

# The CPU timing gate (docs/regress.md). BASE=<git ref>: that commit's library against the working
# tree's, timed side by side in one job (CI's mode, about a minute); without BASE: against the
# stored baseline, for the kind of machine that measured it (exit 1 on a regression either way).
REGRESS_OUT ?= results/regress
BASE ?=
# DEVICE=cuda: the suite's GPU points against the baseline of this GPU (results/baselines/
# cuda-<gpu>.json; measured into $(REGRESS_OUT) and said where none is committed)
DEVICE ?= cpu
regress: $(STAMP)
	$(PY) -m bench.regress $(if $(BASE),--base-ref $(BASE),--baseline auto) --device $(DEVICE) \
		--out $(REGRESS_OUT) --confirm

regress-update: $(STAMP)
	$(PY) -m bench.regress --baseline auto --device $(DEVICE) --update

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format: $(STAMP)
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

clean:
	rm -rf $(VENV) $(COMPAT_VENV) build dist *.egg-info .pytest_cache .ruff_cache .benchmarks outputs multirun
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
