"""The executor interface: where the configurations of a sweep or a search are evaluated.

An :class:`Executor` takes the pending configurations (:class:`experiments.config.grid.Trial`) and a
:class:`SweepContext`, and yields one :class:`Outcome` per configuration as it finishes, in
the order of the configurations (so the sweep table, and the choice among equal scores, do
not depend on where or how fast they ran). The sweep (:func:`experiments.studies.sweep.run_sweep`)
and the Optuna search (:func:`experiments.studies.search.run_search`) hand their configurations to
an executor through :meth:`experiments.studies.parent_run.ParentRun.evaluate` and log what comes
back; two executors exist side by side:

* :class:`experiments.executors.local.LocalExecutor`: this machine; windowed features once
  per window key, shared with forked worker processes (the default);
* :class:`experiments.executors.dask.DaskExecutor`: a Dask cluster, each worker reading the
  store itself (``experiments sweep --executor dask``).

Both evaluate a fit group (the configurations that differ only in post-processing, see
:func:`fit_groups`) as one task (a slow model's split into its separate fits when there are
several workers: :func:`split_into_parts`), and draw each configuration's figures where it ran
(:func:`with_figures`), so the process that logs only writes files.

>>> from experiments.config import expand, load_config
>>> trials = expand(load_config("smoke"))
>>> groups = window_groups(trials)
>>> len(groups), sum(len(g) for g in groups.values()) == len(trials)
(1, True)
>>> [len(g) for g in fit_groups(trials)][:3]
[1, 2, 2]
"""

from __future__ import annotations

import abc
from collections.abc import Generator, Sequence
from dataclasses import dataclass

from ..config.grid import Trial, WindowKey
from ..config.models import model_spec
from ..evaluation.evaluate import TrialResult
from ..evaluation.plots import with_figures
from ..tracking.child_runs import RunRow
from ..tracking.context import SweepContext

#: defined in the layers below (the child runs log with them); importable from here as before
__all__ = [
    "Executor",
    "Outcome",
    "SweepContext",
    "fit_groups",
    "split_into_parts",
    "window_groups",
    "with_figures",
]


@dataclass(frozen=True)
class Outcome:
    """What an executor yields per configuration: its ``result`` (for the sweep to log), or the
    ``row`` of the child run its worker logged itself (see
    :func:`experiments.tracking.child_runs.log_child`), or neither and the ``error`` that
    failed it.

    >>> from experiments.config import expand, load_config
    >>> Outcome(expand(load_config("smoke"))[0], error="ValueError: no sessions").failed
    True
    """

    trial: Trial
    result: TrialResult | None = None
    row: RunRow | None = None
    error: str = ""

    @property
    def failed(self) -> bool:
        """Nothing was evaluated (``error`` says why); a worker-logged row carries its own status."""
        return self.result is None and self.row is None


class Executor(abc.ABC):
    """Evaluates configurations somewhere; see the module docstring."""

    #: the parent run's ``executor`` tag
    name: str = ""

    @abc.abstractmethod
    def run(self, todo: Sequence[Trial], ctx: SweepContext) -> Generator[Outcome, None, None]:
        """Evaluate ``todo``; yield one outcome per configuration, in the order of ``todo``, each
        as soon as it and those before it are done.

        A failed configuration is an outcome with its error text, not an exception; a problem
        of the store (:class:`experiments.data.dataset.DatasetError`) raises. Closing the iterator
        early (the sweep was interrupted) stops the work that is still running.
        """


def window_groups(trials: Sequence[Trial]) -> dict[WindowKey, list[Trial]]:
    """``trials`` by window key (first appearance order): each key's windowed features are computed once."""
    groups: dict[WindowKey, list[Trial]] = {}
    for t in trials:
        groups.setdefault(t.window_key(), []).append(t)
    return groups


def fit_groups(trials: Sequence[Trial]) -> list[tuple[Trial, ...]]:
    """``trials`` grouped by :meth:`Trial.fit_key` (first appearance order): each group is
    evaluated in one task, its fits shared (see :func:`experiments.evaluation.evaluate.evaluate_trials`)."""
    groups: dict[Trial, list[Trial]] = {}
    for t in trials:
        groups.setdefault(t.fit_key(), []).append(t)
    return [tuple(g) for g in groups.values()]


def split_into_parts(group: Sequence[Trial]) -> bool:
    """Whether a fit group's fits run as separate tasks (both executors, when they have more
    than one worker): a slow model's (its main fit, each out-of-fold and unseen-listener fit,
    spread over the workers instead of one after another in one; a fast model's parts would
    cost more to hand around than they save). See
    :func:`experiments.evaluation.evaluate.group_fit_parts`."""
    return model_spec(group[0].model).slow
