"""Fixtures of the experiments tests: the planted store, a shared tracking folder, one shared
sweep (the store itself is described in :mod:`tests.experiments.helpers`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from experiments.data.dataset import load_sessions
from experiments.studies.sweep import SweepOptions
from tests.experiments.helpers import CHANNELS, SPLITS, build_store, config_dict


@pytest.fixture(scope="session")
def local_reference(planted_store, tracking_dir):
    """The processes backend's metrics per config hash for :func:`config_dict` on the planted store."""
    from experiments.config.loading import from_dict
    from experiments.studies.sweep import run_sweep
    from experiments.tracking.tracker import CONFIG_HASH_TAG

    cfg = from_dict(config_dict(tracking_dir, "dask-reference"))
    res = run_sweep(
        cfg, store=planted_store, options=SweepOptions(progress=False, log_artifacts=False)
    )
    assert res.n_failed == 0
    return res.table.set_index(CONFIG_HASH_TAG)


@pytest.fixture(scope="session")
def planted_store(tmp_path_factory) -> Path:
    """Folder of the synthetic store (read it only; build your own to change it)."""
    root = tmp_path_factory.mktemp("planted_store")
    build_store(root)
    return root


@pytest.fixture(scope="session")
def tracking_dir(tmp_path_factory) -> str:
    """A tracking folder whose SQLite database exists already (creating one takes seconds).

    Tests share it and keep apart by experiment name.
    """
    from experiments.tracking.tracker import Tracker

    folder = str(tmp_path_factory.mktemp("mlruns_shared") / "mlruns")
    Tracker(folder, "Default")
    return folder


@pytest.fixture(scope="session")
def sweep_once(planted_store, tracking_dir):
    """One sweep of :func:`config_dict` on the planted store: (cfg, SweepResult, tracking URI)."""
    from experiments.config.loading import from_dict
    from experiments.studies.sweep import run_sweep
    from experiments.tracking.tracker import resolve_tracking_uri

    # selection chosen, as written (never the default): the tests of its twin runs and marks
    cfg = from_dict(config_dict(tracking_dir, "shared", unseen_listener={"selection": "chosen"}))
    res = run_sweep(cfg, store=planted_store, options=SweepOptions(progress=False))
    return cfg, res, resolve_tracking_uri(tracking_dir)


@pytest.fixture(scope="session")
def tables(planted_store):
    """The planted store's 25 fps tables of every channel (read them only)."""
    return load_sessions(planted_store, CHANNELS, splits=SPLITS)


@pytest.fixture(scope="session")
def poisoned_store(tmp_path_factory) -> Path:
    """Folder of the planted store with the test story's labels replaced by random numbers (read
    it only)."""
    rng = np.random.default_rng(123)

    def poison(listener, story, y):
        return rng.uniform(-1, 1, len(y)) if story in SPLITS["test"] else y

    root = tmp_path_factory.mktemp("poisoned_store")
    build_store(root, labels_override=poison)
    return root


@pytest.fixture(scope="session")
def poisoned_tables(poisoned_store):
    """:func:`poisoned_store`'s 25 fps tables of every channel (read them only)."""
    return load_sessions(poisoned_store, CHANNELS, splits=SPLITS)
