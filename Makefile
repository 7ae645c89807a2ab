# omg-empathy-bench: make features -> make sweep -> make ui   (make help lists everything)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STORE  ?= features
DATA   ?=
DEMO   ?= demo_data
DEMO_MONADIC ?= demo_monadic
STORE_MONADIC ?= features_monadic
JOBS   ?= 2
VENV_MIN ?= .venv-min
PYTHON_MIN ?= python3.11
# the inner loop's tests (make test-fast, make test-min): no demo corpus, subprocess, cluster or server
FAST_TESTS := not slow and not integration and not browser and not postgres
# pytest-xdist: one worker per core, at most 2 (TEST_WORKERS=0 runs the tests in pytest's own process)
TEST_WORKERS ?= 2
PYTEST_ARGS = -q -p no:cacheprovider --timeout=600 $(if $(filter 0,$(TEST_WORKERS)),,-n auto --maxprocesses=$(TEST_WORKERS))
CONSTRAINTS := constraints.txt
CONFIG ?= experiments/configs/default.yaml
PORT   ?= 5000
MLFLOW_HOST ?= 127.0.0.1
MLFLOW_PORT ?= 5001
MLFLOW_WORKERS ?= 1
MLFLOW_ALLOWED_HOSTS ?=
TRACKING ?= sqlite:///mlruns/mlflow.db
ARTIFACTS ?= ./mlruns/artifacts
export MLFLOW_DISABLE_TELEMETRY ?= true

.DEFAULT_GOAL := help
.PHONY: help install constraints demo demo-data demo-monadic features sweep ablate ui mlflow-server test test-fast test-min lint bench clean

help: ## list the targets
	@echo "make demo          install everything, build the demo corpus, extract features, run the sweep"
	@echo "make test          install and run the test suite"
	@echo ""
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-14s %s\n", $$1, $$2}' \
		| sed -e 's|$$(PORT)|$(PORT)|g' -e 's|$$(MLFLOW_HOST)|$(MLFLOW_HOST)|g' -e 's|$$(MLFLOW_PORT)|$(MLFLOW_PORT)|g'
	@echo ""
	@echo "variables: DATA=<OMG-Empathy folder> (default: the demo corpus)  STORE=$(STORE)  JOBS=$(JOBS)  CONFIG=$(CONFIG)"
	@echo "           TRACKING=$(TRACKING)  ARTIFACTS=$(ARTIFACTS)  MLFLOW_HOST=$(MLFLOW_HOST)  MLFLOW_PORT=$(MLFLOW_PORT)"
	@echo "           MLFLOW_WORKERS=$(MLFLOW_WORKERS)  MLFLOW_ALLOWED_HOSTS=<host names> (make mlflow-server)"

$(BIN)/python:
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python 3.11+ is needed, found " + sys.version.split()[0]'
	$(PYTHON) -m venv $(VENV)

# constraints.txt: the versions the whole suite passes with (make constraints rewrites it)
$(VENV)/.installed: setup.cfg pyproject.toml $(CONSTRAINTS) | $(BIN)/python
	$(BIN)/python -m pip install --upgrade --quiet pip
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -e '.[dev]'
	@touch $@

install: $(VENV)/.installed ## create .venv and install the package with its dev extra, pinned by constraints.txt

constraints: $(VENV)/.installed ## upgrade .venv to the newest versions setup.cfg allows and rewrite constraints.txt from it
	$(BIN)/python -m pip install --quiet --upgrade --upgrade-strategy eager -e '.[dev]'
	@{ echo "# pip constraints: the environment make test passes with (make install uses it)."; \
	   echo "# Rewritten by make constraints from .venv; run make test, then commit it."; \
	   $(BIN)/python -m pip freeze --exclude-editable | grep -vi '^omg[-_]empathy[-_]bench=='; } > $(CONSTRAINTS)
	@touch $(VENV)/.installed

demo: features sweep ## the main job on the embedded demo corpus: features, then the sweep

# rebuilt when the generator changes (its GENERATOR_VERSION lives in featurestore/demo/model.py)
$(DEMO)/.complete: $(wildcard featurestore/demo/*.py) | $(VENV)/.installed
	$(BIN)/featurestore demo --out $(DEMO)
	@touch $@

demo-data: $(VENV)/.installed $(DEMO)/.complete ## build the embedded demo corpus into demo_data/

$(DEMO_MONADIC)/.complete: $(wildcard featurestore/demo/*.py) | $(VENV)/.installed
	$(BIN)/featurestore demo --layout monadic --out $(DEMO_MONADIC)
	@touch $@

demo-monadic: $(VENV)/.installed $(DEMO_MONADIC)/.complete ## the second demo (one person per session, a manifest): build it, scan it, extract into features_monadic/
	$(BIN)/featurestore scan --manifest $(DEMO_MONADIC)/manifest.csv --store $(STORE_MONADIC)
	$(BIN)/featurestore extract --store $(STORE_MONADIC) --jobs $(JOBS)
	$(BIN)/featurestore verify --store $(STORE_MONADIC)

ifeq ($(strip $(DATA)),)
features: demo-data ## extract features into features/ (DATA=<folder> for your own corpus; default: the demo corpus)
	$(BIN)/featurestore scan $(DEMO) --store $(STORE)
	$(BIN)/featurestore extract $(DEMO) --store $(STORE) --jobs $(JOBS)
	$(BIN)/featurestore verify --store $(STORE)
else
features: install
	$(BIN)/featurestore scan $(DATA) --store $(STORE)
	$(BIN)/featurestore extract $(DATA) --store $(STORE) --jobs $(JOBS)
	$(BIN)/featurestore verify --store $(STORE)
endif

sweep: install ## run the experiment sweep (CONFIG=...) on the store and log it to MLflow
	$(BIN)/experiments sweep --config $(CONFIG) --store $(STORE) --jobs $(JOBS)

ablate: install ## speaker / listener / both table -> reports/ablation*.{md,csv,png} (docs/outputs.md lists them)
	$(BIN)/experiments ablate --config experiments/configs/ablation.yaml --store $(STORE) --jobs $(JOBS)

ui: install ## open the MLflow UI on the project's tracking store (http://127.0.0.1:$(PORT)); prints each experiment's runs link
	@mkdir -p mlruns
	-@$(BIN)/python -m experiments.tracking.ui --tracking-uri '$(TRACKING)' --url http://127.0.0.1:$(PORT)
	MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false $(BIN)/mlflow ui --backend-store-uri $(TRACKING) \
		--default-artifact-root ./mlruns --host 127.0.0.1 --port $(PORT) --workers 1

# TRACKING=postgresql://USER@DBHOST/DB for a lab (password in ~/.pgpass or PGPASSWORD, not in the URI)
mlflow-server: install ## MLflow tracking server for many writers (Dask workers): http://$(MLFLOW_HOST):$(MLFLOW_PORT)
	@case '$(TRACKING)' in postgresql*) $(BIN)/python -c 'import sys, sqlalchemy; \
		sqlalchemy.engine.make_url(sys.argv[1]).get_dialect().import_dbapi()' '$(TRACKING)' 2>/dev/null || { \
		echo "the database driver for TRACKING=$(TRACKING) is not installed: $(BIN)/pip install -e '.[lab]'" >&2; exit 2; } ;; esac
	@case '$(ARTIFACTS)' in *://*) ;; *) mkdir -p '$(ARTIFACTS)' ;; esac
	MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false $(BIN)/mlflow server --backend-store-uri '$(TRACKING)' \
		--serve-artifacts --artifacts-destination '$(ARTIFACTS)' \
		--host $(MLFLOW_HOST) --port $(MLFLOW_PORT) --workers $(MLFLOW_WORKERS) \
		$(if $(MLFLOW_ALLOWED_HOSTS),--allowed-hosts '$(MLFLOW_ALLOWED_HOSTS)')

lint: install ## ruff (lint and formatting), then mypy over both packages ([tool.mypy] in pyproject.toml)
	$(BIN)/ruff check featurestore experiments tests bench
	$(BIN)/ruff format --check featurestore experiments tests bench
	$(BIN)/mypy

test: install ## lint, type-check and run the whole test suite
	$(BIN)/ruff check featurestore experiments tests bench
	$(BIN)/ruff format --check featurestore experiments tests bench
	$(BIN)/mypy
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: install ## the inner loop: unit tests and doctests, no demo corpus, subprocess, cluster or server
	$(BIN)/python -m pytest $(PYTEST_ARGS) -m "$(FAST_TESTS)"

# the lowest versions setup.cfg declares for the runtime and the demo (tools/min_constraints.py
# pins each floor; the dev tools come at their newest) in .venv-min; the tests of make test-fast
test-min: ## install the lowest declared versions into .venv-min (Python 3.11) and run the fast tests
	@test -x $(VENV_MIN)/bin/python || $(PYTHON_MIN) -m venv $(VENV_MIN)
	@$(VENV_MIN)/bin/python -c 'import sys; assert sys.version_info[:2] == (3, 11), "$(VENV_MIN) must be Python 3.11, found " + sys.version.split()[0] + ": rm -r $(VENV_MIN)"'
	$(VENV_MIN)/bin/python -m pip install --upgrade --quiet pip
	$(VENV_MIN)/bin/python tools/min_constraints.py > $(VENV_MIN)/floors.txt
	$(VENV_MIN)/bin/python -m pip install --quiet -c $(VENV_MIN)/floors.txt -e '.[dev]'
	$(VENV_MIN)/bin/python -m pytest $(PYTEST_ARGS) -m "$(FAST_TESTS)"

bench: install ## benchmarks -> bench/results.json (QUICK=1 for a reduced size)
	$(BIN)/python -m bench $(if $(QUICK),--quick,)

clean: ## remove the store, demo corpus, reports and MLflow runs (keeps .venv)
	rm -rf $(STORE) $(DEMO) $(STORE_MONADIC) $(DEMO_MONADIC) reports/*.md reports/*.csv reports/*.png
	@# -delete goes depth-first (children before their folder); only the top .gitkeep stays
	[ ! -d mlruns ] || find mlruns -mindepth 1 ! -path mlruns/.gitkeep -delete
