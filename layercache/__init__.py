"""layercache: run a frozen encoder once, cache every layer, train small fusion heads from the cache."""

__version__ = "0.1.0"
