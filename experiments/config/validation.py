"""Validation of an experiment config: every key and value checked, each error naming the file
and line (or ``--set`` option), the key path and the nearest valid name (docs/design.md#experiment-config).

>>> validate({"window": {"algin": "causal"}}, "exp.yaml", lines={"window": 3, "window.algin": 4})
Traceback (most recent call last):
...
featurestore.errors.ConfigError: exp.yaml:4: window.algin: unknown key; did you mean 'align'?
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import asdict
from functools import partial
from typing import Any, TypeVar

from featurestore.storage.roles import role_words, store_role

from .checker import Checker, suggest
from .fusion import fusion_config
from .gold_standard import GoldStandard
from .gold_standard import methods as gold_standard_methods
from .grid import MAX_CONFIGURATIONS, grid_size
from .metrics import metric_specs
from .models import model_specs
from .options import (
    ALIGNS,
    AVERAGINGS,
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
    is_number,
)
from .search_space import SearchSpaceError, search_space
from .store_check import StoreNames, store_problems

T = TypeVar("T")
_CURRENT = object()  # a config key's default: the value the config holds


def validate(
    raw: dict,
    source: str = "<dict>",
    origins: Mapping[str, str] | None = None,
    lines: Mapping[str, int] | None = None,
    store: StoreNames | None = None,
    max_configurations: int = MAX_CONFIGURATIONS,
) -> ExperimentConfig:
    """Check a config mapping (as read from YAML, overrides applied) and fill in the defaults.

    ``source`` is named in every error; ``origins``: dotted key -> the ``--set`` option that set
    it; ``lines``: dotted key (``models.0.alpha``) -> its line; ``store``: the names a feature
    store holds, checked against the target and the swept channels; ``max_configurations``: the
    largest grid (or Optuna search). Raises ConfigError with every problem found (``problems``).
    """
    checker = _Validator(source, origins or {}, lines or {})
    checker.max_configurations = max_configurations
    return checker.config(raw, store)


class _Validator(Checker):
    """The sections of a config; the value checks and error collection are :class:`Checker`'s."""

    max_configurations = MAX_CONFIGURATIONS

    def config(self, raw: dict, store: StoreNames | None = None) -> ExperimentConfig:
        """Every section checked (a failed one keeps its default), then the rules across keys
        and the names the store must hold."""
        self.mapping("", raw, TOP_KEYS)
        self.raw = raw
        cfg = ExperimentConfig(source=self.source)
        self._splits_and_sets(raw, cfg)
        self._grid(cfg)
        self._scoring(raw, cfg)
        self._across_keys(cfg)
        if store is not None:
            for key, msg in store_problems(cfg, store, skip=self.failed):
                self.add(key, msg)
        self.raise_errors()
        return cfg

    def _read(
        self, cfg: ExperimentConfig, key: str, check: Callable[[Any], Any], default: Any = _CURRENT
    ) -> None:
        """``cfg.<key> = check(raw[key])``, of ``default`` (or the current value) when absent;
        the current value stays when the check fails."""
        current = getattr(cfg, key)
        value = self.raw.get(key, current if default is _CURRENT else default)
        setattr(cfg, key, self.attempt(key, partial(check, value), current))

    def _splits_and_sets(self, raw: dict, cfg: ExperimentConfig) -> None:
        """``search`` first (ranges depend on it), then target, protocol, folds, splits, sets."""
        self._read(cfg, "search", self.search, None)
        self.search_method = cfg.search.method
        target = partial(self.target, raw.get("target", cfg.target))
        targets = self.attempt("target", target, [cfg.target])
        cfg.target, cfg.targets = targets[0], targets if len(targets) > 1 else []
        self._read(cfg, "protocol", partial(self.one, "protocol", valid=PROTOCOLS))
        folds = partial(
            self.protocol_check, check_folds, protocol=cfg.protocol, given="folds" in raw
        )
        self._read(cfg, "folds", folds)
        self._read(cfg, "splits", partial(self.protocol_check, check_splits, protocol=cfg.protocol))
        self._read(cfg, "feature_sets", self.feature_sets)
        cfg.feature_set = list(cfg.feature_sets)
        if "feature_sets" not in self.failed:  # the names are checked against the sets
            self._read(cfg, "feature_set", partial(self.feature_set, sets=cfg.feature_sets), "all")

    def _grid(self, cfg: ExperimentConfig) -> None:
        self._read(cfg, "window", self.window, {})
        pers = partial(self.enum_list, "personalization", valid=PERSONALIZATIONS)
        self._read(cfg, "personalization", pers)
        self._read(cfg, "postprocess", self.postprocess, {})
        self._read(cfg, "models", partial(self.models, cfg=cfg), [m.to_dict() for m in cfg.models])

    def _scoring(self, raw: dict, cfg: ExperimentConfig) -> None:
        self._read(cfg, "tracking", self.tracking, {})
        self._read(cfg, "seed", partial(self.integer, "seed"))
        metrics = metric_specs()
        self._read(cfg, "metric", partial(self.one, "metric", valid=metrics))
        own = metrics[cfg.metric].averaging if cfg.metric in metrics else cfg.averaging
        self._read(cfg, "averaging", partial(self.one, "averaging", valid=AVERAGINGS), own)
        self._read(cfg, "gold_standard", self.gold_standard, None)
        self.attempt("unseen_listener", lambda: self.unseen_listener(raw, cfg), None)
        self._read(cfg, "jobs", partial(self.integer, "jobs", minimum=1, none=True), None)
        self._read(cfg, "backend", partial(self.name, "backend"))
        self._read(cfg, "importance", self.importance, None)
        sets = {"swept": cfg.feature_set, "defined": list(cfg.feature_sets)}
        fusion = partial(fusion_config, protocol=cfg.protocol, fail=self.fail, **sets)
        self._read(cfg, "fusion", fusion, None)

    def _across_keys(self, cfg: ExperimentConfig) -> None:
        """The rules that span keys, once every section is valid (a search or fusion takes one
        target: the grid's sweep and ablation report per target, these do not yet)."""
        if self.errors:
            return
        if problem := person_held_out_problem(cfg):
            self.add(*problem)
        targets = cfg.all_targets()
        on = {"search": cfg.search.method == "optuna", "fusion": cfg.fusion.enabled}
        for key in [k for k, v in on.items() if v and len(targets) > 1]:
            self.add(
                key,
                f"{key} takes one target, the config names {len(targets)} "
                f"({', '.join(targets)}); run one config per target (--set target=NAME)",
            )
        if cfg.search.method == "optuna" and not self.errors:
            try:
                search_space(cfg)
            except SearchSpaceError as e:
                self.add(e.key, str(e))
        if not self.errors:
            self._size(cfg)

    def _size(self, cfg: ExperimentConfig) -> None:
        """A grid (or search) beyond :attr:`max_configurations` is refused before it is expanded."""
        limit = self.max_configurations
        raise_it = f"or raise the limit with --max-configurations N (now {limit:,})"
        if cfg.search.method == "optuna":
            if cfg.search.n_trials > limit:
                trials = f"{cfg.search.n_trials:,} trials, more than the limit; ask for fewer, "
                self.add("search.n_trials", trials + raise_it)
            return
        total, sizes = grid_size(cfg)
        if total <= limit:
            return
        axes = {k: n for k, n in sizes.items() if n > 1}
        largest = max(axes, key=lambda k: axes[k]) if axes else "models"
        self.add(
            largest,
            f"the grid has {total:,} configurations, more than the limit: "
            + ", ".join(f"{k} {n:,}" for k, n in axes.items())
            + " values; shorten those lists (or narrow a model's `only`), sample them with "
            "an Optuna search (search.method: optuna, search.n_trials: N), " + raise_it,
        )

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

    def unseen_listener(self, raw: dict, cfg: ExperimentConfig) -> None:
        """``unseen_listener``: false, true (``nested``) or ``{selection, configuration}``; an
        Optuna search takes only false or ``chosen`` (without the key: none, with a warning)."""
        unseen = raw.get("unseen_listener", cfg.unseen_listener)
        if isinstance(unseen, dict):
            cfg.unseen_selection, cfg.unseen_configuration = self.unseen(unseen)
            unseen = True
        if not isinstance(unseen, bool):
            expected = "expected true, false or {selection: nested}"
            raise self.fail("unseen_listener", f"{expected}, got {unseen!r}")
        cfg.unseen_listener = unseen
        if not unseen or self.search_method != "optuna" or cfg.unseen_selection == "chosen":
            return
        why = (
            f"selection {cfg.unseen_selection} is not possible in an Optuna search: its trials are "
            "proposed from every listener's validation scores, so no configuration is chosen "
            "without a listener"
        )
        choices = (
            "`unseen_listener: {selection: chosen}` for the search's choice refitted without each "
            "listener (not a score for a person never seen, and marked so)"
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

    def unseen(self, value: dict) -> tuple[str, str]:
        value = self.mapping("unseen_listener", value, ["selection", "configuration"])
        get = value.get
        selection = self.one(
            "unseen_listener.selection", get("selection", "nested"), UNSEEN_SELECTIONS
        )
        configuration = get("configuration", "")
        if selection == "fixed" and (not isinstance(configuration, str) or not configuration):
            raise self.fail(
                "unseen_listener.configuration",
                "selection fixed needs the configuration: its label or config hash, named before "
                "seeing any data (experiments sweep --print-config lists none; a run's label does)",
            )
        return selection, str(configuration or "")

    def search(self, value: Any) -> SearchConfig:
        """``search``; with ``method: grid`` its other keys are kept unused."""
        out = SearchConfig()
        value = self.mapping("search", value, list(out.to_dict()))
        get = value.get
        choices = {"method": SEARCH_METHODS, "sampler": SEARCH_SAMPLERS, "track": TRACKS}
        for k, valid in choices.items():
            setattr(out, k, self.one(f"search.{k}", get(k, getattr(out, k)), valid))
        for k, minimum in (("n_trials", 1), ("seed", 0), ("startup_trials", 0)):
            setattr(out, k, self.integer(f"search.{k}", get(k, getattr(out, k)), minimum))
        out.storage = get("storage")
        if out.storage is not None and (not isinstance(out.storage, str) or not out.storage):
            raise self.fail(
                "search.storage",
                f"expected an Optuna storage URL such as sqlite:///mlruns/optuna.db, got {out.storage!r}",
            )
        return out

    def protocol_check(self, check: Callable[..., T], value: Any, **kwargs: Any) -> T:
        """A check of :mod:`.protocols`, its problem placed at the key's line."""
        try:
            return check(value, **kwargs)
        except ProtocolProblem as e:
            raise self.fail(e.key, e.message) from None

    def feature_sets(self, value: Any) -> dict[str, list[str]]:
        value = self.mapping("feature_sets", value)
        if not value:
            msg = "no feature sets; define at least one name -> [role/channel, ...]"
            raise self.fail("feature_sets", msg)
        sets = {
            str(n): self.attempt("feature_sets", partial(self.members, str(n), keys), None)
            for n, keys in value.items()
        }
        return {name: chans for name, chans in sets.items() if chans is not None}

    def members(self, name: str, keys: Any) -> list[str]:
        """One feature set's ``role/channel`` keys, each role in the store's words."""
        key = f"feature_sets.{name}"
        chans: list[str] = []
        for ch in self.as_list(key, keys):
            role_word, _, channel = str(ch).partition("/")
            if not channel or "/" in channel:
                raise self.fail(key, f"{ch!r} is not ROLE/CHANNEL, e.g. listener/egemaps")
            role = store_role(role_word)  # a corpus's word (person, partner) or the store's
            if role is None:
                words = role_words()
                valid = f"{', '.join(words)}{suggest(role_word, words)}"
                raise self.fail(key, f"{ch!r}: role {role_word!r} is not one of {valid}")
            if f"{role}/{channel}" not in chans:
                chans.append(f"{role}/{channel}")
        return chans

    def feature_set(self, value: Any, sets: dict[str, list[str]]) -> list[str]:
        if value == "all" or value is None:
            return list(sets)
        for v in self.as_list("feature_set", value):
            if v not in sets:
                known = f"({', '.join(sets)}){suggest(v, sets)}"
                raise self.fail("feature_set", f"{v!r} is not defined in feature_sets {known}")
        return list(dict.fromkeys(self.as_list("feature_set", value)))

    def window(self, value: Any) -> WindowConfig:
        w = WindowConfig()
        get = self.mapping("window", value, list(asdict(w))).get
        lengths = get("lengths_s", w.lengths_s)
        if isinstance(lengths, dict):
            w.lengths_s = self.range("window.lengths_s", lengths, 0.0, strict=True)
        else:
            w.lengths_s = self.lengths("window.lengths_s", lengths)
        w.delay_s = self.number_axis("window.delay_s", get("delay_s", w.delay_s), 0.0)
        w.align = self.enum_list("window.align", get("align", w.align), ALIGNS)
        w.stats = self.enum_list("window.stats", get("stats", w.stats), STATS)
        hop = get("train_hop_s", w.train_hop_s)
        w.train_hop_s = self.number("window.train_hop_s", hop, 0.0, strict=True)
        return w

    def postprocess(self, value: Any) -> PostprocessConfig:
        d = PostprocessConfig()
        get = self.mapping("postprocess", value, list(asdict(d))).get
        methods = get("smooth_method", d.smooth_method)
        return PostprocessConfig(
            fit_on=self.one("postprocess.fit_on", get("fit_on", d.fit_on), FIT_ON),
            smooth_s=self.number_axis("postprocess.smooth_s", get("smooth_s", d.smooth_s), 0.0),
            smooth_method=self.enum_list("postprocess.smooth_method", methods, SMOOTH_METHODS),
            rescale=self.enum_list("postprocess.rescale", get("rescale", d.rescale), RESCALES),
        )

    def importance(self, value: Any) -> ImportanceConfig | None:
        if value is None or value is False:
            return None
        d = ImportanceConfig()
        get = ({} if value is True else self.mapping("importance", value, list(d.to_dict()))).get
        return ImportanceConfig(
            self.integer("importance.repeats", get("repeats", d.repeats), 1),
            self.enum_list("importance.levels", get("levels", d.levels), IMPORTANCE_LEVELS),
            self.one("importance.split", get("split", d.split), ("test", "val")),
        )

    def gold_standard(self, value: Any) -> GoldStandard:
        if value is None:
            return GoldStandard()
        d = GoldStandard()
        value = {"method": value} if isinstance(value, str) else value
        get = self.mapping("gold_standard", value, list(asdict(d))).get
        method = self.one("gold_standard.method", get("method", d.method), gold_standard_methods())
        align = self.boolean("gold_standard.align_lags", get("align_lags", d.align_lags))
        lag = get("max_lag_s", d.max_lag_s)
        if not is_number(lag) or not lag >= 0:
            raise self.fail("gold_standard.max_lag_s", f"expected seconds >= 0, got {lag!r}")
        return GoldStandard(method, align, float(lag))

    def tracking(self, value: Any) -> TrackingConfig:
        t = TrackingConfig()
        value = self.mapping("tracking", value, ["uri", "experiment", "artifacts"])
        for k in ("uri", "experiment", *(("artifacts",) if "artifacts" in value else ())):
            v = value.get(k, getattr(t, k))
            if not isinstance(v, str) or not v:
                raise self.fail(f"tracking.{k}", f"expected a non-empty string, got {v!r}")
            setattr(t, k, v)
        return t

    def models(self, value: Any, cfg: ExperimentConfig) -> list[ModelGrid]:
        if not isinstance(value, list) or not value:
            msg = "expected a list of {name: MODEL, HYPERPARAMETER: [values]} entries"
            raise self.fail("models", msg)
        checks = (partial(self.model, i, e, cfg) for i, e in enumerate(value))
        out = [self.attempt("models", check, None) for check in checks]
        return [m for m in out if m is not None]

    def model(self, i: int, entry: Any, cfg: ExperimentConfig) -> ModelGrid:
        """One ``models`` entry (every unknown hyperparameter and value outside reported)."""
        key = f"models[{i}]"
        entry = {"name": entry} if isinstance(entry, str) else entry
        if not isinstance(entry, dict) or "name" not in entry:
            example = "e.g. {name: ridge, alpha: [1, 10]}"
            raise self.fail(key, f"expected a mapping with a name, {example}, got {entry!r}")
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
            if isinstance(values, dict):
                grid.params[hp] = r = self.range(f"{key}.{hp}", values)
                if spec.params[hp].domain.integer and not r.int:
                    self.note(
                        f"{key}.{hp}", "an integer hyperparameter: add `int: true` to its range"
                    )
                    continue
                values = [r.low, r.high]
            else:
                grid.params[hp] = values = self.as_list(f"{key}.{hp}", values)
            domain = spec.params[hp].domain
            for v in [v for v in values if not domain.admits(v)]:
                self.note(f"{key}.{hp}", f"expected {domain.text()}, got {v!r}")
        grid.only = self.only(f"{key}.only", entry.get("only"), cfg)
        return grid

    def only(self, key: str, value: Any, cfg: ExperimentConfig) -> dict[str, list[Any]]:
        """A model's ``only``: grid axes (dotted or nested) -> the values it keeps."""
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
