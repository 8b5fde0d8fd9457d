# tritonwatch — the two commands a fresh machine needs: `make demo` and `make test`.
# Both create .venv when missing and install the pinned versions (constraints.txt)
# through scripts/install-python.sh, the same script the Dockerfile runs.

VENV ?= .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed
SOURCES := $(wildcard src tests benchmarks scripts mixin mutation)

.PHONY: all demo test lint typecheck unit suite docs screenshot mixin site image-test bench-tests debian-packages real-triton real-mlserver bench-packages bench soak mutation lock clean

all: test

$(INSTALLED): pyproject.toml constraints.txt scripts/install-python.sh
	scripts/install-python.sh $(VENV) dev editable
	touch $@

debian-packages:
	scripts/ensure-debian-packages.sh

# Real tritonserver 2.51 (CPU, Python backend) and perf_analyzer, unpacked into .triton:
# the ground truth for every test that talks to Triton.
real-triton:
	scripts/ensure-triton.sh .triton

# Real Seldon MLServer 1.7.1 in its own venv under .mlserver: a KServe v2 server that is
# not Triton (no binary tensor extension, no model config API), for the canary's tests.
real-mlserver:
	scripts/ensure-mlserver.sh .mlserver

bench-packages:
	scripts/ensure-bench-packages.sh

# The documents' generated parts (docs/architecture.md's tables), rewritten from the code;
# tests/docs checks that they are fresh.
docs: $(INSTALLED)
	$(BIN)/python scripts/generate_docs.py
	$(BIN)/python mixin/build.py
	$(BIN)/python -m tritonwatch.dashboards
	$(BIN)/python deploy/kubernetes/render.py

# The monitoring mixin (mixin/): rules, alerts and dashboards from the code that writes them.
mixin: $(INSTALLED)
	$(BIN)/python mixin/build.py

# The documentation site, as `make test` builds it (tests/docs/test_site.py), into site/.
site: $(INSTALLED)
	$(BIN)/mkdocs build --strict

# The README's picture of the status page: the suite's Chromium test, its screenshot kept.
screenshot: $(INSTALLED) debian-packages
	TRITONWATCH_SCREENSHOT_OUT=docs/img/status-page.png $(BIN)/pytest -q -p no:xdist \
		tests/e2e/test_status_page.py::test_status_page_in_chromium

lint: $(INSTALLED)
	$(BIN)/ruff check $(SOURCES)
	$(BIN)/ruff format --check $(SOURCES)
	$(BIN)/hadolint Dockerfile
	$(BIN)/lint-imports

typecheck: $(INSTALLED)
	$(BIN)/mypy src mixin/build.py scripts/generate_docs.py mutation/run.py mutation/fastest_first.py

# The whole suite (unit, sim and real tests; tests/README.md), in parallel: the users of
# each shared real Triton run on one worker (--dist loadgroup), the rest spread over five.
# Five on two cores: the suite mostly waits on real time (about 1.5 cores busy); 3082 tests
# took 302 s on five workers, 335 s on four and 373-388 s on three on this machine.
PYTEST_WORKERS ?= 5
suite: $(INSTALLED) debian-packages real-triton real-mlserver
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup

# The edit-test loop: the unit tests alone (no simulator, no subprocess), well under a minute.
unit: $(INSTALLED)
	$(BIN)/pytest -m unit -n 2

# The measurements that left the suite (bench marker): speeds, soaks, side-by-sides.
bench-tests: $(INSTALLED) debian-packages real-triton real-mlserver
	$(BIN)/pytest -m bench

test: lint typecheck suite

# The Dockerfile's image built with podman on a Debian base made by mmdebstrap (cached
# in podman's storage between runs), then run: --version, check-config, and the daemon
# against real Triton on the host network, read-only, as its user (tests/image). Its
# own target: the build does not fit the suite's budget. .ci/run runs it after `make test`.
IMAGE_TAG ?= localhost/tritonwatch:test
image-test: $(INSTALLED) real-triton
	scripts/ensure-image-tools.sh
	scripts/build-image.sh $(IMAGE_TAG)
	TRITONWATCH_IMAGE=$(IMAGE_TAG) $(BIN)/pytest -p no:xdist -q tests/image

demo: $(INSTALLED)
	$(BIN)/tritonwatch demo

# Every benchmark against its anchor (wrk, prometheus_client, node-exporter, ...), about
# 20-25 minutes; writes benchmarks/RESULTS.md. Not part of `make test`.
# Subsets and short runs: make bench BENCH_ARGS="--only parse,load --quick"
BENCH_ARGS ?=
bench: $(INSTALLED) debian-packages real-triton bench-packages
	$(BIN)/python benchmarks/run_all.py $(BENCH_ARGS)

# The watcher soak (benchmarks/watch_soak.py): 30 minutes of real Triton (HTTP, gRPC,
# streaming) and MLServer with one Triton restart in the middle; passes when nothing
# paged and every canary failure is explained by a log line. Then the moved name
# (benchmarks/moved_name.py, 3 minutes): two real Tritons behind one name, the name moves
# and the first is killed; passes when the canaries follow within 15 s and nothing pages.
# Not part of `make test`.
SOAK_ARGS ?=
soak: $(INSTALLED) debian-packages real-triton real-mlserver
	$(BIN)/python benchmarks/watch_soak.py $(SOAK_ARGS)
	$(BIN)/python benchmarks/moved_name.py

# Mutation testing (mutation/run.py; tests/README.md says when and how to read it): mutmut
# mutates the modules of [tool.mutmut] in pyproject.toml in a copy under mutants/ and runs
# the unit and sim tests that reach each mutant; writes mutation/RESULTS.md, the score of
# each module, and fails under 90 %. Not part of `make test`.
MUTATION_INSTALLED := $(VENV)/.installed-mutation
$(MUTATION_INSTALLED): $(INSTALLED)
	scripts/install-python.sh $(VENV) dev,mutation editable
	touch $@

MUTATION_ARGS ?=
mutation: $(MUTATION_INSTALLED)
	$(BIN)/python mutation/run.py $(MUTATION_ARGS)

# Re-pin constraints.txt to what the current venv has (after a deliberate upgrade).
lock: $(INSTALLED)
	{ echo "# Versions the test suite last passed with; scripts/install-python.sh pins them."; \
	  $(BIN)/pip freeze --exclude-editable | grep -v '^-e '; } > constraints.txt

clean:
	rm -rf $(VENV) .triton .mlserver .pytest_cache .mypy_cache .ruff_cache .hypothesis mutants
