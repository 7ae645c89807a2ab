"""Old module names of ``experiments``, importable for one more release with a
:class:`FutureWarning` (``experiments.metrics`` is now ``experiments.evaluation.metrics``, and
so on); see :mod:`featurestore.moved`. The former modules ``experiments.config``,
``.windowing``, ``.models`` and ``.tracking`` are now packages that export the same names.

>>> import warnings
>>> with warnings.catch_warnings(record=True):
...     warnings.simplefilter("always")
...     from experiments.metrics import ccc as old_ccc
>>> from experiments import ccc
>>> old_ccc is ccc
True
"""

from __future__ import annotations

from featurestore.moved import install

#: old dotted name -> new dotted name (experiments' modules)
MOVED: dict[str, str] = {
    f"experiments.{old}": f"experiments.{new}"
    for old, new in {
        "options": "config.options",
        "choices": "config.choices",
        "config_schema": "config.schema",
        "grid": "config.grid",
        "tracks": "config.tracks",
        "search_space": "config.search_space",
        "config_validation": "config.validation",
        "session_table": "data.session_table",
        "frames_cache": "data.frames_cache",
        "dataset": "data.dataset",
        "windowed": "windowing.windowed",
        "personalization": "models.personalization",
        "postprocess": "models.postprocess",
        "metrics": "evaluation.metrics",
        "uncertainty": "evaluation.uncertainty",
        "fitting": "evaluation.fitting",
        "evaluate": "evaluation.evaluate",
        "plots": "evaluation.plots",
        "markdown": "evaluation.markdown",
        "provenance": "tracking.provenance",
        "ui_view": "tracking.ui_view",
        "ui": "tracking.ui",
        "child_runs": "tracking.child_runs",
        "summary": "tracking.summary",
        "parent_run": "studies.parent_run",
        "sweep": "studies.sweep",
        "search": "studies.search",
        "ablation": "studies.ablation",
        "agreement": "studies.agreement",
        "distributed": "studies.distributed",
    }.items()
}

install(MOVED)
