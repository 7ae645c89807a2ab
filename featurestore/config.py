"""Extraction settings: defaults, YAML file, and command-line overrides.

A data folder may carry a ``featurestore.yaml`` next to its videos (the demo corpus does);
``featurestore scan/extract`` read it when no ``--config`` is given.
"""

from __future__ import annotations

import difflib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from .manifest import SPLITS, STORY_SPEAKER

CONFIG_NAME = "featurestore.yaml"


class ConfigError(ValueError):
    """A bad key or value in a featurestore config; names the key and the file."""


@dataclass
class FeatureConfig:
    #: face channels are computed at this rate (frames per second); 25 takes every frame
    face_fps: float = 5.0
    #: x where the speaker crop ends and the listener crop starts; None = 1080/2560 of the width
    split_x: int | None = None
    #: audio is resampled to this rate (Hz) before openSMILE
    audio_sampling_rate: int = 16000
    #: landmark model for face_geom (``dlib``)
    face_backend: str = "dlib"
    #: channels computed by ``featurestore extract`` when ``--channels`` is not given
    #: (``speech`` and ``lexicon`` only for sessions with a transcript; the others skip them)
    channels: list[str] = field(default_factory=lambda: ["face_geom", "egemaps", "speech", "lexicon"])
    #: story -> speaker
    story_speaker: dict[int, int] = field(default_factory=lambda: dict(STORY_SPEAKER))
    #: split -> stories
    splits: dict[str, list[int]] = field(default_factory=lambda: {k: list(v) for k, v in SPLITS.items()})
    #: largest tolerated difference between label rows and video length, seconds
    max_length_mismatch_s: float = 1.0

    def to_dict(self) -> dict:
        return asdict(self)


def read_yaml_file(path: Path, error: type[Exception] = ConfigError, read_hint: str = "") -> Any:
    """Parse a YAML file; failures raise ``error`` naming the file (and line for syntax errors)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise error(f"{path}: cannot be read ({e}){read_hint}") from e
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(e, "problem", None) or str(e)
        raise error(f"{where}: malformed YAML ({problem}); fix the syntax on that line") from e


def load_feature_config(path: str | Path | None = None, data_dir: str | Path | None = None) -> FeatureConfig:
    """Config from ``path``, else from ``<data_dir>/featurestore.yaml`` if present, else defaults."""
    if path is None and data_dir is not None and (Path(data_dir) / CONFIG_NAME).exists():
        path = Path(data_dir) / CONFIG_NAME
    if path is None:
        return FeatureConfig()
    path = Path(path)
    raw = read_yaml_file(path, ConfigError, read_hint="; check the --config path") or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of settings, got {type(raw).__name__}")
    known = {f.name for f in fields(FeatureConfig)}
    for key in raw:
        if key not in known:
            near = difflib.get_close_matches(str(key), sorted(known), n=1)
            hint = f"; did you mean {near[0]!r}?" if near else f"; known keys: {sorted(known)}"
            raise ConfigError(f"{path}: unknown key {key!r}{hint}")
    cfg = FeatureConfig(**raw)
    cfg.story_speaker = {int(k): int(v) for k, v in cfg.story_speaker.items()}
    cfg.splits = {str(k): [int(s) for s in v] for k, v in cfg.splits.items()}
    return cfg
