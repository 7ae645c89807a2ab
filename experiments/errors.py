"""The root of every error ``experiments`` shows a user (:class:`ExperimentsError`, a
:class:`featurestore.errors.FeaturestoreError`: the command line catches that root, prints one
line and exits with its ``exit_code``)."""

from __future__ import annotations

from featurestore.errors import FeaturestoreError


class ExperimentsError(FeaturestoreError):
    """An error of an experiment a user sees: the message says what was wrong and what to do."""
