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
experiments.config.schema.ConfigError: exp.yaml:4: window.algin: unknown key; did you mean 'align'?
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from featurestore.sources.manifest import SPLITS

from .grid import format_value
from .options import (
    ALIGNS,
    FIT_ON,
    IMPORTANCE_LEVELS,
    MODEL_PARAMS,
    PERSONALIZATIONS,
    PROTOCOLS,
    RESCALES,
    ROLES,
    SMOOTH_METHODS,
    SPLIT_NAMES,
    STATS,
    TRACKS,
    UNSEEN_SELECTIONS,
)
from .schema import (
    ONLY_AXES,
    RANGE_KEYS,
    SEARCH_METHODS,
    SEARCH_SAMPLERS,
    ConfigError,
    ExperimentConfig,
    ImportanceConfig,
    ModelSpec,
    PostprocessConfig,
    Range,
    SearchConfig,
    TrackingConfig,
    WindowConfig,
    is_number,
)
from .search_space import SearchSpaceError, search_space


def _suggest(word: Any, valid: Iterable[Any]) -> str:
    valid = [str(v) for v in valid]
    close = difflib.get_close_matches(str(word), valid, n=1, cutoff=0.5)
    return f"; did you mean {close[0]!r}?" if close else f"; valid: {', '.join(valid)}"


def validate(
    raw: dict,
    source: str = "<dict>",
    origins: Mapping[str, str] | None = None,
    lines: Mapping[str, int] | None = None,
) -> ExperimentConfig:
    """Check a config mapping (as read from YAML, overrides applied) and fill in the defaults.

    Args:
        raw: the mapping.
        source: where it came from (a file path), named in every error.
        origins: dotted key -> the ``--set KEY=VALUE`` option that set it (errors name it).
        lines: dotted key (list items by index: ``models.0.alpha``) -> line of the file it is on.

    Raises:
        ConfigError: the first problem found, with the file (and line) or ``--set`` option,
            the key path and, for a misspelt key or value, the nearest valid one.
    """
    return _Validator(source, origins or {}, lines or {}).config(raw)


class _Validator:
    def __init__(self, source: str, origins: Mapping[str, str], lines: Mapping[str, int]) -> None:
        self.source = source
        self.origins = dict(origins)
        self.lines = dict(lines)
        self.search_method = "grid"  # set by :meth:`config` before any axis is read

    def fail(self, key: str, msg: str) -> ConfigError:
        where = self.source
        dotted = re.sub(
            r"\[(\d+)\]", r".\1", key
        )  # models[0].alpha -> models.0.alpha, as --set writes it
        for k, origin in self.origins.items():
            if dotted == k or dotted.startswith(k + ".") or k.startswith(dotted + "."):
                return ConfigError(f"{origin} (on {self.source}): {key}: {msg}")
        # the line of the key, or of its nearest enclosing key the file has (a default has none)
        parts = dotted.split(".") if dotted else []
        line = next(
            (
                self.lines[p]
                for p in (".".join(parts[:i]) for i in range(len(parts), 0, -1))
                if p in self.lines
            ),
            None,
        )
        if line is not None:
            where = f"{where}:{line}"
        return ConfigError(f"{where}: {key}: {msg}")

    # ---- helpers
    def mapping(self, key: str, value: Any, allowed: Sequence[str] | None = None) -> dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.fail(key, f"expected a mapping, got {type(value).__name__} {value!r}")
        if allowed is not None:
            for k in value:
                if k not in allowed:
                    raise self.fail(
                        f"{key}.{k}" if key else str(k), f"unknown key{_suggest(k, allowed)}"
                    )
        return value

    def as_list(self, key: str, value: Any) -> list:
        if isinstance(value, list | tuple):
            if not value:
                raise self.fail(key, "empty list; give at least one value")
            return list(value)
        if isinstance(value, dict):
            raise self.fail(key, f"expected a value or a list of values, got a mapping {value!r}")
        return [value]

    def enum_list(self, key: str, value: Any, valid: Sequence[str]) -> list[str]:
        out = []
        for v in self.as_list(key, value):
            if v not in valid:
                raise self.fail(key, f"{v!r} is not one of {', '.join(valid)}{_suggest(v, valid)}")
            if v not in out:
                out.append(v)
        return out

    def number(self, key: str, v: Any, minimum: float | None = None, strict: bool = False) -> float:
        if not is_number(v):
            raise self.fail(key, f"expected a number, got {v!r}")
        if minimum is not None and (v < minimum or (strict and v == minimum)):
            raise self.fail(key, f"{v!r} must be {'>' if strict else '>='} {minimum:g}")
        return float(v)

    def number_list(
        self, key: str, value: Any, minimum: float, strict: bool = False
    ) -> list[float]:
        out: list[float] = []
        for v in self.as_list(key, value):
            x = self.number(key, v, minimum, strict)
            if x not in out:
                out.append(x)
        return out

    def range(
        self, key: str, value: dict, minimum: float | None = None, strict: bool = False
    ) -> Range:
        """A range mapping ``{low, high[, log][, int][, step]}`` (only in an Optuna search)."""
        if self.search_method != "optuna":
            raise self.fail(
                key,
                f"a range {value!r} is sampled by an Optuna search, but search.method is "
                f"{self.search_method!r}; add `search: {{method: optuna, n_trials: 50, track: generalized}}` "
                "or list the values of a grid, e.g. [0.01, 0.1, 1]",
            )
        for k in value:
            if k not in RANGE_KEYS:
                raise self.fail(f"{key}.{k}", f"unknown key of a range{_suggest(k, RANGE_KEYS)}")
        for k in ("low", "high"):
            if k not in value:
                raise self.fail(
                    key,
                    f"a range needs low and high, e.g. {{low: 0.01, high: 10, log: true}}; {k} is missing",
                )
        low = self.number(f"{key}.low", value["low"], minimum, strict)
        high = self.number(f"{key}.high", value["high"], minimum, strict)
        if not low < high:
            raise self.fail(key, f"low {value['low']!r} must be below high {value['high']!r}")
        flags = {}
        for k in ("log", "int"):
            flags[k] = value.get(k, False)
            if not isinstance(flags[k], bool):
                raise self.fail(f"{key}.{k}", f"expected true or false, got {flags[k]!r}")
        step = value.get("step")
        if step is not None:
            step = self.number(f"{key}.step", step, 0.0, strict=True)
            if flags["log"]:
                raise self.fail(
                    key,
                    "a range takes log or step, not both (Optuna samples a log range continuously)",
                )
        if flags["log"] and low <= 0:
            raise self.fail(f"{key}.low", f"a log range needs low > 0, got {value['low']!r}")
        if flags["int"]:
            for k, v in (("low", value["low"]), ("high", value["high"]), ("step", step)):
                if v is not None and float(v) != int(v):
                    raise self.fail(
                        f"{key}.{k}", f"an integer range (int: true) needs integers, got {v!r}"
                    )
            return Range(
                int(low),
                int(high),
                log=flags["log"],
                int=True,
                step=None if step is None else int(step),
            )
        return Range(low, high, log=flags["log"], step=step)

    def number_axis(
        self, key: str, value: Any, minimum: float, strict: bool = False
    ) -> list[float] | Range:
        """A numeric grid axis (list of numbers), or a range in an Optuna search."""
        if isinstance(value, dict):
            return self.range(key, value, minimum, strict)
        return self.number_list(key, value, minimum, strict)

    def lengths(self, key: str, value: Any) -> list[list[float]]:
        items = self.as_list(key, value)
        if all(is_number(x) for x in items) and len(items) > 1:
            as_sets = ", ".join(f"[{format_value(x)}]" for x in items)
            raise self.fail(
                key,
                f"{items!r} is ambiguous: each entry is one multi-scale set of window lengths; "
                f"write [{as_sets}] for separate windows or [{items!r}] for one multi-scale set",
            )
        out: list[list[float]] = []
        for i, entry in enumerate(items):
            ls = self.number_list(f"{key}[{i}]", entry, 0.0, strict=True)
            ls = sorted(ls)
            if ls not in out:
                out.append(ls)
        return out

    # ---- sections
    def config(self, raw: dict) -> ExperimentConfig:
        top = [
            "target",
            "splits",
            "protocol",
            "feature_sets",
            "feature_set",
            "window",
            "models",
            "personalization",
            "postprocess",
            "tracking",
            "seed",
            "jobs",
            "unseen_listener",
            "search",
            "importance",
        ]
        self.mapping("", raw, top)
        d = ExperimentConfig()
        cfg = ExperimentConfig(source=self.source)
        cfg.search = self.search(raw.get("search"))
        self.search_method = cfg.search.method

        target = raw.get("target", d.target)
        if not isinstance(target, str) or not target:
            raise self.fail(
                "target", f"expected a label target name such as valence_self, got {target!r}"
            )
        cfg.target = target

        if isinstance(raw.get("protocol"), list):
            raise self.fail("protocol", "expected one protocol (val or loso), not a list")
        cfg.protocol = self.enum_list("protocol", raw.get("protocol", d.protocol), PROTOCOLS)[0]
        cfg.splits = self.splits(raw.get("splits", d.splits), cfg.protocol)
        cfg.feature_sets = self.feature_sets(raw.get("feature_sets", d.feature_sets))
        cfg.feature_set = self.feature_set(raw.get("feature_set", "all"), cfg.feature_sets)
        cfg.window = self.window(raw.get("window", {}))
        cfg.personalization = self.enum_list(
            "personalization", raw.get("personalization", d.personalization), PERSONALIZATIONS
        )
        cfg.postprocess = self.postprocess(raw.get("postprocess", {}))
        cfg.tracking = self.tracking(raw.get("tracking", {}))
        seed = raw.get("seed", d.seed)
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise self.fail("seed", f"expected an integer, got {seed!r}")
        cfg.seed = seed
        unseen = raw.get("unseen_listener", d.unseen_listener)
        if isinstance(unseen, dict):
            cfg.unseen_selection, cfg.unseen_configuration = self.unseen(unseen)
            unseen = True
        if not isinstance(unseen, bool):
            raise self.fail(
                "unseen_listener",
                f"expected true, false or {{selection: nested}}, got {unseen!r}",
            )
        cfg.unseen_listener = unseen
        jobs = raw.get("jobs", None)
        if jobs is not None and (not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1):
            raise self.fail("jobs", f"expected a positive integer or null, got {jobs!r}")
        cfg.jobs = jobs
        cfg.importance = self.importance(raw.get("importance"))
        cfg.models = self.models(
            raw["models"] if "models" in raw else [m.to_dict() for m in d.models], cfg
        )
        if cfg.search.method == "optuna":
            try:
                search_space(cfg)
            except SearchSpaceError as e:
                raise self.fail(e.key, str(e)) from None
        return cfg

    def search(self, value: Any) -> SearchConfig:
        value = self.mapping("search", value, list(SearchConfig().to_dict()))
        d = SearchConfig()
        out = SearchConfig()
        for k in ("method", "sampler", "track"):
            v = value.get(k, getattr(d, k))
            if isinstance(v, list):
                raise self.fail(f"search.{k}", f"expected one value, not a list {v!r}")
            valid = {"method": SEARCH_METHODS, "sampler": SEARCH_SAMPLERS, "track": TRACKS}[k]
            setattr(out, k, self.enum_list(f"search.{k}", v, valid)[0])
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

    def splits(self, value: Any, protocol: str) -> dict[str, list[int]]:
        value = self.mapping("splits", value, SPLIT_NAMES)
        out: dict[str, list[int]] = {}
        owner: dict[int, str] = {}
        for name in SPLIT_NAMES:
            if name not in value or value[name] is None:
                continue
            stories = value[name] if isinstance(value[name], list) else [value[name]]
            out[name] = []
            for s in stories:
                if not isinstance(s, int) or isinstance(s, bool) or s < 1:
                    raise self.fail(
                        f"splits.{name}", f"expected story numbers (integers >= 1), got {s!r}"
                    )
                if s in owner and owner[s] != name:
                    raise self.fail(
                        f"splits.{name}",
                        f"story {s} is also in splits.{owner[s]}; a story belongs to one split",
                    )
                owner[s] = name
                if s not in out[name]:
                    out[name].append(s)
        if not out.get("train"):
            raise self.fail(
                "splits.train",
                f"no training stories; list them, e.g. train: {SPLITS['train']} (the official split)",
            )
        if protocol == "val" and not out.get("val"):
            raise self.fail(
                "splits.val",
                f"protocol val needs validation stories, e.g. val: {SPLITS['val']} "
                "(or use protocol: loso)",
            )
        return out

    def feature_sets(self, value: Any) -> dict[str, list[str]]:
        value = self.mapping("feature_sets", value)
        if not value:
            raise self.fail(
                "feature_sets", "no feature sets; define at least one name -> [role/channel, ...]"
            )
        out: dict[str, list[str]] = {}
        for name, keys in value.items():
            key = f"feature_sets.{name}"
            chans: list[str] = []
            for ch in self.as_list(key, keys):
                parts = str(ch).split("/")
                if len(parts) != 2 or not parts[1]:
                    raise self.fail(key, f"{ch!r} is not ROLE/CHANNEL, e.g. listener/egemaps")
                if parts[0] not in ROLES:
                    raise self.fail(
                        key,
                        f"{ch!r}: role {parts[0]!r} is not one of {', '.join(ROLES)}{_suggest(parts[0], ROLES)}",
                    )
                if ch not in chans:
                    chans.append(str(ch))
            out[str(name)] = chans
        return out

    def feature_set(self, value: Any, sets: dict[str, list[str]]) -> list[str]:
        if value == "all" or value is None:
            return list(sets)
        names = []
        for v in self.as_list("feature_set", value):
            if v not in sets:
                raise self.fail(
                    "feature_set",
                    f"{v!r} is not defined in feature_sets ({', '.join(sets)}){_suggest(v, sets)}",
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
        fit_on = value.get("fit_on", d.fit_on)
        if isinstance(fit_on, list):
            raise self.fail(
                "postprocess.fit_on", f"expected one of {', '.join(FIT_ON)}, not a list"
            )
        return PostprocessConfig(
            fit_on=self.enum_list("postprocess.fit_on", fit_on, FIT_ON)[0],
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

    def models(self, value: Any, cfg: ExperimentConfig) -> list[ModelSpec]:
        if not isinstance(value, list) or not value:
            raise self.fail(
                "models", "expected a list of {name: MODEL, HYPERPARAMETER: [values]} entries"
            )
        out: list[ModelSpec] = []
        for i, entry in enumerate(value):
            key = f"models[{i}]"
            if isinstance(entry, str):
                entry = {"name": entry}
            if not isinstance(entry, dict) or "name" not in entry:
                raise self.fail(
                    key,
                    f"expected a mapping with a name, e.g. {{name: ridge, alpha: [1, 10]}}, got {entry!r}",
                )
            name = entry["name"]
            if name not in MODEL_PARAMS:
                raise self.fail(
                    f"{key}.name", f"unknown model {name!r}{_suggest(name, sorted(MODEL_PARAMS))}"
                )
            spec = ModelSpec(str(name))
            allowed = list(MODEL_PARAMS[name])
            for hp, grid in entry.items():
                if hp in ("name", "only"):
                    continue
                if hp not in allowed:
                    hint = (
                        _suggest(hp, allowed + ["only"])
                        if allowed
                        else "; this model has no hyperparameters"
                    )
                    raise self.fail(f"{key}.{hp}", f"unknown hyperparameter of {name}{hint}")
                if isinstance(grid, dict):
                    spec.params[hp] = self.range(f"{key}.{hp}", grid)
                else:
                    spec.params[hp] = self.as_list(f"{key}.{hp}", grid)
            spec.only = self.only(f"{key}.only", entry.get("only"), cfg)
            out.append(spec)
        return out

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
                raise self.fail(k, f"not a grid axis a model can narrow{_suggest(axis, ONLY_AXES)}")
            if axis == "window.lengths_s":
                out[axis] = self.lengths(k, vals)
            elif axis in ("window.delay_s", "postprocess.smooth_s"):
                out[axis] = self.number_list(k, vals, 0.0)
            else:
                out[axis] = self.enum_list(k, vals, enums[axis])
        return out
