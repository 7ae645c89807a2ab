"""Backends by name: an unknown name is refused with the nearest one; every backend (built in, or
registered from this module alone) maps in task order with errors as values. A sweep on a
backend registered from a test module: tests/experiments/studies/test_sweep.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import pytest

from experiments.config.loading import from_dict
from featurestore.errors import ConfigError
from featurestore.parallel import (
    Backend,
    BackendError,
    Result,
    backend_names,
    make_backend,
    register_backend,
)


@register_backend
class Backwards(Backend):
    """Every task here, the last first, and the results put back in order: another way to run,
    the same numbers."""

    name = "backwards"

    def map(
        self, fn: Callable, tasks: Sequence, raises: tuple[type[BaseException], ...] = ()
    ) -> Iterator[Result]:
        done = {}
        for i in reversed(range(len(tasks))):
            try:
                done[i] = Result(fn(tasks[i]))
            except raises:
                raise
            except Exception as e:  # noqa: BLE001 - errors as values
                done[i] = Result(error=f"{type(e).__name__}: {e}")
        yield from (done[i] for i in range(len(tasks)))


def _inverse(x: int) -> float:
    return 1 / x


@pytest.mark.parametrize("name", ["serial", "processes", "backwards"])
def test_a_backend_maps_in_task_order_with_errors_as_values(name):
    backend = make_backend(name)
    with backend.opened(2):
        got = list(backend.map(_inverse, [1, 0, 4]))
    assert [r.value for r in got] == [1.0, None, 0.25]
    assert [r.error for r in got] == ["", "ZeroDivisionError: division by zero", ""]
    with backend.opened(2), pytest.raises(ZeroDivisionError):
        list(backend.map(_inverse, [1, 0], raises=(ZeroDivisionError,)))


def test_an_unknown_backend_is_refused_with_the_nearest_name():
    assert backend_names()[:3] == ["serial", "processes", "dask"] and "backwards" in backend_names()
    with pytest.raises(BackendError, match="unknown backend 'dsak'.*did you mean 'dask'"):
        make_backend("dsak")
    with pytest.raises(BackendError, match="--scheduler .* is for --backend dask"):
        make_backend("processes", scheduler="tcp://host:8786")
    assert make_backend("dask", scheduler="tcp://host:8786").scheduler == "tcp://host:8786"
    with pytest.raises(ConfigError, match="backend: expected a name"):
        from_dict({"backend": "two words"})
