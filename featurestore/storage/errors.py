"""The store's errors: every message names the shard (or store) and says what to do."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import FeaturestoreError


class StoreError(FeaturestoreError, RuntimeError):
    """A shard is missing, unreadable or inconsistent; the message names the file."""


class MissingChannelError(StoreError):
    """A shard lacks channels that were asked for; ``keys`` lists them, the message says how to add them."""

    def __init__(self, message: str, keys: Sequence[str]) -> None:
        super().__init__(message)
        self.keys = list(keys)


class DamagedShardError(StoreError):
    """A dataset's rows do not match the checksum the store wrote with them (edited outside the
    store, or damaged on disk); the message names the shard and the dataset and says to re-extract."""
