"""Layer 7, how the processes (:mod:`.forked`) and Dask (:mod:`.dask`) backends schedule a sweep;
every other backend maps :func:`experiments.evaluation.evaluate.run_task` over the tasks as it is."""
