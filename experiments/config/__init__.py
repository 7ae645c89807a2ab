"""Layer 1, the configuration: a YAML file (or a dict) -> a checked, typed config -> the grid; and
the registries a config names (models, metrics).
"""

from .loading import *  # noqa: F403 - the config's front door: the names a notebook needs
from .loading import __all__ as __all__
