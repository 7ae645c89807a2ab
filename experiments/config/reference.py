"""The docs/config.md tables generated from the code (keys with defaults, the model and metric
registries; ``tools/config_tables.py --write``, checked by a test), and :func:`defaults_note`.

>>> print(markdown_tables().splitlines()[2])
| `target` | `valence_self` | a label target in the store (`featurestore ls` lists them), or a list of them |
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import yaml

from .grid import expand
from .metrics import metric_specs
from .models import model_specs
from .schema import TOP_KEYS, ExperimentConfig

#: what each top-level key means (a test checks every key of :data:`TOP_KEYS` is here)
KEY_MEANINGS: dict[str, str] = {
    "target": "a label target in the store (`featurestore ls` lists them), or a list of them",
    "splits": "stories that train, validate (choose) and test (report once); the official split",
    "protocol": "`val`: fit on train, choose on val; `loso`: leave one story out over train + val; "
    "`lopo`, `kfold_person`, `kfold_group`: persons or groups held out (scored as split `cv`)",
    "folds": "the number of folds of `kfold_person` / `kfold_group`",
    "metric": "what every configuration is scored and chosen by (a registered metric, table below; "
    "`ccc` logs `<split>.ccc_<track>`, another `<split>.<metric>_<track>`)",
    "averaging": "`sessions`: the mean of per-session values (OMG-Empathy's two averagings); "
    "`concatenated`: one value over a split's sessions joined (AVEC's); default: the metric's own",
    "gold_standard": "the labels: `stored` (`/labels/<target>`), or a registered fusion of the "
    "raters: `mean`, `ewe` (evaluator-weighted estimate), `mean_z` (each rater z-normalised first) "
    "or `ccc_centred` (AVEC 2018's), with `align_lags` removing each rater's reaction lag (up to "
    "`max_lag_s`), each session's weights and lags from its own raters alone; see docs/store.md, Raters",
    "feature_sets": "name -> list of `role/channel` a model reads",
    "feature_set": "which of `feature_sets` to sweep (default: all of them)",
    "window": "the feature windows: lengths (s; each entry one multi-scale set), label delay (s), "
    "alignment, statistics, the training rows' hop (s)",
    "models": "a list of `{name: MODEL, HYPERPARAMETER: [values], only: {...}}` (table below); "
    "`only` narrows the other axes for that model",
    "personalization": "how listeners are modelled (`global`: generalized track; the others: "
    "personalized)",
    "postprocess": "prediction smoothing (window s, method), rescaling, and what rescaling is "
    "fitted on",
    "tracking": "MLflow: `uri` (`mlruns`: SQLite in `mlruns/`), the `experiment` the runs go to, "
    "and `artifacts`: where a new experiment's artifacts go (a folder or an `s3://` URI; default "
    "beside a SQLite database, the server's with `http://`; a database `uri` such as "
    "`postgresql://...` without it is refused rather than writing into `./mlruns` of the working "
    "folder); a password in `uri` is shown and stored as `***`",
    "seed": "random seed of every model and resampling",
    "unseen_listener": "also score the generalized track on listeners left out of training: "
    "`true` or `{selection: nested}`, each one's configuration chosen and fitted without them; "
    "`{selection: fixed, configuration: LABEL}`, one named before any data; `{selection: chosen}` "
    "(only when written), the choice made with every listener's labels, marked so in every "
    "report; `false`: none (an Optuna search without the key: none)",
    "jobs": "configurations evaluated in parallel processes (`--jobs` overrides it; null: 1, or "
    "a local Dask cluster's 2 workers)",
    "backend": "where configurations run (`--backend` overrides it): `serial` (this process), "
    "`processes` (this machine's worker processes), `dask` (a cluster, docs/scaling.md), or a "
    "backend registered with `featurestore.parallel.register_backend`",
    "search": "`method: grid` (every combination) or `optuna` (a sampled search; its keys are "
    "`n_trials`, `sampler`, `seed`, `track`, `startup_trials`, `storage`)",
    "fusion": "`experiments ablate`: `{method: late, members: [SET, SET], blend: nnls|ridge}` adds a "
    "late-fusion row (a blend of the members' chosen configurations); `method: none`: off",
    "importance": "`experiments ablate`: permutation importance of each chosen configuration "
    "(`{repeats, levels: [channel, column, stat], split}`); null: none",
}


def _flow(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=10**6, sort_keys=False).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def markdown_tables() -> str:
    """The tables of ``docs/config.md``: top-level keys, the registered models and metrics."""
    cfg = ExperimentConfig()
    defaults = {"folds": cfg.folds, **cfg.to_dict()}  # folds: written under k-fold protocols only
    lines = ["| key | default | meaning |", "|---|---|---|"]
    lines += [f"| `{k}` | `{_flow(defaults[k])}` | {KEY_MEANINGS[k]} |" for k in TOP_KEYS]
    return "\n".join([*lines, "", model_table(), "", metric_table()]) + "\n"


def metric_table() -> str:
    """One row per registered metric."""
    lines = [
        "| metric | better | NaN rule | averaging | range | intervals | chance level | shown as | what |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    yes = {True: "yes", False: "no"}
    for name, m in metric_specs().items():
        better = "higher" if m.higher_is_better else "lower"
        span = "unbounded" if m.bounds is None else f"{m.bounds[0]:g} to {m.bounds[1]:g}"
        lines.append(
            f"| `{name}` | {better} | `{m.nan}` | `{m.averaging}` | {span} | {yes[m.intervals]} "
            f"| {yes[m.chance]} | {m.title} | {m.doc} |"
        )
    return "\n".join(lines)


def model_table() -> str:
    """One row per hyperparameter of each registered model (the model's own on its first row)."""
    lines = [
        "| model | estimator | hyperparameter | default | values |",
        "|---|---|---|---|---|",
    ]
    for name, spec in model_specs().items():
        kind = [k for k, on in (("baseline", spec.baseline), ("slow", spec.slow)) if on]
        if spec.inputs != "rows":
            kind.append(f"input: {spec.inputs}")
        note = f" ({'; '.join(kind)})" if kind else ""
        first = f"| `{name}` | {spec.doc}{note} |"
        if not spec.params:
            lines.append(f"{first} (none) | | |")
        for i, (hp, h) in enumerate(spec.params.items()):
            values = h.domain.text() + (f"; {h.note}" if h.note else "")
            lines.append(
                f"{first if i == 0 else '| | |'} `{hp}` | `{_flow(h.default)}` | {values} |"
            )
    return "\n".join(lines)


def defaults_note(given: Collection[str], cfg: ExperimentConfig) -> str:
    """A warning for a config file that leaves ``models`` or a choice among several
    ``feature_sets`` to the defaults (not for a search), else ""; ``given``: the top-level keys
    the file and its ``--set`` options set."""
    why = []
    if "models" not in given:
        names = ", ".join(m.name for m in cfg.models)
        why.append(f"no `models`, so the default models ({names}) with their grids")
    if "feature_set" not in given and len(cfg.feature_set) > 1:
        why.append(f"no `feature_set`, so every feature set ({', '.join(cfg.feature_set)})")
    if not why or cfg.search.method != "grid":
        return ""
    n = len(expand(cfg))
    return (
        f"{cfg.source} has {' and '.join(why)}: {n} configurations, logged to experiment "
        f"{cfg.tracking.experiment!r}; list `models` and `feature_set` (and set "
        "tracking.experiment) to sweep what you mean (`--print-config` shows the whole config; "
        "the packaged `smoke` config is 5 configurations)"
    )
