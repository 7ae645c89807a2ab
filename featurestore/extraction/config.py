"""Extraction settings: defaults, ``featurestore.yaml`` (top-level keys and ``extractors:``)
and ``--set`` overrides; see docs/config.md (extraction settings)."""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from .. import overrides
from ..errors import ConfigError, nearest
from ..extractors import Extractor, ExtractorConfig, get_extractor, registry
from ..sources.label_checks import parse_min_coverage, parse_targets
from ..sources.manifest import SPLITS, STORY_SPEAKER
from ..yaml_loader import YAMLRefused, load_yaml

CONFIG_NAME = "featurestore.yaml"


@dataclass
class FeatureConfig:
    #: face channels are computed at this rate (frames per second); 25 takes every frame
    face_fps: float = 5.0
    #: x where the speaker crop ends and the listener crop starts; None = 1080/2560 of the width
    split_x: int | None = None
    #: channels computed by ``featurestore extract`` when ``--channels`` is not given
    #: (``speech`` and ``lexicon`` only for sessions with a transcript; the others skip them)
    channels: list[str] = field(
        default_factory=lambda: ["face_geom", "egemaps", "speech", "lexicon"]
    )
    #: story -> speaker
    story_speaker: dict[int, int] = field(default_factory=lambda: dict(STORY_SPEAKER))
    #: split -> stories
    splits: dict[str, list[int]] = field(
        default_factory=lambda: {k: list(v) for k, v in SPLITS.items()}
    )
    #: a corpus manifest (CSV or YAML, one row per session; see
    #: :mod:`featurestore.sources.manifest_file`) used instead of the OMG-Empathy names; a
    #: relative path is relative to the config file's folder
    manifest: str | None = None
    #: largest tolerated difference between label rows and video length, seconds
    max_length_mismatch_s: float = 1.0
    #: target -> ``{scale: [low, high]}``, the range its ratings are checked against (in their
    #: own units; an undeclared target takes any finite value; the OMG layout declares [-1, 1]
    #: for its valence targets): :mod:`featurestore.sources.label_checks`
    targets: dict[str, Any] = field(default_factory=dict)
    #: the share of its recording a rating file's times must cover (0-1; None: 0.5)
    min_coverage: float | None = None
    #: extractor name -> its settings (that extractor's frozen config dataclass); an extractor
    #: not listed runs with its defaults
    extractors: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    def extractor_config(self, name: str) -> ExtractorConfig:
        """The settings of extractor ``name``: the configured ones, else its defaults."""
        config = self.extractors.get(name)
        return config if config is not None else get_extractor(name).config_class()

    def extractor(self, name: str) -> Extractor[Any]:
        """Extractor ``name`` built with its settings from this config."""
        return get_extractor(name)(self.extractor_config(name))

    def settings_line(self, channels: Sequence[str]) -> str:
        """``name.setting=value`` for every extractor setting of ``channels`` that differs from
        its default (``featurestore extract`` prints it)."""
        parts = []
        for name in channels:
            config = self.extractor_config(name)
            default = asdict(type(config)())
            parts += [f"{name}.{k}={v}" for k, v in asdict(config).items() if default.get(k) != v]
        return ", ".join(parts)


def read_yaml_file(path: Path, error: type[Exception] = ConfigError, read_hint: str = "") -> Any:
    """Parse a YAML file with :func:`~featurestore.yaml_loader.load_yaml`; failures raise
    ``error`` naming the file (and the line)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise error(f"{path}: cannot be read ({e}){read_hint}") from e
    try:
        return load_yaml(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(e, "problem", None) or str(e)
        if isinstance(e, YAMLRefused):
            raise error(f"{where}: {problem}") from e
        raise error(f"{where}: malformed YAML ({problem}); fix the syntax on that line") from e


def _hint(key: str, known: Sequence[str], what: str) -> str:
    near = nearest(key, known)
    return f"; did you mean {near!r}?" if near else f"; {what}: {', '.join(sorted(known))}"


def _coerce(value: Any, annotation: Any, where: str) -> Any:
    """``value`` checked against a field's type; ints become floats where due (one cache key for 1 and 1.0)."""
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    args = set(typing.get_args(annotation)) if union else set()
    kinds = args - {type(None)} if union else {annotation}
    if value is None and type(None) in args:
        return None
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if float in kinds and number:
        return float(value)
    if int in kinds and number and isinstance(value, int):
        return int(value)
    if (bool in kinds and isinstance(value, bool)) or (str in kinds and isinstance(value, str)):
        return value
    if not kinds & {float, int, bool, str}:
        return value  # a structured setting: the dataclass and the extractor check it
    words = {float: "a number", int: "an integer", bool: "true/false", str: "a string"}
    names = " or ".join(sorted(words[k] for k in kinds if k in words))
    raise ConfigError(f"{where}: expected {names}, got {value!r}")


def build_extractor_config(name: str, settings: Mapping[str, tuple[Any, str]]) -> ExtractorConfig:
    """The frozen config of extractor ``name`` from ``setting -> (value, where it was set)``;
    an unknown setting, a value of the wrong type or one the extractor's constructor refuses
    is a :class:`ConfigError` naming where it was set and the key."""
    cls = registry()[name]
    hints = typing.get_type_hints(cls.config_class)
    known = [f.name for f in fields(cls.config_class)]
    values = {}
    for key, (value, where) in settings.items():
        if key not in known:
            what = f"settings of {name}" if known else f"{name} has no settings"
            raise ConfigError(
                f"{where}: extractors.{name}.{key}: unknown setting{_hint(key, known, what)}"
            )
        values[key] = _coerce(value, hints[key], f"{where}: extractors.{name}.{key}")
    config = cls.config_class(**values)
    try:
        cls(config)  # constructors check values beyond their type
    except (ValueError, TypeError) as e:
        wheres = sorted({w for _, w in settings.values()})
        raise ConfigError(f"{', '.join(wheres)}: extractors.{name}: {e}") from e
    return config


class _Collected:
    """Settings gathered from the file and the ``--set`` options, each with where it was set."""

    def __init__(self) -> None:
        self.top: dict[str, tuple[Any, str]] = {}
        self.extractors: dict[str, dict[str, tuple[Any, str]]] = {}

    def where(self, key: str, default: str = CONFIG_NAME) -> str:
        """Where top-level ``key`` was set (``default`` when it was not)."""
        return self.top.get(key, (None, default))[1]

    def add(self, raw: Mapping, where: str) -> None:
        top_keys = [f.name for f in fields(FeatureConfig) if f.name != "extractors"]
        names = registry()
        for key, value in raw.items():
            if key == "extractors":
                if value is None:
                    continue
                if not isinstance(value, Mapping):
                    raise ConfigError(
                        f"{where}: extractors: expected a mapping of extractor name -> settings, "
                        f"got {type(value).__name__}"
                    )
                for name, settings in value.items():
                    self.add_extractor(str(name), settings, where, names)
            elif key in top_keys:
                self.top[key] = (value, where)
            elif key in names:
                how = (
                    f"--set {key}.SETTING=VALUE"
                    if where.startswith("--set")
                    else f"put its settings under `extractors:` ({{extractors: {{{key}: {{...}}}}}})"
                )
                raise ConfigError(f"{where}: {key!r} is an extractor: {how}")
            else:
                raise ConfigError(
                    f"{where}: unknown key {key!r}{_hint(key, [*top_keys, 'extractors'], 'known keys')}"
                )

    def add_extractor(self, name: str, settings: Any, where: str, names: Mapping) -> None:
        if name not in names:
            raise ConfigError(
                f"{where}: extractors: unknown extractor {name!r}{_hint(name, list(names), 'extractors')}"
            )
        if settings is None:
            settings = {}
        if not isinstance(settings, Mapping):
            raise ConfigError(
                f"{where}: extractors.{name}: expected a mapping of settings "
                f"(e.g. {{{', '.join(f.name + ': ...' for f in fields(names[name].config_class)[:2])}}}), "
                f"got {settings!r}"
            )
        section = self.extractors.setdefault(name, {})
        for key, value in settings.items():
            section[str(key)] = (value, where)


def parse_override(text: str) -> dict:
    """``--set KEY=VALUE`` (VALUE is YAML) as the mapping a YAML file would hold: KEY is
    ``EXTRACTOR.SETTING`` (or ``extractors.EXTRACTOR.SETTING``), or a top-level key."""
    parts, parsed = overrides.parse_override(text, example="face_au.device=cpu")
    if parts[0] == "extractors":
        parts = parts[1:]
        if len(parts) != 2:
            raise ConfigError(
                f"--set {text}: expected extractors.EXTRACTOR.SETTING=VALUE, e.g. extractors.face_au.device=cpu"
            )
    if len(parts) == 1:
        return {parts[0]: parsed}
    if len(parts) == 2 and parts[0] in registry():
        return {"extractors": {parts[0]: {parts[1]: parsed}}}
    if parts[0] in {f.name for f in fields(FeatureConfig)}:
        raise ConfigError(f"--set {text}: {parts[0]} is set as a whole: --set {parts[0]}=VALUE")
    hint = _hint(parts[0], list(registry()), "extractors")
    raise ConfigError(f"--set {text}: unknown extractor {parts[0]!r}{hint}")


def check_channels(channels: Sequence[str], where: str) -> None:
    """:class:`ConfigError` naming ``where`` for a name that is no extractor."""
    names = list(registry())
    for c in channels:
        if c not in names:
            raise ConfigError(f"{where}: unknown extractor {c!r}{_hint(c, names, 'extractors')}")


def check_overrides_apply(
    overrides: Sequence[str], extractors: Sequence[str], verb: str, top_level: bool = True
) -> None:
    """Refuse (:class:`ConfigError`) a ``--set`` that the verb would ignore: a setting of an
    extractor it does not run, or, with ``top_level`` False, any top-level key."""
    applies = ", ".join(f"{name}.SETTING" for name in extractors)
    if top_level:
        applies += " or a top-level key (face_fps=10)"
    for text in overrides:
        parsed = parse_override(text)
        named = list(parsed["extractors"]) if "extractors" in parsed else []
        if not named and top_level:
            continue
        for name in named or list(parsed):
            if name not in extractors:
                raise ConfigError(
                    f"--set {text}: {name} does not apply to `featurestore {verb}`, which computes "
                    f"{', '.join(extractors)}; settings that apply: {applies}"
                )


def load_feature_config(
    path: str | Path | None = None,
    data_dir: str | Path | None = None,
    overrides: Sequence[str] = (),
) -> FeatureConfig:
    """Config from ``path``, else from ``<data_dir>/featurestore.yaml`` if present, else defaults;
    then each ``--set`` override in order. Unknown keys, extractors and settings raise
    :class:`ConfigError` naming the file (or the ``--set`` option), the key and the nearest name.
    """
    if path is None and data_dir is not None and (Path(data_dir) / CONFIG_NAME).exists():
        path = Path(data_dir) / CONFIG_NAME
    collected = _Collected()
    if path is not None:
        path = Path(path)
        raw = read_yaml_file(path, ConfigError, read_hint="; check the --config path") or {}
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: expected a mapping of settings, got {type(raw).__name__}")
        collected.add(raw, str(path))
    for text in overrides:
        collected.add(parse_override(text), f"--set {text}")
    hints = typing.get_type_hints(FeatureConfig)
    cfg = FeatureConfig(
        **{k: _coerce(v, hints[k], f"{where}: {k}") for k, (v, where) in collected.top.items()}
    )
    try:
        cfg.story_speaker = {int(k): int(v) for k, v in cfg.story_speaker.items()}
        cfg.splits = {str(k): [int(s) for s in v] for k, v in cfg.splits.items()}
    except (AttributeError, TypeError, ValueError) as e:
        bad = (
            "story_speaker"
            if not isinstance(cfg.story_speaker, dict) or "story_speaker" in str(e)
            else "splits"
        )
        where = collected.where(bad, str(path))
        raise ConfigError(f"{where}: {bad}: expected a mapping of integers ({e})") from e
    if cfg.manifest and "manifest" in collected.top:
        where = collected.top["manifest"][1]
        if path is not None and where == str(path) and not Path(cfg.manifest).is_absolute():
            cfg.manifest = str(path.parent / cfg.manifest)
    try:
        scales = parse_targets(cfg.targets, collected.where("targets"))
        cfg.targets = {t: {"scale": list(s)} for t, s in scales.items()}
        cfg.min_coverage = parse_min_coverage(cfg.min_coverage, collected.where("min_coverage"))
    except ValueError as e:
        raise ConfigError(str(e)) from e
    if "channels" in collected.top:
        value, where = collected.top["channels"]
        if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
            raise ConfigError(
                f"{where}: channels: expected a list of extractor names, got {value!r}"
            )
        check_channels(value, f"{where}: channels")
    cfg.extractors = {
        name: build_extractor_config(name, settings)
        for name, settings in sorted(collected.extractors.items())
    }
    return cfg
