# The two commands of the README. Both set up .venv on first use.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test lint setup docs

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/headroom demo

# Every test: two at a time (pytest-xdist), then one at a time those that time things in real
# time or load both cores (marked "serial" by tests/conftest.py). Both parts run; either
# failing fails the target.
test: $(STAMP)
	$(VENV)/bin/ruff check .
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site
	$(VENV)/bin/pytest -n 2 -m "not serial"; parallel=$$?; \
	$(VENV)/bin/pytest -m serial && exit $$parallel

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The manual (docs/, mkdocs.yml), served at http://127.0.0.1:8000 while you edit it.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve
