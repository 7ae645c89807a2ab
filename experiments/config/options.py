"""Every option list of the experiment bench, defined once.

Config validation (:mod:`experiments.config.validation`), the estimators, windowing and post-processing
that implement the options read these tuples, and a test checks that the README's config
reference lists every value; nothing else lists them. Importing this module loads no
scikit-learn, so the config can be validated before the modelling stack is loaded.
"""

from __future__ import annotations

#: feature roles of the store (``ROLE/CHANNEL`` in a feature set): the store's schema defines them
from featurestore.storage.store import ROLES  # noqa: F401 - re-exported

#: selection protocols: ``val`` (fit on train, choose on val), or cross-validation over
#: train + val: ``loso`` (leave one story, or group, out), ``lopo`` (leave one person out),
#: ``kfold_person`` / ``kfold_group`` (``folds`` folds of whole persons / groups)
PROTOCOLS = ("val", "loso", "lopo", "kfold_person", "kfold_group")
#: the cross-validation protocols (test is predicted by a model fitted on all train + val)
CV_PROTOCOLS = ("loso", "lopo", "kfold_person", "kfold_group")
#: protocols that hold whole persons out: a held-out person has no training data, so
#: nothing that uses who is listening can be fitted for them
PERSON_HELD_OUT = ("lopo", "kfold_person")
#: protocols that take a number of folds
KFOLD_PROTOCOLS = ("kfold_person", "kfold_group")


def selection_split(protocol: str) -> str:
    """The split a protocol's configurations are chosen on: ``val``, ``loso`` (leave one story
    out, as before), or ``cv`` (the other cross-validations).

    >>> [selection_split(p) for p in PROTOCOLS]
    ['val', 'loso', 'cv', 'cv', 'cv']
    """
    return protocol if protocol in ("val", "loso") else "cv"


#: window alignment: ``centred`` on the frame or ``causal`` (ending at it)
ALIGNS = ("centred", "causal")
#: per-window statistics of :func:`experiments.windowing.window_stats`
STATS = ("mean", "std", "min", "max", "slope", "valid_frac")
#: personalization strategies (:func:`experiments.models.personalization.make_personalizer`)
PERSONALIZATIONS = ("global", "per_listener", "global_calibrated", "listener_onehot")
#: smoothing methods of :func:`experiments.models.postprocess.smooth`: the first three read
#: future frames (centred windows; a Butterworth filter run forwards and backwards), the last
#: two do not (a trailing mean; a Butterworth filter run forwards only)
SMOOTH_METHODS = ("moving_average", "butterworth", "median", "trailing", "causal_butterworth")
#: smoothing methods whose output at frame t reads no frame after t
CAUSAL_SMOOTH_METHODS = ("trailing", "causal_butterworth")
#: rescaling of predictions (:mod:`experiments.models.postprocess`): ``train`` matches the training
#: labels' mean and std, ``bias`` their mean only, both from statistics over all training
#: listeners; ``listener`` / ``listener_bias`` do the same with each listener's own statistics
RESCALES = ("none", "train", "bias", "listener", "listener_bias")
#: what rescaling and per-listener calibration are fitted on: predictions of the training
#: stories made out of fold (leave one training story out), or the in-sample predictions of
#: the model fitted on them (optimistic; kept to show what out-of-fold fitting changes)
FIT_ON = ("out_of_fold", "in_sample")
#: how a split's per-frame CCC is averaged, a choice of the corpus: ``sessions`` (OMG-Empathy:
#: CCC per session, then the mean per listener / per story) or ``concatenated`` (AVEC: one
#: CCC over the split's sessions concatenated)
CCC_AVERAGINGS = ("sessions", "concatenated")
#: how ``unseen_listener`` chooses the configuration scored on a left-out listener: ``chosen``
#: (each feature set's generalized choice, made with every listener: not nested), ``nested``
#: (per left-out listener, chosen on the other listeners' validation stories, or their LOSO
#: scores under protocol ``loso``, with models fitted without them), ``fixed`` (the
#: ``configuration`` named in the config, before any data)
UNSEEN_SELECTIONS = ("chosen", "nested", "fixed")
#: what every report writes beside an unseen-listener score of selection ``chosen`` (never the
#: default: the choice read the left-out listener's validation labels), and the note that says why
CHOSEN_UNSEEN_MARK = "(chosen, not nested)"
CHOSEN_UNSEEN_NOTE = (
    f"{CHOSEN_UNSEEN_MARK}: `unseen_listener: {{selection: chosen}}`: the configuration scored on "
    "each left-out listener was chosen with every listener's validation labels, that listener's "
    "included, so the number can flatter: it is not a score for a person never seen"
)
#: how ``fusion`` combines feature sets besides a set that lists their channels together (early
#: fusion): ``late`` blends the predictions of each member set's chosen configuration
#: (:mod:`experiments.evaluation.fusion`)
FUSION_METHODS = ("late",)
#: late fusion's blend, fitted on the training stories' out-of-fold predictions: ``nnls``
#: (non-negative weights, free intercept) or ``ridge`` (a small ridge, weights of any sign)
BLENDS = ("nnls", "ridge")
#: feature groups permutation importance moves (``importance.levels``): a ``role/channel``, one
#: column of it, one window statistic of every column (see experiments.evaluation.importance)
IMPORTANCE_LEVELS = ("channel", "column", "stat")
#: split names of a config's ``splits``
SPLIT_NAMES = ("train", "val", "test")

#: the challenge's two tracks: ``personalized`` models may use who is listening,
#: ``generalized`` models may not (see :mod:`experiments.config.tracks`)
TRACKS = ("personalized", "generalized")
#: personalization strategies that use the listener's identity
IDENTITY_PERSONALIZATIONS = ("per_listener", "global_calibrated", "listener_onehot")
#: rescaling modes that use the listener's identity (per-listener statistics)
IDENTITY_RESCALES = ("listener", "listener_bias")


class ConfigWarning(UserWarning):
    """A config that is valid but probably not what was meant (a config left to the defaults,
    :func:`experiments.config.reference.defaults_note`; late fusion turned off because a member
    is not swept, :func:`experiments.config.fusion.fusion_config`)."""
