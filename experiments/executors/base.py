"""The executor interface and registry: an :class:`Executor` yields one :class:`Outcome` per pending
configuration, in their order (so neither the table nor a choice among equal scores depends on
where they ran); :func:`register_executor` names one and :func:`make_executor` builds one by
name (adding an executor is one module). Both built-in ones evaluate a fit group per task, a slow
model's split into its fits (:func:`split_into_parts`), and draw the figures where they ran.

>>> from experiments.config import expand, load_config
>>> trials = expand(load_config("smoke"))
>>> [len(g) for g in fit_groups(trials)][:3], make_executor("local").name
([1, 2, 2], 'local')
"""

from __future__ import annotations

import abc
import contextlib
import importlib
import pkgutil
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar, TypeVar

from featurestore.overrides import ConfigError

from ..config.choices import Registry
from ..config.grid import Trial, WindowKey
from ..config.models import model_spec
from ..evaluation.evaluate import TrialResult, Windowed, evaluate_trials
from ..evaluation.fitting import FitPart, PartResult
from ..evaluation.plots import with_figures
from ..tracking.child_runs import RunRow
from ..tracking.context import SweepContext

__all__ = [
    "Executor",
    "Outcome",
    "SweepContext",
    "evaluated",
    "fit_groups",
    "make_executor",
    "register_executor",
    "split_into_parts",
    "window_groups",
    "with_figures",
]


@dataclass(frozen=True)
class Outcome:
    """What an executor yields per configuration: its ``result`` (for the sweep to log), or the
    ``row`` of the child run its worker logged itself, or neither and the ``error`` that failed it."""

    trial: Trial
    result: TrialResult | None = None
    row: RunRow | None = None
    error: str = ""

    @property
    def failed(self) -> bool:
        """Nothing was evaluated (``error`` says why); a worker-logged row carries its own status."""
        return self.result is None and self.row is None


class Executor(abc.ABC):
    """Evaluates configurations somewhere; see the module docstring.

    ``scheduler``: the address of a cluster to join, for an executor that has one (else None).
    """

    #: the name the config and ``--executor`` give it (and the parent run's ``executor`` tag)
    name: ClassVar[str] = ""

    def __init__(self, scheduler: str | None = None) -> None:
        if scheduler is not None:
            raise ConfigError(
                f"executor {self.name} joins no cluster: --scheduler (the address of one) is for "
                "--executor dask"
            )

    @contextlib.contextmanager
    def opened(self, jobs: int | None, tracking_uri: str, log_artifacts: bool) -> Iterator[int]:
        """Hold what the executor needs for a sweep (a cluster, ...) while the sweep runs; yields
        how many configurations it evaluates at a time (the ``jobs`` asked for, else 1, unless
        it knows better)."""
        yield jobs or 1

    @abc.abstractmethod
    def run(self, todo: Sequence[Trial], ctx: SweepContext) -> Generator[Outcome, None, None]:
        """Evaluate ``todo``; yield one outcome per configuration, in the order of ``todo``, each
        as soon as it and those before it are done.

        A failed configuration is an outcome with its error text, not an exception; a problem
        of the store (:class:`experiments.data.dataset.DatasetError`) raises. Closing the iterator
        early (the sweep was interrupted) stops the work that is still running.
        """


_EXECUTORS: Registry[type[Executor]] = Registry("executor")
E = TypeVar("E", bound=type[Executor])


def register_executor(cls: E) -> E:
    """Class decorator: make an :class:`Executor` available by its ``name``."""
    _EXECUTORS.register(cls)
    return cls


def make_executor(executor: str | Executor, scheduler: str | None = None) -> Executor:
    """``executor`` itself, or the registered executor of that name built with ``scheduler``.

    Raises:
        ConfigError: no executor of that name (the nearest is suggested), or one that takes no
            ``scheduler`` given one.
    """
    if isinstance(executor, Executor):
        return executor
    if executor not in _EXECUTORS.all():  # the package's modules register theirs when imported
        package = importlib.import_module(__package__ or "")
        for module in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{__package__}.{module.name}")
    try:
        cls = _EXECUTORS.get(executor)
    except ValueError as e:
        raise ConfigError(f"{e} (config key executor, or --executor)") from None
    return cls(scheduler=scheduler)


def evaluated(
    trials: Sequence[Trial], w: Windowed, done: dict[FitPart, PartResult], figures: bool
) -> list[TrialResult]:
    """One fit group evaluated on its windowed features ``w`` (``done``: parts fitted in other
    tasks), with its figures drawn here when ``figures`` (where it ran: the logging process then
    only writes the bytes)."""
    results = evaluate_trials(trials, w, done)
    return [with_figures(r) for r in results] if figures else results


def window_groups(trials: Sequence[Trial]) -> dict[WindowKey, list[Trial]]:
    """``trials`` by window key (first appearance order): each key's windowed features are computed once."""
    groups: dict[WindowKey, list[Trial]] = {}
    for t in trials:
        groups.setdefault(t.window_key(), []).append(t)
    return groups


def fit_groups(trials: Sequence[Trial]) -> list[tuple[Trial, ...]]:
    """``trials`` grouped by :meth:`Trial.fit_key` (first appearance order): each group is
    evaluated in one task, its fits shared (:func:`experiments.evaluation.evaluate.evaluate_trials`)."""
    groups: dict[Trial, list[Trial]] = {}
    for t in trials:
        groups.setdefault(t.fit_key(), []).append(t)
    return [tuple(g) for g in groups.values()]


def split_into_parts(group: Sequence[Trial]) -> bool:
    """Whether a fit group's fits run as separate tasks when there is more than one worker: a
    slow model's (:attr:`~experiments.config.models.ModelSpec.slow`; a fast model's parts would
    cost more to hand around than they save)."""
    return model_spec(group[0].model).slow
