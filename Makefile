# Build, test and demo targets for the _ext extensions.
#
#   make            build every _ext module (nvcc objects, then build.py)
#   make demo       run scripts/roc11.py on the embedded data set, write a ROC PNG
#   make test       the test suite (GPU tests are skipped where no GPU is present)
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
# Toolkit root; default: the one of the nvcc on PATH, as nvcc itself reports it
# (nvcc on PATH may be a wrapper script).
CUDA_HOME ?= $(shell nvcc --dryrun -c -x cu /dev/null -o /dev/null 2>&1 | \
               sed -n 's/^\#\$$ _HERE_=\(.*\)\/bin$$/\1/p')
NVCC ?= $(if $(CUDA_HOME),$(CUDA_HOME)/bin/nvcc)
# Compute capabilities to build for, e.g. CUDA_ARCH="90" or "80 90". Default:
# every one from 75 to 90 that this nvcc supports, plus PTX for the newest.
CUDA_ARCH ?= $(shell $(NVCC) --list-gpu-arch 2>/dev/null | sed -n 's/^compute_//p' | \
               awk '$$1 >= 75 && $$1 <= 90' | tr '\n' ' ')
NVCC_FLAGS ?= -O3 -std=c++17 --threads 0 -Xcompiler -fPIC -Xcompiler -fvisibility=hidden
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

HAVE_NVCC := $(if $(NVCC),$(shell test -x $(NVCC) && echo yes))
CU_SOURCES := $(wildcard src/cuda/*.cu)
CU_HEADERS := $(wildcard src/cuda/*.h src/cuda/*.cuh src/*.h)
ifeq ($(HAVE_NVCC),yes)
  CU_OBJECTS := $(patsubst src/cuda/%.cu,build/%.o,$(CU_SOURCES))
  PTX_ARCH := $(lastword $(sort $(CUDA_ARCH)))
  comma := ,
  GENCODE := $(foreach a,$(CUDA_ARCH),-gencode arch=compute_$(a)$(comma)code=sm_$(a)) \
             $(if $(PTX_ARCH),-gencode arch=compute_$(PTX_ARCH)$(comma)code=compute_$(PTX_ARCH))
else
  CU_OBJECTS :=
endif
C_SOURCES := $(wildcard src/*.c src/*.h)

.PHONY: all build demo test test-gpu bench compare-mxnet clean distclean help venv \
        $(MXNET_VENV) mxnet-try

all: build

build: build/.modules

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
# nvcc step: src/cuda/*.cu -> build/*.o

build/%.o: src/cuda/%.cu $(CU_HEADERS) | build/
	$(NVCC) $(NVCC_FLAGS) $(GENCODE) -Isrc -c $< -o $@

build/:
	mkdir -p $@

# build.py: the cffi modules under _ext/, linked against the objects above.
# The stamp records which objects and settings the modules were built with.
build/.modules: build.py $(C_SOURCES) $(CU_OBJECTS) $(PY_READY) | build/
ifneq ($(HAVE_NVCC),yes)
	@echo "nvcc not found (set CUDA_HOME or put nvcc on PATH): building CPU-only;" \
	      "the CUDA entry points will raise RuntimeError."
endif
	EXT_CUDA_HOME="$(if $(HAVE_NVCC),$(CUDA_HOME))" EXT_CUDA_OBJECTS="$(CU_OBJECTS)" \
	    $(PY) build.py
	touch $@

# ---------------------------------------------------------------------------
# run

demo: build
	$(PY) scripts/roc11.py --out roc_demo.png

test: build $(MXNET_TRY)
	MXNET_PYTHON="$(MXNET_PYTHON)" $(PY) -m pytest -q tests $(PYTEST_ARGS)

# GPU tests only; fails (rather than skipping) when no GPU is visible.
test-gpu: build
	$(PY) -m pytest -q -m gpu --require-gpu tests $(PYTEST_ARGS)

# Benchmarks on the GPU: the ROC evaluators and the further ops beside their
# peers -> BENCHMARKS.md
bench: build build/libroc_blog.so
	$(PY) scripts/bench_roc.py --markdown BENCHMARKS.md
	$(PY) scripts/bench_ops.py --markdown BENCHMARKS.md

# the blog's 2018 kernel, the peer of bench_roc.py (kept apart from the library)
build/libroc_blog.so: dev/cuda/roc_blog.cu | build/
	$(NVCC) -O3 -shared -Xcompiler -fPIC $(GENCODE) $< -o $@

# MXNet 1.9.1 and _ext.roc on the same files (default: the embedded data set)
compare-mxnet: build $(MXNET_READY)
	$(PY) scripts/compare_mxnet.py --mxnet-python "$(MXNET_PYTHON)" $(COMPARE_ARGS)

clean:
	rm -rf build _ext/*/_*.so _ext/*/_*.c _ext/*/_*.o roc_demo.png
	find . -name __pycache__ -prune -exec rm -rf {} +

distclean: clean
	rm -rf $(VENV) $(MXNET_VENV) $(MXNET_LOG)

help:
	@echo "targets:"
	@echo "  make            build the _ext modules (nvcc objects + cffi)"
	@echo "  make demo       roc11.py on the embedded data set -> roc_demo.png"
	@echo "  make test       test suite (GPU tests skip without a GPU)"
	@echo "  make test-gpu   GPU tests only (needs a GPU)"
	@echo "  make bench      benchmarks beside the peers on the GPU -> BENCHMARKS.md"
	@echo "  make compare-mxnet  MXNet 1.9.1 vs _ext.roc, legacy histograms side by side"
	@echo "                  (creates .venv-mxnet; COMPARE_ARGS=\"query.npz gallery.npz\")"
	@echo "  make .venv-mxnet    only set up the MXNet environment (requirements-mxnet.txt)"
	@echo "  make clean      remove build outputs and generated modules"
	@echo "  make distclean  clean, and remove .venv and .venv-mxnet"
	@echo "variables:"
	@echo "  PYTHON=$(PYTHON)  (empty: .venv, created and filled on first use)"
	@echo "  CUDA_HOME=$(CUDA_HOME)"
	@echo "  CUDA_ARCH=$(CUDA_ARCH)"
	@echo "  NVCC_FLAGS=$(NVCC_FLAGS)"
	@echo "  MXNET_PYTHON=$(MXNET_PYTHON)"
	@echo "  MXNET_BOOTSTRAP_PYTHON=$(MXNET_BOOTSTRAP_PYTHON)"
