"""The file MLflow runs to build this package's pyfunc model ("models from code"): no Python
object is unpickled when the model loads."""

from mlflow.models import set_model
from mlflow.pyfunc.model import PythonModel

from experiments.trained.pyfunc import TrainedPyfunc


class _Pyfunc(TrainedPyfunc, PythonModel):
    """:class:`~experiments.trained.pyfunc.TrainedPyfunc` as MLflow's Python model."""


set_model(_Pyfunc())
