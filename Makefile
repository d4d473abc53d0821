# Build, test and demo targets for the _ext extensions.
#
#   make            build every _ext module (build.py: nvcc objects, then cffi)
#   make demo       run scripts/roc11.py on the embedded data set, write a ROC PNG
#   make test       the test suite (GPU tests are skipped where no GPU is present)
#   make test-sanitize   the CPU tests against an ASan + UBSan build of the C shims
#   make fuzz       the property-based tests with the long Hypothesis profile
#   make compare-mxnet   the legacy ROC of MXNet 1.9.1 and of _ext.roc side by side
#   make help       this list, with the variables you can override
#
# Set-up from nothing: without PYTHON=..., the first target that needs Python
# makes a virtual environment in .venv and installs torch (CPU build, pinned,
# first) and the requirements into it. With PYTHON=/path/to/python, nothing is
# installed: that interpreter must already have what requirements.txt lists.
#
# MXNet (for the comparison) lives in a second environment, .venv-mxnet: MXNet
# 1.9.1 needs NumPy < 1.24, the project NumPy 2. `make compare-mxnet` creates
# it (requirements-mxnet.txt); `make test` tries to, and where it cannot (no
# PyPI, say) the comparison test skips and says why. `make test PYTHON=...`
# installs nothing: it uses .venv-mxnet (or MXNET_PYTHON) if it is there.

# ---------------------------------------------------------------------------
# overridable settings

# Interpreter to build and run with. Empty: the project's own .venv.
PYTHON ?=
# Interpreter that creates .venv.
BOOTSTRAP_PYTHON ?= python3
TORCH_VERSION ?= 2.13.0
# The toolkit and architectures: build.py reads CUDA_HOME, NVCC, CUDA_ARCH and
# NVCC_FLAGS from the environment or from make's command line, the same way
# `pip install .` does (build.py's docstring; `make help` shows what it finds):
#   make CUDA_ARCH=90    make CUDA_ARCH="80 90" CUDA_HOME=/opt/cuda-12.4    make NVCC=

# pytest arguments, e.g. make test PYTEST_ARGS="-k legacy -x"
PYTEST_ARGS ?=
# Interpreter with MXNet 1.9.1 for the comparison. Default: .venv-mxnet's,
# created and filled on first use; another one is used as it is.
MXNET_PYTHON ?= $(CURDIR)/.venv-mxnet/bin/python
# Interpreter that creates .venv-mxnet (NumPy 1.23.5 has wheels for 3.8-3.11).
MXNET_BOOTSTRAP_PYTHON ?= $(BOOTSTRAP_PYTHON)
# compare_mxnet.py arguments, e.g. COMPARE_ARGS="query.npz gallery.npz"
COMPARE_ARGS ?=

# ---------------------------------------------------------------------------
# derived

VENV := .venv
ifeq ($(strip $(PYTHON)),)
  PY := $(VENV)/bin/python
  PY_READY := $(VENV)/.installed
else
  PY := $(PYTHON)
  PY_READY :=
endif

MXNET_VENV := .venv-mxnet
MXNET_STAMP := $(MXNET_VENV)/.installed
MXNET_LOG := $(MXNET_VENV).log
ifeq ($(MXNET_PYTHON),$(CURDIR)/$(MXNET_VENV)/bin/python)
  MXNET_READY := $(MXNET_STAMP)
  # make test (project venv only) sets .venv-mxnet up where it can
  MXNET_TRY := $(if $(PY_READY),mxnet-try)
else
  MXNET_READY :=
  MXNET_TRY :=
endif

# help needs only a Python, not the project's environment
HELP_PY := $(if $(strip $(PYTHON)),$(PYTHON),$(BOOTSTRAP_PYTHON))
# the interpreter's path from another directory (test-sanitize runs in its tree)
PY_ABS := $(if $(findstring /,$(PY)),$(abspath $(PY)),$(PY))

# make test-sanitize: a CPU-only build with ASan and UBSan in a tree of its own
SANITIZE_ROOT := build/sanitize
# what the sanitized tests read besides the package (the package is build.py's)
SANITIZE_COPIES := tests scripts src build.py pytest.ini pyproject.toml README.md BENCHMARKS.md docs benchmarks
FUZZ_TESTS := $(wildcard tests/*/test_fuzz_*.py)

.PHONY: all build demo test test-gpu test-sanitize fuzz bench compare-mxnet clean distclean \
        help venv $(MXNET_VENV) mxnet-try

all: build

# ---------------------------------------------------------------------------
# Python environment

venv: $(PY_READY)

$(VENV)/.installed: requirements.txt
	$(BOOTSTRAP_PYTHON) -m venv $(VENV)
	@# torch first and pinned: a later unpinned requirement must find it installed
	$(VENV)/bin/python -m pip install --quiet torch==$(TORCH_VERSION)
	$(VENV)/bin/python -m pip install --quiet -r requirements.txt
	touch $@

# The MXNet side of the comparison: its own venv, never mixed with .venv. The
# stamp is written only once `import mxnet` works and mx.nd.histogram runs.
$(MXNET_VENV): $(MXNET_STAMP)

# A venv left half-made (pip failed) would pass for MXNet's interpreter, so a
# failure removes it (and compare_mxnet.py trusts .venv-mxnet only with the stamp).
$(MXNET_STAMP): requirements-mxnet.txt
	rm -rf $(MXNET_VENV)
	$(MXNET_BOOTSTRAP_PYTHON) -m venv $(MXNET_VENV) && \
	$(MXNET_VENV)/bin/python -m pip install --quiet -r requirements-mxnet.txt && \
	$(MXNET_VENV)/bin/python -c "import mxnet as mx; \
	    mx.nd.histogram(mx.nd.array([0.5]), bins=mx.nd.array([0.0, 1.0]))[0].asnumpy()" \
	    || { rm -rf $(MXNET_VENV); exit 1; }
	touch $@

# For make test: set up .venv-mxnet if it is not, tolerating failure (the
# comparison test then skips, quoting the log); quiet when it is up to date.
mxnet-try:
	@if ! $(MAKE) --no-print-directory -q $(MXNET_STAMP) 2>/dev/null; then \
	    echo "setting up $(MXNET_VENV) for the MXNet comparison test (log: $(MXNET_LOG))"; \
	    if $(MAKE) --no-print-directory $(MXNET_STAMP) > $(MXNET_LOG) 2>&1; then \
	        rm -f $(MXNET_LOG); \
	    else \
	        echo "could not set up $(MXNET_VENV) (see $(MXNET_LOG)): the MXNet comparison" \
	             "test will skip"; \
	    fi; \
	fi

# ---------------------------------------------------------------------------
# build.py: the nvcc step (src/cuda/*.cu -> build/*.o), then the cffi modules
# under _ext/, linked against those objects. It rebuilds only what changed
# (sources, headers, flags, architectures), so every target can run it.

build: $(PY_READY)
	$(PY) build.py

# ---------------------------------------------------------------------------
# run

demo: build
	$(PY) scripts/roc11.py --out roc_demo.png

test: build $(MXNET_TRY)
	MXNET_PYTHON="$(MXNET_PYTHON)" $(PY) -m pytest -q tests $(PYTEST_ARGS)

# GPU tests only; fails (rather than skipping) when no GPU is visible.
test-gpu: build
	$(PY) -m pytest -q -m gpu --require-gpu tests $(PYTEST_ARGS)

# The CPU tests against C shims built with ASan and UBSan, in build/sanitize
# (the modules in _ext/ are left alone). The runtimes must be preloaded:
# python itself is not instrumented. detect_leaks=0: Python never frees some
# of its own allocations; allocator_may_return_null=1: a request too large for
# ASan's allocator fails as malloc's does (tests ask torch for such tensors and
# expect its out-of-memory error). Any finding aborts the run; --capture=sys leaves
# the sanitizers' report on the terminal. The install test is left out (it
# runs pip and compilers, not our C code).
test-sanitize: $(PY_READY)
	$(PY) build.py --sanitize --out-root $(SANITIZE_ROOT)
	cd $(SANITIZE_ROOT) && rm -rf $(SANITIZE_COPIES)
	cp -r $(SANITIZE_COPIES) $(SANITIZE_ROOT)/
	runtimes="$$($(PY) build.py --sanitizer-runtimes)" && cd $(SANITIZE_ROOT) && \
	    LD_PRELOAD="$$runtimes" ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 \
	    UBSAN_OPTIONS=print_stacktrace=1 \
	    $(PY_ABS) -m pytest -q -p no:cacheprovider --capture=sys -m "not gpu" \
	        --ignore=tests/builds/test_install.py tests $(PYTEST_ARGS)

# Property-based tests (tests/*/test_fuzz_*.py) with the long Hypothesis profile.
fuzz: build
ifeq ($(FUZZ_TESTS),)
	@echo "no tests/*/test_fuzz_*.py yet: nothing to fuzz"
else
	HYPOTHESIS_PROFILE=fuzz $(PY) -m pytest -q $(FUZZ_TESTS) $(PYTEST_ARGS)
endif

# Benchmarks on the GPU: the ROC evaluators, the 1:N ranking and the further
# ops beside their peers -> BENCHMARKS.md
bench: build build/libroc_blog.so
	$(PY) scripts/bench_roc.py --markdown BENCHMARKS.md
	$(PY) scripts/bench_rank.py --markdown BENCHMARKS.md
	$(PY) scripts/bench_ops.py --markdown BENCHMARKS.md
	$(PY) scripts/bench_calls.py --markdown BENCHMARKS.md

# the blog's 2018 kernel, the peer of bench_roc.py (kept apart from the library)
build/libroc_blog.so: dev/cuda/roc_blog.cu $(PY_READY)
	$(PY) build.py --shared-library $< $@

# MXNet 1.9.1 and _ext.roc on the same files (default: the embedded data set)
compare-mxnet: build $(MXNET_READY)
	$(PY) scripts/compare_mxnet.py --mxnet-python "$(MXNET_PYTHON)" $(COMPARE_ARGS)

clean:
	rm -rf build _ext/*/_*.so _ext/*/_*.c _ext/*/_*.o roc_demo.png *.egg-info
	find . -name __pycache__ -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) $(MXNET_VENV) $(MXNET_LOG)

help:
	@echo "targets:"
	@echo "  make            build the _ext modules (nvcc objects + cffi)"
	@echo "  make demo       roc11.py on the embedded data set -> roc_demo.png"
	@echo "  make test       test suite (GPU tests skip without a GPU)"
	@echo "  make test-gpu   GPU tests only (needs a GPU)"
	@echo "  make test-sanitize  CPU tests against an ASan + UBSan build in $(SANITIZE_ROOT)"
	@echo "  make fuzz       tests/*/test_fuzz_*.py with HYPOTHESIS_PROFILE=fuzz (5000 examples)"
	@echo "  make bench      benchmarks beside the peers on the GPU -> BENCHMARKS.md"
	@echo "  make compare-mxnet  MXNet 1.9.1 vs _ext.roc, legacy histograms side by side"
	@echo "                  (creates .venv-mxnet; COMPARE_ARGS=\"query.npz gallery.npz\")"
	@echo "  make .venv-mxnet    only set up the MXNet environment (requirements-mxnet.txt)"
	@echo "  make clean      remove build outputs and generated modules"
	@echo "  make distclean  clean, and remove .venv and .venv-mxnet"
	@echo "  (pip install . builds the same modules: README, Install)"
	@echo "variables:"
	@echo "  PYTHON=$(PYTHON)  (empty: .venv, created and filled on first use)"
	@echo "  CUDA_HOME, NVCC, CUDA_ARCH, NVCC_FLAGS  (read by build.py; now:)"
	@$(HELP_PY) build.py --show-config | sed 's/^/    /'
	@echo "  PYTEST_ARGS=$(PYTEST_ARGS)"
	@echo "  MXNET_PYTHON=$(MXNET_PYTHON)"
	@echo "  MXNET_BOOTSTRAP_PYTHON=$(MXNET_BOOTSTRAP_PYTHON)"
