"""Layer 7, the executors: where the configurations of a sweep or a search are evaluated.

:mod:`.base` defines the interface (:class:`~experiments.executors.base.Executor`), with the
local executor (:mod:`.local`, this machine's forked processes) and the Dask executor
(:mod:`.dask`, a cluster) side by side behind it. Import them from their modules; this
package's own import stays empty, so that neither executor is loaded for the other.
"""
