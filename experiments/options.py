"""Every option list of the experiment bench, defined once.

Config validation (:mod:`experiments.config`), the estimators, windowing and post-processing
that implement the options read these tuples, and a test checks that the README's config
reference lists every value; nothing else lists them. Importing this module loads no
scikit-learn, so the config can be validated before the modelling stack is loaded.
"""

from __future__ import annotations

#: feature roles of the store (``ROLE/CHANNEL`` in a feature set): the store's schema defines them
from featurestore.store import ROLES  # noqa: F401 - re-exported

#: selection protocols: ``val`` (fit on train, choose on val) or ``loso`` (leave one story
#: out over train + val)
PROTOCOLS = ("val", "loso")
#: window alignment: ``centred`` on the frame or ``causal`` (ending at it)
ALIGNS = ("centred", "causal")
#: per-window statistics of :func:`experiments.windowing.window_stats`
STATS = ("mean", "std", "min", "max", "slope", "valid_frac")
#: personalization strategies (:func:`experiments.personalization.make_personalizer`)
PERSONALIZATIONS = ("global", "per_listener", "global_calibrated", "listener_onehot")
#: smoothing methods of :func:`experiments.postprocess.smooth`
SMOOTH_METHODS = ("moving_average", "butterworth", "median")
#: rescaling of predictions (:mod:`experiments.postprocess`): ``train`` matches the training
#: labels' mean and std, ``bias`` their mean only, both from statistics over all training
#: listeners; ``listener`` / ``listener_bias`` do the same with each listener's own statistics
RESCALES = ("none", "train", "bias", "listener", "listener_bias")
#: what rescaling and per-listener calibration are fitted on: predictions of the training
#: stories made out of fold (leave one training story out), or the in-sample predictions of
#: the model fitted on them (optimistic; kept to show what out-of-fold fitting changes)
FIT_ON = ("out_of_fold", "in_sample")
#: split names of a config's ``splits``
SPLIT_NAMES = ("train", "val", "test")

#: the challenge's two tracks: ``personalized`` models may use who is listening,
#: ``generalized`` models may not (see :mod:`experiments.tracks`)
TRACKS = ("personalized", "generalized")
#: personalization strategies that use the listener's identity
IDENTITY_PERSONALIZATIONS = ("per_listener", "global_calibrated", "listener_onehot")
#: rescaling modes that use the listener's identity (per-listener statistics)
IDENTITY_RESCALES = ("listener", "listener_bias")
