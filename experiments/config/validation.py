"""Validation of an experiment config: every key and value checked, with errors a user can act on.

Each error names where the value came from (the file and the line of the key, or the
``--set`` option), the key path as it is written (``models[0].alpha``), what was expected,
and for a misspelt key or value the nearest valid one (``difflib``), else the valid ones.

**Hand-written, not pydantic (issue 13).** Both were tried on the same mistakes; pydantic
2.14 with ``extra="forbid"`` and ``Literal`` fields, the closest a model of these dataclasses
gets without custom validators:

============================  ===========================================  ============================================
config (file ``exp.yaml``)    this module                                  pydantic v2
============================  ===========================================  ============================================
``window: {algin: causal}``   ``exp.yaml:1: window.algin: unknown key;     ``window.algin  Extra inputs are not
                              did you mean 'align'?``                      permitted [type=extra_forbidden,
                                                                           input_value='causal']``
``window: {align: centered}`` ``exp.yaml:1: window.align: 'centered' is    ``window.align  Input should be a valid list
                              not one of centred, causal; did you mean     [type=list_type, input_value='centered']``
                              'centred'?``                                 (as a list: ``window.align.0  Input should
                                                                           be 'centred' or 'causal'``)
``models: [{name: xgbost}]``  ``exp.yaml:1: models[0].name: unknown model  ``models.0.name  Input should be 'ridge',
                              'xgbost'; did you mean 'xgboost'?``          'linear_svr', 'svr', 'xgboost', 'hist_gb' or
                                                                           'dummy' [type=literal_error]``
``personalisation: [global]`` ``exp.yaml:1: personalisation: unknown key;  ``personalisation  Extra inputs are not
                              did you mean 'personalization'?``            permitted [type=extra_forbidden]``
``seed: 1.5``                 ``exp.yaml:1: seed: expected an integer,     ``seed  Input should be a valid integer, got
                              got 1.5``                                    a number with a fractional part``
============================  ===========================================  ============================================

pydantic gives the key path, but no file, no line and no suggestion; a single value where
the config takes a list (``align: causal``, which every packaged config writes) is an error
unless each axis gets a before-validator; and the rules that span keys (a story in two
splits, ``protocol: val`` without validation stories, ``lengths_s: [2, 8]`` being ambiguous,
ranges only in an Optuna search, a model's ``only`` naming grid axes, an empty search space
on the chosen track) would be model validators, the same code as here inside pydantic's
hooks. Reaching today's messages would mean a layer mapping pydantic's error locations to
lines and its ``expected`` lists to suggestions, tied to its message wording, which changes
between releases: more code than the validator below, and a new dependency of the config.

>>> validate({"window": {"align": "causal"}}).window.align
['causal']
>>> validate({"window": {"algin": "causal"}}, "exp.yaml", lines={"window": 3, "window.algin": 4})
Traceback (most recent call last):
...
featurestore.overrides.ConfigError: exp.yaml:4: window.algin: unknown key; did you mean 'align'?
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from functools import partial
from typing import Any

from featurestore.storage.roles import role_words, store_role

from .checker import Checker, suggest
from .fusion import fusion_config
from .gold_standard import METHODS as GOLD_STANDARD_METHODS
from .gold_standard import GoldStandard
from .metrics import metric_specs
from .models import model_specs
from .options import (
    ALIGNS,
    CCC_AVERAGINGS,
    FIT_ON,
    IMPORTANCE_LEVELS,
    PERSONALIZATIONS,
    PROTOCOLS,
    RESCALES,
    SMOOTH_METHODS,
    STATS,
    TRACKS,
    UNSEEN_SELECTIONS,
    ConfigWarning,
)
from .protocols import ProtocolProblem, check_folds, check_splits, person_held_out_problem
from .schema import (
    ONLY_AXES,
    SEARCH_METHODS,
    SEARCH_SAMPLERS,
    TOP_KEYS,
    ExperimentConfig,
    ImportanceConfig,
    ModelGrid,
    PostprocessConfig,
    SearchConfig,
    TrackingConfig,
    WindowConfig,
)
from .search_space import SearchSpaceError, search_space
from .store_check import StoreNames, store_problems


def validate(
    raw: dict,
    source: str = "<dict>",
    origins: Mapping[str, str] | None = None,
    lines: Mapping[str, int] | None = None,
    store: StoreNames | None = None,
) -> ExperimentConfig:
    """Check a config mapping (as read from YAML, overrides applied) and fill in the defaults.

    Args:
        raw: the mapping.
        source: where it came from (a file path), named in every error.
        origins: dotted key -> the ``--set KEY=VALUE`` option that set it (errors name it).
        lines: dotted key (list items by index: ``models.0.alpha``) -> line of the file it is on.
        store: the names a feature store holds (:func:`~experiments.config.store_check.store_names`):
            the target and the swept feature sets' channels are checked against them.

    Raises:
        ConfigError: every problem found, each with the file (and line) or ``--set`` option,
            the key path and, for a misspelt key or value, the nearest valid one (one error
            whose ``problems`` lists them when there are several).
    """
    return _Validator(source, origins or {}, lines or {}).config(raw, store)


class _Validator(Checker):
    """The sections of a config; the value checks and error collection are :class:`Checker`'s."""

    # ---- sections
    def config(self, raw: dict, store: StoreNames | None = None) -> ExperimentConfig:
        """Every section checked, each problem recorded (a failed section keeps its default so
        the others are still checked); then, with ``store``, the names the store must hold."""
        self.mapping("", raw, TOP_KEYS)
        d = ExperimentConfig()
        cfg = ExperimentConfig(source=self.source)
        cfg.search = self.attempt("search", lambda: self.search(raw.get("search")), d.search)
        self.search_method = cfg.search.method
        targets = self.attempt(
            "target", lambda: self.target(raw.get("target", d.target)), [d.target]
        )
        cfg.target, cfg.targets = targets[0], targets if len(targets) > 1 else []
        cfg.protocol = self.attempt(
            "protocol",
            lambda: self.one("protocol", raw.get("protocol", d.protocol), PROTOCOLS),
            d.protocol,
        )
        cfg.folds = self.attempt(
            "folds",
            lambda: self.folds(raw.get("folds", d.folds), cfg.protocol, "folds" in raw),
            d.folds,
        )
        cfg.splits = self.attempt(
            "splits", lambda: self.splits(raw.get("splits", d.splits), cfg.protocol), d.splits
        )
        cfg.feature_sets = self.attempt(
            "feature_sets",
            lambda: self.feature_sets(raw.get("feature_sets", d.feature_sets)),
            d.feature_sets,
        )
        if "feature_sets" not in self.failed:  # the names are checked against the sets
            cfg.feature_set = self.attempt(
                "feature_set",
                lambda: self.feature_set(raw.get("feature_set", "all"), cfg.feature_sets),
                list(cfg.feature_sets),
            )
        cfg.window = self.attempt("window", lambda: self.window(raw.get("window", {})), d.window)
        cfg.personalization = self.attempt(
            "personalization",
            lambda: self.enum_list(
                "personalization", raw.get("personalization", d.personalization), PERSONALIZATIONS
            ),
            d.personalization,
        )
        cfg.postprocess = self.attempt(
            "postprocess", lambda: self.postprocess(raw.get("postprocess", {})), d.postprocess
        )
        cfg.tracking = self.attempt(
            "tracking", lambda: self.tracking(raw.get("tracking", {})), d.tracking
        )
        cfg.seed = self.attempt("seed", lambda: self.integer("seed", raw.get("seed", d.seed)), 0)
        cfg.metric = self.attempt(
            "metric", lambda: self.one("metric", raw.get("metric", d.metric), metric_specs()), "ccc"
        )
        averaging = metric_specs()[cfg.metric].averaging if cfg.metric in metric_specs() else None
        cfg.ccc_averaging = self.attempt(
            "ccc_averaging",
            lambda: self.one("ccc_averaging", raw.get("ccc_averaging", averaging), CCC_AVERAGINGS),
            d.ccc_averaging,
        )
        cfg.gold_standard = self.attempt(
            "gold_standard", lambda: self.gold_standard(raw.get("gold_standard")), d.gold_standard
        )
        self.attempt("unseen_listener", lambda: self.unseen_listener(raw, cfg), None)
        cfg.jobs = self.attempt("jobs", lambda: self.jobs(raw.get("jobs")), None)
        cfg.executor = self.attempt("executor", lambda: self.name("executor", raw), "local")
        models = raw["models"] if "models" in raw else [m.to_dict() for m in d.models]
        cfg.models = self.attempt("models", lambda: self.models(models, cfg), d.models)
        cfg.importance = self.attempt(
            "importance", lambda: self.importance(raw.get("importance")), None
        )
        cfg.fusion = self.attempt(
            "fusion",
            lambda: fusion_config(
                raw.get("fusion"), cfg.feature_set, cfg.protocol, self.fail, list(cfg.feature_sets)
            ),
            d.fusion,
        )
        if not self.errors and (problem := person_held_out_problem(cfg)):
            self.errors.append(self.fail(*problem))
        if len(cfg.all_targets()) > 1 and not self.errors:
            for key, on in (
                ("search", cfg.search.method == "optuna"),
                ("fusion", cfg.fusion.enabled),
            ):
                if on:  # the grid's sweep and ablation report per target; these do not yet
                    self.errors.append(
                        self.fail(
                            key,
                            f"{key} takes one target, the config names {len(cfg.all_targets())} "
                            f"({', '.join(cfg.all_targets())}); run one config per target "
                            "(--set target=NAME)",
                        )
                    )
        if cfg.search.method == "optuna" and not self.errors:
            try:
                search_space(cfg)
            except SearchSpaceError as e:
                self.errors.append(self.fail(e.key, str(e)))
        if store is not None:
            for key, msg in store_problems(cfg, store, skip=self.failed):
                self.errors.append(self.fail(key, msg))
        self.raise_errors()
        return cfg

    def target(self, target: Any) -> list[str]:
        """One target name, or a list of different names (several targets)."""
        names = target if isinstance(target, list) else [target]
        if not names or not all(isinstance(t, str) and t for t in names):
            raise self.fail(
                "target",
                "expected a label target name such as valence_self, or a list of them such as "
                f"[valence_self, arousal_self], got {target!r}",
            )
        if len(set(names)) < len(names):
            twice = sorted({t for t in names if names.count(t) > 1})
            raise self.fail("target", f"{', '.join(twice)} listed twice; name each target once")
        return names

    def name(self, key: str, raw: dict) -> str:
        """A name checked where it is used (an executor: a layer above the config's)."""
        value = raw.get(key, getattr(ExperimentConfig(), key))
        if not isinstance(value, str) or not value.isidentifier():
            raise self.fail(key, f"expected a name such as local or dask, got {value!r}")
        return value

    def integer(self, key: str, value: Any) -> int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.fail(key, f"expected an integer, got {value!r}")
        return value

    def jobs(self, jobs: Any) -> int | None:
        if jobs is not None and (not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1):
            raise self.fail("jobs", f"expected a positive integer or null, got {jobs!r}")
        return jobs

    def unseen_listener(self, raw: dict, cfg: ExperimentConfig) -> None:
        """``unseen_listener``: false, true (selection ``nested``, the default) or
        ``{selection, configuration}``. An Optuna search takes only false or ``chosen``: one
        that does not write the key gets none (a :class:`ConfigWarning` says so)."""
        unseen = raw.get("unseen_listener", cfg.unseen_listener)
        if isinstance(unseen, dict):
            cfg.unseen_selection, cfg.unseen_configuration = self.unseen(unseen)
            unseen = True
        if not isinstance(unseen, bool):
            raise self.fail(
                "unseen_listener",
                f"expected true, false or {{selection: nested}}, got {unseen!r}",
            )
        cfg.unseen_listener = unseen
        if unseen and self.search_method == "optuna" and cfg.unseen_selection != "chosen":
            why = (
                f"selection {cfg.unseen_selection} is not possible in an Optuna search: its trials "
                "are proposed from every listener's validation scores, so no configuration is chosen "
                "without a listener"
            )
            choices = (
                "`unseen_listener: {selection: chosen}` for the search's choice refitted without "
                "each listener (not a score for a person never seen, and marked so)"
            )
            if "unseen_listener" in raw:
                raise self.fail(
                    "unseen_listener", f"{why}; write `unseen_listener: false`, or {choices}"
                )
            warnings.warn(
                f"{self.source}: unseen listeners off: {why}; write `unseen_listener: false` to "
                f"silence this, or {choices}",
                ConfigWarning,
                stacklevel=2,
            )
            cfg.unseen_listener = False

    def search(self, value: Any) -> SearchConfig:
        value = self.mapping("search", value, list(SearchConfig().to_dict()))
        d = SearchConfig()
        out = SearchConfig()
        for k, valid in (
            ("method", SEARCH_METHODS),
            ("sampler", SEARCH_SAMPLERS),
            ("track", TRACKS),
        ):
            setattr(out, k, self.one(f"search.{k}", value.get(k, getattr(d, k)), valid))
        for k, minimum in (("n_trials", 1), ("seed", 0), ("startup_trials", 0)):
            v = value.get(k, getattr(d, k))
            if not isinstance(v, int) or isinstance(v, bool) or v < minimum:
                raise self.fail(f"search.{k}", f"expected an integer >= {minimum}, got {v!r}")
            setattr(out, k, v)
        storage = value.get("storage")
        if storage is not None and (not isinstance(storage, str) or not storage):
            raise self.fail(
                "search.storage",
                f"expected an Optuna storage URL such as sqlite:///mlruns/optuna.db, got {storage!r}",
            )
        out.storage = storage
        return out  # with method grid the other keys are kept unused: --set search.method=grid runs the lists as a grid

    def folds(self, value: Any, protocol: str, given: bool) -> int:
        try:
            return check_folds(value, protocol, given)
        except ProtocolProblem as e:
            raise self.fail(e.key, e.message) from None

    def splits(self, value: Any, protocol: str) -> dict[str, list[int]]:
        try:
            return check_splits(value, protocol)
        except ProtocolProblem as e:
            raise self.fail(e.key, e.message) from None

    def feature_sets(self, value: Any) -> dict[str, list[str]]:
        value = self.mapping("feature_sets", value)
        if not value:
            raise self.fail(
                "feature_sets", "no feature sets; define at least one name -> [role/channel, ...]"
            )
        out: dict[str, list[str]] = {}
        for name, keys in value.items():
            chans = self.attempt("feature_sets", partial(self.members, str(name), keys), None)
            if chans is not None:
                out[str(name)] = chans
        return out

    def members(self, name: str, keys: Any) -> list[str]:
        """One feature set's ``role/channel`` keys, each role checked and put in the store's
        words (``person/face_geom`` -> ``listener/face_geom``, :mod:`featurestore.storage.roles`;
        the channels are checked against a store, when one is given)."""
        key = f"feature_sets.{name}"
        chans: list[str] = []
        for ch in self.as_list(key, keys):
            parts = str(ch).split("/")
            if len(parts) != 2 or not parts[1]:
                raise self.fail(key, f"{ch!r} is not ROLE/CHANNEL, e.g. listener/egemaps")
            role = store_role(parts[0])  # a corpus's word (person, partner) or the store's
            if role is None:
                words = role_words()
                raise self.fail(
                    key,
                    f"{ch!r}: role {parts[0]!r} is not one of {', '.join(words)}{suggest(parts[0], words)}",
                )
            ch = f"{role}/{parts[1]}"
            if ch not in chans:
                chans.append(ch)
        return chans

    def feature_set(self, value: Any, sets: dict[str, list[str]]) -> list[str]:
        if value == "all" or value is None:
            return list(sets)
        names = []
        for v in self.as_list("feature_set", value):
            if v not in sets:
                raise self.fail(
                    "feature_set",
                    f"{v!r} is not defined in feature_sets ({', '.join(sets)}){suggest(v, sets)}",
                )
            if v not in names:
                names.append(v)
        return names

    def window(self, value: Any) -> WindowConfig:
        allowed = ["lengths_s", "delay_s", "align", "stats", "train_hop_s"]
        value = self.mapping("window", value, allowed)
        d = WindowConfig()
        w = WindowConfig()
        lengths = value.get("lengths_s", d.lengths_s)
        if isinstance(lengths, dict):
            w.lengths_s = self.range("window.lengths_s", lengths, 0.0, strict=True)
        else:
            w.lengths_s = self.lengths("window.lengths_s", lengths)
        w.delay_s = self.number_axis("window.delay_s", value.get("delay_s", d.delay_s), 0.0)
        w.align = self.enum_list("window.align", value.get("align", d.align), ALIGNS)
        w.stats = self.enum_list("window.stats", value.get("stats", d.stats), STATS)
        hop = value.get("train_hop_s", d.train_hop_s)
        w.train_hop_s = self.number("window.train_hop_s", hop, 0.0, strict=True)
        return w

    def postprocess(self, value: Any) -> PostprocessConfig:
        value = self.mapping(
            "postprocess", value, ["smooth_s", "smooth_method", "rescale", "fit_on"]
        )
        d = PostprocessConfig()
        return PostprocessConfig(
            fit_on=self.one("postprocess.fit_on", value.get("fit_on", d.fit_on), FIT_ON),
            smooth_s=self.number_axis(
                "postprocess.smooth_s", value.get("smooth_s", d.smooth_s), 0.0
            ),
            smooth_method=self.enum_list(
                "postprocess.smooth_method",
                value.get("smooth_method", d.smooth_method),
                SMOOTH_METHODS,
            ),
            rescale=self.enum_list(
                "postprocess.rescale", value.get("rescale", d.rescale), RESCALES
            ),
        )

    def unseen(self, value: dict) -> tuple[str, str]:
        """``unseen_listener: {selection, configuration}`` -> (selection, configuration)."""
        value = self.mapping("unseen_listener", value, ["selection", "configuration"])
        selection = self.enum_list(
            "unseen_listener.selection", value.get("selection", "nested"), UNSEEN_SELECTIONS
        )[0]
        configuration = value.get("configuration", "")
        if selection == "fixed" and (not isinstance(configuration, str) or not configuration):
            raise self.fail(
                "unseen_listener.configuration",
                "selection fixed needs the configuration: its label or config hash, named before "
                "seeing any data (experiments sweep --print-config lists none; a run's label does)",
            )
        return selection, str(configuration or "")

    def importance(self, value: Any) -> ImportanceConfig | None:
        """``importance``: false/null (none), true (defaults) or ``{repeats, levels, split}``."""
        if value is None or value is False:
            return None
        d = ImportanceConfig()
        value = {} if value is True else self.mapping("importance", value, list(d.to_dict()))
        repeats = value.get("repeats", d.repeats)
        if not isinstance(repeats, int) or isinstance(repeats, bool) or repeats < 1:
            raise self.fail("importance.repeats", f"expected a positive integer, got {repeats!r}")
        levels = self.enum_list(
            "importance.levels", value.get("levels", d.levels), IMPORTANCE_LEVELS
        )
        split = self.enum_list("importance.split", value.get("split", d.split), ("test", "val"))
        return ImportanceConfig(repeats, levels, split[0])

    def gold_standard(self, value: Any) -> GoldStandard:
        """``{method: stored|mean|ewe, align_lags: bool, max_lag_s: seconds}`` (or just the method)."""
        if value is None:
            return GoldStandard()
        if isinstance(value, str):
            value = {"method": value}
        value = self.mapping("gold_standard", value, ["method", "align_lags", "max_lag_s"])
        d = GoldStandard()
        method = value.get("method", d.method)
        if method not in GOLD_STANDARD_METHODS:
            raise self.fail(
                "gold_standard.method",
                f"{method!r} is not one of {', '.join(GOLD_STANDARD_METHODS)}",
            )
        align = value.get("align_lags", d.align_lags)
        if not isinstance(align, bool):
            raise self.fail("gold_standard.align_lags", f"expected true or false, got {align!r}")
        lag = value.get("max_lag_s", d.max_lag_s)
        if isinstance(lag, bool) or not isinstance(lag, (int, float)) or not lag >= 0:
            raise self.fail("gold_standard.max_lag_s", f"expected seconds >= 0, got {lag!r}")
        return GoldStandard(method, align, float(lag))

    def tracking(self, value: Any) -> TrackingConfig:
        value = self.mapping("tracking", value, ["uri", "experiment"])
        d = TrackingConfig()
        t = TrackingConfig(
            uri=value.get("uri", d.uri), experiment=value.get("experiment", d.experiment)
        )
        for k in ("uri", "experiment"):
            if not isinstance(getattr(t, k), str) or not getattr(t, k):
                raise self.fail(
                    f"tracking.{k}", f"expected a non-empty string, got {getattr(t, k)!r}"
                )
        return t

    def models(self, value: Any, cfg: ExperimentConfig) -> list[ModelGrid]:
        if not isinstance(value, list) or not value:
            raise self.fail(
                "models", "expected a list of {name: MODEL, HYPERPARAMETER: [values]} entries"
            )
        out = [
            self.attempt("models", partial(self.model, i, e, cfg), None)
            for i, e in enumerate(value)
        ]
        return [m for m in out if m is not None]

    def model(self, i: int, entry: Any, cfg: ExperimentConfig) -> ModelGrid:
        """One ``models`` entry; every unknown hyperparameter of it is reported."""
        key = f"models[{i}]"
        if isinstance(entry, str):
            entry = {"name": entry}
        if not isinstance(entry, dict) or "name" not in entry:
            raise self.fail(
                key,
                f"expected a mapping with a name, e.g. {{name: ridge, alpha: [1, 10]}}, got {entry!r}",
            )
        name, models = entry["name"], model_specs()
        if name not in models:
            raise self.fail(f"{key}.name", f"unknown model {name!r}{suggest(name, sorted(models))}")
        spec, grid = models[name], ModelGrid(str(name))
        for hp, values in entry.items():
            if hp in ("name", "only"):
                continue
            if hp not in spec.params:
                hint = suggest(hp, [*spec.params, "only"]) if spec.params else "; it has none"
                self.note(f"{key}.{hp}", f"unknown hyperparameter of {name}{hint}")
                continue
            domain = spec.params[hp].domain
            if isinstance(values, dict):
                grid.params[hp] = r = self.range(f"{key}.{hp}", values)
                values = [r.low, r.high]
            else:
                grid.params[hp] = values = self.as_list(f"{key}.{hp}", values)
            for v in values:
                if not domain.admits(v):
                    self.note(f"{key}.{hp}", f"expected {domain.text()}, got {v!r}")
        grid.only = self.only(f"{key}.only", entry.get("only"), cfg)
        return grid

    def only(self, key: str, value: Any, cfg: ExperimentConfig) -> dict[str, list[Any]]:
        flat: dict[str, Any] = {}

        def walk(prefix: str, node: Any) -> None:
            if isinstance(node, dict) and prefix not in ONLY_AXES:
                for k, v in node.items():
                    walk(f"{prefix}.{k}" if prefix else str(k), v)
            else:
                flat[prefix] = node

        walk("", self.mapping(key, value))
        enums = {
            "feature_set": list(cfg.feature_sets),
            "window.align": ALIGNS,
            "personalization": PERSONALIZATIONS,
            "postprocess.smooth_method": SMOOTH_METHODS,
            "postprocess.rescale": RESCALES,
        }
        out: dict[str, list[Any]] = {}
        for axis, vals in flat.items():
            k = f"{key}.{axis}"
            if axis not in ONLY_AXES:
                raise self.fail(k, f"not a grid axis a model can narrow{suggest(axis, ONLY_AXES)}")
            if axis == "window.lengths_s":
                out[axis] = self.lengths(k, vals)
            elif axis in ("window.delay_s", "postprocess.smooth_s"):
                out[axis] = self.number_list(k, vals, 0.0)
            else:
                out[axis] = self.enum_list(k, vals, enums[axis])
        return out
