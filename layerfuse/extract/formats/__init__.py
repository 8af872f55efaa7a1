"""The dataset formats `load_dataset` reads, registered here in the order they are asked.

A new format is one `DatasetFormat` (a module of this package, or any code) passed to :func:`register`:
`load_dataset`, `extract --dataset`'s help and this package's listing pick it up from the registry.
"""

from .conll import CONLL_DIRECTORY, CONLL_FILE
from .hf import HF_DISK, HF_HUB
from .registry import DatasetFormat, Request, find_format, formats, help_text, register, unregister
from .treebank import UD_TREEBANK
from .wnut16 import WNUT16

# A treebank folder is asked before wnut16's names and the folder shapes, as it always was; the
# catch-alls (any folder, any file, any other name) come last whatever their place here.
for _format in (UD_TREEBANK, WNUT16, HF_DISK, CONLL_DIRECTORY, CONLL_FILE, HF_HUB):
    register(_format)

__all__ = ["DatasetFormat", "Request", "find_format", "formats", "help_text", "register", "unregister"]
