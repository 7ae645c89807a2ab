"""What a sweep hands to whoever evaluates and logs its configurations: :class:`SweepContext`.

It lives in the tracking layer because the child runs (:mod:`.child_runs`) log with it, and
the executors (the layer above) pass it on; :mod:`experiments.executors.base` re-exports it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..config.schema import ExperimentConfig


@dataclass(frozen=True)
class SweepContext:
    """What an executor needs to evaluate pending configurations (and to log them, if it does)."""

    cfg: ExperimentConfig
    store: Any  # a featurestore.Store or its folder
    channels: tuple[str, ...]  # every role/channel the pending configurations read, sorted
    store_fingerprint: str
    jobs: int
    tracking_uri: str
    experiment: str
    parent_run_id: str
    child_tags: dict[str, str]
    log_artifacts: bool = True
