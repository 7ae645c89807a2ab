"""Layer 7, how a sweep's tasks are scheduled on the backends that know better than a plain
map: forked worker pools sharing each window key's features (:mod:`.forked`), a Dask cluster
with slow groups split and workers logging (:mod:`.dask`). Every other backend maps
:func:`experiments.evaluation.evaluate.run_task` over the tasks as it is."""
