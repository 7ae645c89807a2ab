"""The root of every error ``experiments`` shows a user (the command line prints one line, exits ``exit_code``)."""

from __future__ import annotations

from featurestore.errors import FeaturestoreError


class ExperimentsError(FeaturestoreError):
    """An error of an experiment a user sees: the message says what was wrong and what to do."""
