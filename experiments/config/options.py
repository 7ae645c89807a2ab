"""Every option list of the experiment config, defined once (what each means: docs/config.md,
Options and their tracks). Importing it loads no scikit-learn: a config is validated first."""

from __future__ import annotations

#: selection protocols: ``val``, or a cross-validation over train + val (leave one story, one
#: person out; ``folds`` folds of persons or groups), which predicts test by a model on all of it
PROTOCOLS = ("val", "loso", "lopo", "kfold_person", "kfold_group")
CV_PROTOCOLS = ("loso", "lopo", "kfold_person", "kfold_group")
#: protocols that hold whole persons out (nothing that uses who is listening fits for them)
PERSON_HELD_OUT = ("lopo", "kfold_person")
KFOLD_PROTOCOLS = ("kfold_person", "kfold_group")


def selection_split(protocol: str) -> str:
    """The split a protocol's configurations are chosen on.

    >>> [selection_split(p) for p in PROTOCOLS]
    ['val', 'loso', 'cv', 'cv', 'cv']
    """
    return protocol if protocol in ("val", "loso") else "cv"


ALIGNS = ("centred", "causal")
#: per-window statistics of :func:`experiments.windowing.window_stats`
STATS = ("mean", "std", "min", "max", "slope", "valid_frac")
PERSONALIZATIONS = ("global", "per_listener", "global_calibrated", "listener_onehot")
#: the first three read future frames, the last two (``CAUSAL_SMOOTH_METHODS``) do not
SMOOTH_METHODS = ("moving_average", "butterworth", "median", "trailing", "causal_butterworth")
CAUSAL_SMOOTH_METHODS = ("trailing", "causal_butterworth")
#: ``train``: the training labels' mean and std; ``bias``: the mean; ``listener*``: per listener
RESCALES = ("none", "train", "bias", "listener", "listener_bias")
#: what rescaling and calibration are fitted on: out-of-fold training predictions, or in-sample
FIT_ON = ("out_of_fold", "in_sample")
#: a split's per-session values averaged per listener / per story (OMG-Empathy), or concatenated (AVEC)
AVERAGINGS = ("sessions", "concatenated")
#: how ``unseen_listener`` chooses: with every listener (not nested), without the left-out one,
#: or the configuration named in the config
UNSEEN_SELECTIONS = ("chosen", "nested", "fixed")
#: the metric ``<split>.constant_predictions`` (1) marks a configuration whose predictions are
#: constant, or not finite, in every session of that split: its score says nothing, it is never chosen
CONSTANT_MARK = "constant_predictions"
#: what every report writes beside an unseen-listener score of selection ``chosen``, and why
CHOSEN_UNSEEN_MARK = "(chosen, not nested)"
CHOSEN_UNSEEN_NOTE = (
    f"{CHOSEN_UNSEEN_MARK}: `unseen_listener: {{selection: chosen}}`: the configuration scored on "
    "each left-out listener was chosen with every listener's validation labels, that listener's "
    "included, so the number can flatter: it is not a score for a person never seen"
)
#: late fusion (a blend of the members' chosen configurations), beside early fusion's feature sets
FUSION_METHODS = ("late",)
#: the blend: non-negative weights and a free intercept, or a small ridge
BLENDS = ("nnls", "ridge")
#: what permutation importance moves: a ``role/channel``, one column, one window statistic
IMPORTANCE_LEVELS = ("channel", "column", "stat")
SPLIT_NAMES = ("train", "val", "test")
#: the challenge's tracks: ``personalized`` models may use who is listening (:mod:`.tracks`)
TRACKS = ("personalized", "generalized")
IDENTITY_PERSONALIZATIONS = ("per_listener", "global_calibrated", "listener_onehot")
IDENTITY_RESCALES = ("listener", "listener_bias")


class ConfigWarning(UserWarning):
    """A config that is valid but probably not what was meant."""
