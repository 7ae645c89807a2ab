"""The error every importer raises for a file it cannot use (tables, annotations, transcripts' shards)."""

from __future__ import annotations

from ..errors import FeaturestoreError


class DataImportError(FeaturestoreError, ValueError):
    """A file given to an importer cannot be used; the message names it and says what to do."""
