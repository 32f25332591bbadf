# Every target that runs code creates (or reuses) .venv and installs what it needs
# first, so a fresh machine needs nothing but python3. Each install has its own
# stamp: `make demo` installs the package alone, `make test` adds the `test`
# extra, bench targets add the `bench` extra (the peers), `.venv/.installed` all.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PKG_STAMP   := $(VENV)/.installed-pkg
TEST_STAMP  := $(VENV)/.installed-test
BENCH_STAMP := $(VENV)/.installed-bench
STAMP       := $(VENV)/.installed

.PHONY: test coverage bench bench-scale reliability demo screenshots lint clean

# setup.py and the C sources: the install also builds the compiled kernels (dedup/native/_*.c)
$(PKG_STAMP): pyproject.toml setup.py dedup/native/_kernel.c dedup/native/_lookup.c dedup/native/_canon.c dedup/native/_rowcrc.c dedup/native/_simhash.c crawler/net/_markup.c dedup/native/_buffers.h dedup/native/_murmur.h dedup/native/_probe.h dedup/native/_seencore.h
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e .
	touch $(PKG_STAMP)

$(TEST_STAMP): $(PKG_STAMP)
	$(PY) -m pip install -q -e '.[test]'
	touch $(TEST_STAMP)

$(BENCH_STAMP): $(PKG_STAMP)
	$(PY) -m pip install -q -e '.[bench]'
	touch $(BENCH_STAMP)

$(STAMP): $(TEST_STAMP) $(BENCH_STAMP)
	touch $(STAMP)

# -n 2: two pytest workers (pytest-xdist), one per core of the 2-core CI machine;
# every test starts its own servers on free loopback ports, so they run side by side.
test: $(TEST_STAMP)
	$(PY) -m pytest -q -n 2

# The whole suite under coverage, child processes included (see [tool.coverage] in
# pyproject.toml); prints the per-file table and the total.
coverage: $(TEST_STAMP)
	rm -rf .coverage && mkdir -p .coverage
	$(PY) -m coverage run -m pytest -q
	$(PY) -m coverage combine -q
	$(PY) -m coverage report

bench: $(BENCH_STAMP)
	$(PY) bench/run.py

# URL-seen at scale, UrlSeen vs three peers (bench/README.md, "Scale (10M+ URLs)"):
# 2M with --cold took 26 min on the shared 2-core box; 10M, several hours.
# Override, e.g.: make bench-scale SCALE_ARGS="--quick"
SCALE_ARGS ?= --distinct 10000000 --cold
bench-scale: $(BENCH_STAMP)
	mkdir -p bench/results
	$(PY) bench/scale.py $(SCALE_ARGS) --out bench/results/scale.json

# kill -9 loop (bench/README.md, "Reliability (kill -9 loop)"): 20 SIGKILLs during a
# crawl of the sample site with --warc, resumed each time; exit 1 on any lost URL,
# duplicate line/record, torn record or wedged state dir. E.g. RELIABILITY_ARGS="--kills 50"
RELIABILITY_ARGS ?=
reliability: $(BENCH_STAMP)
	mkdir -p bench/results
	$(PY) bench/reliability.py $(RELIABILITY_ARGS) --out bench/results/reliability.json

demo: $(PKG_STAMP)
	$(PY) -m crawler.demo

# The dashboard during a demo crawl and the report after it, by headless Chromium
# (apt-get install chromium), into docs/dashboard.png and docs/report.png (README).
screenshots: $(PKG_STAMP)
	$(PY) -m crawler.demo.screenshots --out docs

lint: $(TEST_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) .pytest_cache .coverage build *.egg-info demo-state dedup/native/_kernel.*.so dedup/native/_lookup.*.so dedup/native/_canon.*.so dedup/native/_rowcrc.*.so dedup/native/_simhash.*.so crawler/net/_markup.*.so
