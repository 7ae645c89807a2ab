"""The file MLflow runs to build this package's pyfunc model ("models from code"): no Python
object is unpickled when the model loads."""

import mlflow

from experiments.trained.pyfunc import TrainedPyfunc


class _Pyfunc(TrainedPyfunc, mlflow.pyfunc.PythonModel):
    """:class:`~experiments.trained.pyfunc.TrainedPyfunc` as MLflow's Python model."""


mlflow.models.set_model(_Pyfunc())
