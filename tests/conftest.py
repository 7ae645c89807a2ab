"""Shared fixtures: tiny generated stores and videos (nothing is downloaded)."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


@pytest.fixture
def rng():
    return np.random.default_rng(0)
