"""Layer 2, the sources: what a corpus holds before anything is extracted.

Modules: :mod:`~.manifest` (corpus discovery: OMG-Empathy naming, the manifest),
:mod:`~.media` (video and audio decoding), :mod:`~.annotations` (rating files),
:mod:`~.transcripts` (``.srt``/``.ass`` cues), :mod:`~.speaking` (who speaks when, from the
cues), :mod:`~.import_errors` (the error of a file that cannot be read).

This ``__init__`` imports nothing, so a worker that needs one module loads only that one.
"""
