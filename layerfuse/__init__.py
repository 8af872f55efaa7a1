"""layerfuse: run a frozen encoder once, cache every layer, train small fusion heads from the cache."""

__version__ = "0.1.0"

from .hf.register import install as _install_transformers_hook

_install_transformers_hook()  # exported heads load with transformers' auto classes (layerfuse.hf)
