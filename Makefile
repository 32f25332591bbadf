# Every target that runs code creates (or reuses) .venv and installs the package
# with its dev extra first, so a fresh machine needs nothing but python3.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: test bench bench-scale demo lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

# The whole suite under coverage, child processes included (see [tool.coverage] in
# pyproject.toml); prints the per-file table and the total.
coverage: $(STAMP)
	rm -rf .coverage && mkdir -p .coverage
	$(PY) -m coverage run -m pytest -q
	$(PY) -m coverage combine -q
	$(PY) -m coverage report

bench: $(STAMP)
	$(PY) bench/run.py

# URL-seen at scale, UrlSeen vs three peers (bench/README.md, "Scale (10M+ URLs)"):
# 2M with --cold took 26 min on the shared 2-core box; 10M, several hours.
# Override, e.g.: make bench-scale SCALE_ARGS="--quick"
SCALE_ARGS ?= --distinct 10000000 --cold
bench-scale: $(STAMP)
	mkdir -p bench/results
	$(PY) bench/scale.py $(SCALE_ARGS) --out bench/results/scale.json

demo: $(STAMP)
	$(PY) -m crawler.demo

lint: $(STAMP)
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) .pytest_cache .coverage build *.egg-info demo-state
