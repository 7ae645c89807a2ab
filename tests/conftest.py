"""Shared fixtures (nothing is downloaded), and which folders hold integration tests."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


@pytest.fixture
def rng():
    return np.random.default_rng(0)


ROOT = Path(__file__).resolve().parents[1]
#: folders whose every test runs whole studies through MLflow (sweeps, searches, ablations) or
#: builds the demo corpus's videos: marked ``integration``, which ``make test-fast`` leaves out
INTEGRATION_FOLDERS = ("tests/experiments/studies", "tests/featurestore/demo")


def pytest_collection_modifyitems(config, items):
    for item in items:
        where = Path(item.path).resolve()
        if any(where.is_relative_to(ROOT / folder) for folder in INTEGRATION_FOLDERS):
            item.add_marker(pytest.mark.integration)
