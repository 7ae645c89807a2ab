"""eGeMAPSv02 low-level descriptors from openSMILE: 25 columns every 10 ms for the ``scene``
role, a row's ``time`` the start of its analysis frames (docs/channels.md, how far ahead each
channel reads); ``valid`` where all 25 are finite (silence is an observation, F0 = 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd
from typing import Any

import numpy as np

from ..features import Features
from .base import (
    AudioExtractor,
    ExtractorConfig,
    ExtractorUnavailable,
    decode_lookahead_s,
    register,
)

#: seconds between rows
HOP_S = 0.01
#: seconds of audio after a row's ``time`` that its values read: the 60 ms frame of the next
#: row (10 ms later), which the centred 3-row average takes in
ANALYSIS_LOOKAHEAD_S = 0.07


@dataclass(frozen=True)
class EgemapsConfig(ExtractorConfig):
    """``feature_set``: openSMILE feature set name; ``sampling_rate``: analysis rate in Hz."""

    feature_set: str = "eGeMAPSv02"
    sampling_rate: int = 16000


def resample(signal: np.ndarray, from_hz: int, to_hz: int) -> np.ndarray:
    """Polyphase resampling of a 1-D signal from ``from_hz`` to ``to_hz`` (returned as is when equal)."""
    if from_hz == to_hz:
        return signal
    from scipy.signal import resample_poly  # lazily: scipy.signal takes 0.8 s to import

    g = gcd(int(from_hz), int(to_hz))
    return resample_poly(signal, int(to_hz) // g, int(from_hz) // g)


@register
class EgemapsExtractor(AudioExtractor[EgemapsConfig]):
    """openSMILE eGeMAPSv02 LLDs of the shared microphone, returned as ``{"scene": Features}``.

    >>> import numpy as np
    >>> feats = EgemapsExtractor().process_signal(np.zeros(16000, np.float32), 16000)["scene"]
    >>> feats.data.shape, float(feats.time[1] - feats.time[0])
    ((96, 25), 0.01)
    """

    name = "egemaps"
    version = "1"
    config_class = EgemapsConfig

    def __init__(self, config: EgemapsConfig | None = None) -> None:
        super().__init__(config)
        self._smile = None  # built on first use; not pickled (workers rebuild it)

    @property
    def sampling_rate(self) -> int:
        """``config.sampling_rate`` (Hz)."""
        return int(self.config.sampling_rate)

    def lookahead_s(self) -> float:
        """Seconds of audio after a row's time that it reads: analysis plus the resampler."""
        return ANALYSIS_LOOKAHEAD_S + decode_lookahead_s(self.sampling_rate)

    def __getstate__(self) -> dict:  # pickled without the openSMILE object: a worker rebuilds it
        return {**self.__dict__, "_smile": None}

    def check_available(self) -> None:
        """:class:`ExtractorUnavailable` without openSMILE or for an unknown feature set."""
        try:
            import opensmile  # lazily: openSMILE loads its native library; a missing one is reported
        except ImportError as exc:
            raise ExtractorUnavailable(
                "egemaps needs the 'opensmile' package: pip install opensmile"
            ) from exc
        if not hasattr(opensmile.FeatureSet, self.config.feature_set):
            raise ExtractorUnavailable(
                f"egemaps: unknown openSMILE feature set {self.config.feature_set!r}; "
                f"choose one of {[f.name for f in opensmile.FeatureSet]}"
            )

    def smile(self) -> Any:
        """The ``opensmile.Smile`` LLD extractor (built once per extractor object)."""
        if self._smile is None:
            self.check_available()
            import opensmile  # lazily, as in check_available

            self._smile = opensmile.Smile(
                feature_set=getattr(opensmile.FeatureSet, self.config.feature_set),
                feature_level=opensmile.FeatureLevel.LowLevelDescriptors,
            )
        return self._smile

    def process_signal(self, signal: np.ndarray, sampling_rate: int) -> dict[str, Features]:
        """LLDs every 10 ms of a mono signal at ``sampling_rate`` Hz (resampled to the config's),
        ``time`` each row's frame start in seconds."""
        signal = np.asarray(signal, dtype=np.float32)
        if signal.ndim != 1:
            raise ValueError(
                f"egemaps expects a mono 1-D signal, got shape {signal.shape}; "
                "mix down first (media.read_audio does)"
            )
        rate = int(self.config.sampling_rate)
        signal = resample(signal, int(sampling_rate), rate)
        # openSMILE converts to int16 by x * 32768 without clipping: |x| >= 1 would wrap around
        if signal.size and float(np.max(np.abs(signal))) >= 1.0:
            signal = np.clip(signal, -1.0, 32767 / 32768)
        df = self.smile().process_signal(signal, rate)
        data = df.to_numpy(dtype=np.float32, copy=False)
        time = df.index.get_level_values("start").total_seconds().to_numpy()
        valid = np.isfinite(data).all(axis=1)
        return {"scene": Features(data, time, valid, list(df.columns))}
