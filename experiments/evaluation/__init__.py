"""Layer 5, the evaluation: fits, predictions, CCC, intervals and chance, figures and tables.

Modules: :mod:`~.metrics` (CCC and the challenge's averagings), :mod:`~.uncertainty`
(intervals, chance levels, paired comparisons), :mod:`~.fitting` (a fit group's fits as
independent parts), :mod:`~.evaluate` (configurations -> predictions -> scores),
:mod:`~.fusion` (late fusion: a blend fitted on members' out-of-fold predictions),
:mod:`~.plots` (figures), :mod:`~.markdown` (tables for reports).

This ``__init__`` imports nothing, so a worker that needs one module loads only that one.
"""
