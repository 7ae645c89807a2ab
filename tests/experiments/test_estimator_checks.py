"""Every estimator this package defines passes scikit-learn's own estimator checks
(``parametrize_with_checks``), with one documented exception."""

from __future__ import annotations

from sklearn.utils.estimator_checks import parametrize_with_checks

from experiments.models import FillEmptyColumns, MedianImputer, make_model
from experiments.personalization import (
    CalibratedPerListener,
    GlobalRegressor,
    ListenerOneHot,
    PerListenerRegressor,
)

#: why a check cannot pass, by estimator class
_LISTENER_ID_NOT_NAN = (
    "the check puts NaN into every column of X, the listener-id column too; features may be NaN "
    "(allow_nan), but every row needs its listener id, so fit refuses it with a clear error"
)
EXPECTED_FAILURES = {
    cls: {"check_estimators_pickle": _LISTENER_ID_NOT_NAN}
    for cls in (GlobalRegressor, PerListenerRegressor, CalibratedPerListener, ListenerOneHot)
}


def _estimators():
    # the wrapped model is the package's own ridge pipeline (its imputer takes NaN features)
    inner = make_model("ridge", {})
    return [
        GlobalRegressor(inner),
        PerListenerRegressor(inner, min_samples=2),
        CalibratedPerListener(inner),
        ListenerOneHot(inner),
        MedianImputer(),
        FillEmptyColumns(),
    ]


@parametrize_with_checks(_estimators(), expected_failed_checks=lambda est: EXPECTED_FAILURES.get(type(est), {}))
def test_scikit_learn_estimator_checks(estimator, check):
    check(estimator)
