"""Registration of the exported model with transformers' auto classes, without importing
transformers eagerly.

``import layerfuse`` installs a one-shot import hook: when transformers' model auto classes are
first imported (``from transformers import pipeline``, ``AutoModelForTokenClassification``), the
layerfuse config and model are registered right after, so an exported folder loads with no
``trust_remote_code``. Importing transformers costs seconds; `import layerfuse` must not, since
every command line starts with it. Already imported: registered at once.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import warnings

from .support import supported

TRIGGER = "transformers.models.auto.modeling_auto"


def register() -> None:
    """Add ``layerfuse-tagger`` to `AutoConfig` and `AutoModelForTokenClassification` (idempotent).
    Below `support.MINIMUM` nothing is registered (`export_head` says so)."""
    import transformers

    if not supported(transformers.__version__):
        return
    modeling = sys.modules.get(f"{__package__}.modeling")
    if modeling is not None and not hasattr(modeling, "register_auto_classes"):
        return  # being imported (its own transformers import fired the hook): it registers when it is done
    from .modeling import register_auto_classes  # a first import registers them itself

    register_auto_classes()


def _register_quietly() -> None:
    try:
        register()
    except Exception as exc:  # a transformers too old or too new must not break its own import
        warnings.warn(f"layerfuse could not register its token-classification model with transformers: {exc}",
                      stacklevel=2)


class _RegisterAfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the real loader of `TRIGGER` so `register` runs once it is loaded. It
    leaves `sys.meta_path` only then: a lookup alone (``importlib.util.find_spec``, as availability checks
    do) executes nothing, and the import that follows must still come here."""

    def find_spec(self, fullname, path, target=None):
        if fullname != TRIGGER:
            return None
        spec = self._others_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            if self in sys.meta_path:  # one shot: loaded and registered
                sys.meta_path.remove(self)
            _register_quietly()

        spec.loader.exec_module = exec_module
        return spec

    def _others_spec(self, fullname, path, target):
        """The spec the other finders give, asked as the import system asks them (never this one again)."""
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            spec = None if finder is self or find is None else find(fullname, path, target)
            if spec is not None:
                return spec
        return None


def install() -> None:
    if TRIGGER in sys.modules:
        _register_quietly()
    elif not any(isinstance(f, _RegisterAfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegisterAfterImport())
