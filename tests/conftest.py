"""Shared fixtures (nothing is downloaded), and which folders hold integration tests."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
# one OpenMP / BLAS thread per process unless the caller says otherwise: the suite runs beside
# other work on few cores, where OpenMP's threads spin against each other and a small
# HistGradientBoosting fit takes 20 times longer (13 s instead of 0.6 s, measured on 2 busy
# cores); set before anything loads scikit-learn, numpy's BLAS or XGBoost, and inherited by
# the subprocesses and forked workers the tests start (the results do not depend on it)
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def rng():
    return np.random.default_rng(0)


ROOT = Path(__file__).resolve().parents[1]
#: folders whose every test runs whole studies through MLflow (sweeps, searches, ablations) or
#: builds the demo corpus's videos: marked ``integration``, which ``make test-fast`` leaves out
INTEGRATION_FOLDERS = ("tests/experiments/studies", "tests/featurestore/demo")
#: session fixtures that run a whole sweep through MLflow (tests/experiments/conftest.py): a test
#: that reads one is an integration test wherever it lives
INTEGRATION_FIXTURES = frozenset({"sweep_once", "local_reference"})


def pytest_collection_modifyitems(config, items):
    for item in items:
        where = Path(item.path).resolve()
        in_folder = any(where.is_relative_to(ROOT / folder) for folder in INTEGRATION_FOLDERS)
        if in_folder or INTEGRATION_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)
