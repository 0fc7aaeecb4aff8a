# The two commands: `make demo` (a real RL run of the whole pipeline) and `make test`.
# Everything they need is installed by scripts/ and cached under ~/.cache/m1flow.
SHELL := /bin/bash
VENV = $(shell bash scripts/env.sh)
PY = PYTHONPATH=$(CURDIR) $(VENV)/bin/python

.PHONY: setup proto demo test test-fast up clean

setup:
	bash scripts/system_deps.sh
	bash scripts/monitor_deps.sh
	bash scripts/env.sh >/dev/null
	bash scripts/kafka_jars.sh >/dev/null
	$(PY) -m m1flow.protogen

proto:
	$(PY) -m m1flow.protogen

demo: setup
	$(PY) -m m1flow demo --minutes $${MINUTES:-4}

test: setup
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

up: setup
	$(PY) -m m1flow up

clean:
	rm -rf run m1flow/v1
