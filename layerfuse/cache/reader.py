"""Reading a finished cache entry: splits, sentences, labels and any subset of layers.

Layers are read as slices `hidden[r0:r1, layer, :]`, never through a list index over the layer axis:
with one inner chunk per layer, a slice touches only that layer's bytes, while zarr's orthogonal
selection over a list is 30-50x slower (measured with zarr 3.1).
"""

from __future__ import annotations

import copy
import os
from functools import cached_property

import numpy as np
import zarr

from ..errors import IncompleteEntryError, LayerfuseError, NewerFormatError
from ..lifeline import usable_cores
from ..tasks import DEFAULT_TASK
from . import label_sets, manifest
from .codec import SCALES, codec_of
from .layout import PLAN, newer_format, subgroups
from .store import checked_store, open_group, require_complete, shard_keys
from .usage import hold, mark_read


class MetaViews:
    """Views of an entry's metadata (``self.meta``), for the entry and for the data a run is built from."""

    @property
    def label_names(self) -> list[str]:
        return list(self.meta["label_names"])

    @property
    def num_layers(self) -> int:
        """L, the backbone's transformer layers; the cache holds L + 1 (embeddings at index 0)."""
        return int(self.meta["num_layers"])

    @property
    def dim(self) -> int:
        return int(self.meta["hidden_size"])

    @property
    def task(self) -> str:
        """The name of the entry's task (`layerfuse.tasks`); entries from before MLM carry none and are NER."""
        return str(self.meta.get("task", DEFAULT_TASK))


class CacheEntry(MetaViews):
    """One cache entry (a zarr group): metadata in `meta`, one `CacheSplit` per finished split."""

    def __init__(self, path):
        # A path or URL; tests may also pass a zarr store (e.g. one that counts the bytes read).
        if not isinstance(path, str) and not hasattr(path, "get"):  # zarr stores have an async ``get``
            raise LayerfuseError(f"open_entry takes a cache entry's path or URL, got {path!r:.80}")
        self.path = path if isinstance(path, str) else str(path)
        # Held while this entry (or a view or split of it) is referenced, or until `close`: `gc` and
        # `rm` skip an entry a reader holds. Taken before the open, so what is opened is what is held.
        self._hold = hold(path) if isinstance(path, str) else None
        self.group = open_group(path, mode="r") if isinstance(path, str) else _open_store(path)
        self.meta = dict(self.group.attrs)
        if not self.meta.get("format_version"):
            raise LayerfuseError(f"{path} is not a layerfuse entry (no format_version attribute)")
        newer = newer_format(self.path, self.meta["format_version"])
        if newer:
            raise NewerFormatError(newer)
        if isinstance(path, str):
            mark_read(path)  # eviction (`gc`) keeps what was read last, local readers included
        self._seen_finished: set[str] = set()  # `splits`: what this reader has seen finished
        self._splits: dict[str, CacheSplit] = {}  # `split`: each opened once, for every caller of this entry
        self.labels_array = "labels"  # the array `CacheSplit.labels` reads: the primary set's unless `with_labels`
        self.stored_meta = self.meta  # the attributes as stored; `meta` of a label-set view differs
        self.seen: dict = {}  # attributes as the call that found it sees them (`with_meta`)
        if label_sets.PRIMARY in self.meta or label_sets.LISTING in self.meta:  # seen through its primary set
            self.meta = label_sets.view_meta(self.stored_meta, None, where=self.path)

    def __repr__(self) -> str:
        return f"CacheEntry({self.path!r})"

    def close(self) -> None:
        """Let `gc` and `rm` remove the entry again (views made by `with_labels` share the hold)."""
        if self._hold is not None:
            self._hold.release()

    def __enter__(self) -> CacheEntry:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def label_sets(self) -> dict[str, dict]:
        """Every label set of the entry, the primary first: {name: {"names", "kind", ...}}
        (`layerfuse.cache.label_sets`); an entry from before label sets holds ``ner`` alone."""
        return label_sets.listed(self.stored_meta)

    def with_meta(self, **seen) -> CacheEntry:
        """This entry as the call that found it sees it, its attributes ``seen`` in place of the stored ones:
        ``model_path``, the folder named to find it (a copy of the one it was made from, at another path),
        and ``dataset`` and ``dataset_source``, the data as named and read now (another corpus of the same words
        and tags, another ``--columns``): heads trained on it record them, FT loads that folder, predict reads a
        file as that data was read."""
        if all(self.meta.get(name) == value for name, value in seen.items()):
            return self
        view = copy.copy(self)
        view.seen = {**self.seen, **seen}
        view.stored_meta, view.meta = {**self.stored_meta, **seen}, {**self.meta, **seen}
        return view

    def with_labels(self, name: str | None) -> CacheEntry:
        """The same entry seen through label set ``name`` (None = the primary set): ``meta`` carries
        its ``label_names``, ``label_set`` and ``label_kind``, and every split's ``labels`` are its. An
        entry seen through that set already is returned itself, with the splits it has opened."""
        # what the finding call saw (`with_meta`) stays: the data it read is the data this set was read from
        meta = {**label_sets.view_meta(self.stored_meta, name, where=self.path), **self.seen}
        labels_array = label_sets.array_name(self.stored_meta, meta["label_set"])
        if meta == self.meta and labels_array == self.labels_array:
            return self  # seen through that set already: the same entry, and the splits it has opened
        view = copy.copy(self)
        view.meta, view.labels_array = meta, labels_array
        view._splits = {}  # a view's splits read its labels
        return view

    @property
    def splits(self) -> list[str]:
        """Finished splits only, in the usual order."""
        order = {"train": 0, "dev": 1, "test": 2}
        names = [name for name, g in subgroups(self.group) if g.attrs.get("complete") and "kind" not in g.attrs]
        # A finished split never turns unfinished: one seen finished and now gone means the entry was
        # removed or rewritten under this reader (`rm`, `gc`), which would otherwise read as "no splits".
        gone = sorted(self._seen_finished - set(names), key=lambda s: (order.get(s, 9), s))
        if gone:
            raise LayerfuseError(f"{self.path}: split(s) {', '.join(gone)} were finished when read and are gone: the "
                                  "entry was removed or rewritten while open (by `rm`, `gc` or another extract)")
        self._seen_finished |= set(names)
        return sorted(names, key=lambda s: (order.get(s, 9), s))

    @property
    def missing_splits(self) -> list[str]:
        """Splits the entry's extraction was asked for (its plan) that are not finished: a run killed
        between splits leaves them; rerunning `extract` writes them."""
        done = set(self.splits)
        return [name for name in self.stored_meta.get(PLAN) or [] if name not in done]

    def require_complete(self) -> None:
        """Refuse an entry whose planned splits are not all finished, naming them."""
        if self.missing_splits:
            raise IncompleteEntryError(
                f"{self.path} is incomplete: split(s) {', '.join(self.missing_splits)} were asked for and are not "
                "finished; rerun `extract` with the same options to finish them")

    def lm(self) -> dict[str, np.ndarray]:
        """An MLM entry's ``lm`` arrays (float32): ``embeddings`` and, when the checkpoint has a head,
        ``dense_weight``, ``dense_bias``, ``norm_weight``, ``norm_bias``, ``decoder_bias``."""
        if "lm" not in self.group:
            raise LayerfuseError(f"{self.path} has no lm group (not an MLM entry)")
        group = self.group["lm"]
        require_complete(group, f"the lm group of {self.path}")
        store = checked_store(self.group)
        if store is not None:
            store.expect("lm", group.attrs.get("files") or {})
        return {name: arr[:] for name, arr in group.arrays()}

    def split(self, name: str) -> CacheSplit:
        """Split ``name``, opened (its attributes, arrays and files checked) the first time it is asked for."""
        if name not in self._splits:
            if not self._holds_split(name):
                raise LayerfuseError(f"split {name!r} is not in {self.path}; it has {self.splits}")
            self._splits[name] = CacheSplit(self, name)
            self._seen_finished.add(name)  # opened finished: gone later means removed while open, not "no splits"
        return self._splits[name]


    def _holds_split(self, name) -> bool:
        """Whether ``name`` is one of the entry's split groups: not a path into one ("train/", "train/hidden"
        opened an array or the entry itself as a split), not another kind of group (``lm``)."""
        if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
            return False
        try:
            node = self.group[name]
        except KeyError:
            return False
        return isinstance(node, zarr.Group) and "kind" not in node.attrs


class CacheSplit:
    """One finished split of an entry (`CacheEntry.split`): its hidden states (`hidden`, `stored`, read by
    sentence and layer), labels, offsets (sentence i is rows ``offsets[i]:offsets[i+1]``) and words."""

    def __init__(self, entry: CacheEntry, name: str):
        self.entry = entry
        self.name = name
        self.group = entry.group[name]
        require_complete(self.group, f"split {name!r} of {entry.path}")
        self.attrs = dict(self.group.attrs)
        expect_files(self.entry, name, self.attrs)
        manifest.check(manifest.names_problem(entry.path, f"split {name}", entry.stored_meta.get("label_names") or [],
                                              self.attrs.get(manifest.NAMES)))
        self._hidden = self.array("hidden")
        rows = self.attrs.get("n_rows")
        if isinstance(rows, int) and self._hidden.shape[0] != rows:  # an edited shape the records do not catch
            raise LayerfuseError(f"{entry.path}: array {name}/hidden declares {self._hidden.shape[0]:,} rows, the "
                                 f"split records {rows:,}: its metadata was edited; take another copy of the entry")
        # The entry's storage format; an entry that names none is read as its array is stored.
        self.codec = codec_of(self.entry.meta.get("dtype") or str(self._hidden.dtype))
        # Scaled formats (int8): a float32 scale per row and layer, applied by every read.
        self._scales = self.array(SCALES) if self.codec.scale_bytes else None
        # What reads return by default: bfloat16 as float32, int8 as float16 unless its values pass
        # float16's range (`Codec.read_dtype`).
        self._read_as = self.codec.read_dtype(self.attrs)

    def array(self, name: str) -> zarr.Array:
        """Array ``name`` of the split; one whose zarr.json is gone is an error naming it."""
        try:
            array = self.group[name]
        except KeyError:
            raise LayerfuseError(f"{self.entry.path}: array {self.name}/{name} is missing (no "
                                  f"{self.name}/{name}/zarr.json); {manifest.REPAIR}") from None
        manifest.check(manifest.array_problem(self.entry.path, self.name, name, array, self.attrs))
        return array

    def read_whole(self, name: str) -> np.ndarray:
        """A small array of the split (offsets, labels, words, ...) whole; a chunk failing its checksum
        is an error naming array and chunk."""
        array = self.array(name)
        try:
            return array[:]
        except ValueError as exc:
            if "checksum" not in str(exc):
                raise
            chunk = array.chunks[0]
            for start in range(0, array.shape[0], chunk):  # name the first corrupt chunk exactly
                try:
                    array[start:start + chunk]
                except ValueError:
                    raise LayerfuseError(f"{self.entry.path}: array {self.name}/{name}, chunk ({start // chunk}) "
                                          f"fails its crc32c checksum (corrupt on disk); {manifest.REPAIR}") from exc
            raise

    @cached_property
    def offsets(self) -> np.ndarray:
        return self.read_whole("offsets")

    @cached_property
    def labels(self) -> np.ndarray:
        """[rows] int64 label ids of the entry's label set (`CacheEntry.with_labels`); negative = none."""
        name = self.entry.labels_array
        covered = name == "labels" or self.name in self.entry.label_sets[self.entry.meta["label_set"]]["splits"]
        if not covered or name not in self.group:  # an array a killed run left unlisted is never read
            raise LayerfuseError(f"split {self.name!r} of {self.entry.path} has no {name!r} array: the label set "
                                  f"{self.entry.meta.get('label_set')!r} does not cover it (rerun extract)")
        return self.read_whole(name).astype(np.int64)

    @cached_property
    def input_ids(self) -> np.ndarray:
        """MLM entries: the (masked) token fed to the backbone at each row."""
        if "input_ids" not in self.group:
            raise LayerfuseError(f"split {self.name!r} of {self.entry.path} has no input_ids (not an MLM entry)")
        return self.read_whole("input_ids").astype(np.int64)

    @property
    def n_sentences(self) -> int:
        return len(self.offsets) - 1

    @property
    def n_rows(self) -> int:
        return int(self.offsets[-1])

    def __repr__(self) -> str:
        return f"CacheSplit({self.entry.path!r}, {self.name!r}: {self.n_sentences} sentences, {self.n_rows} rows)"

    def nbytes(self, *, rows: int, layers: int) -> int:
        """Bytes of ``rows`` rows of ``layers`` layers as `hidden` returns them (bfloat16 as float32,
        int8 as float16 or, past its range, float32)."""
        if int(rows) < 0 or int(layers) < 0:
            raise LayerfuseError(f"nbytes of {rows} rows and {layers} layers: counts are never negative")
        return int(rows) * int(layers) * self._hidden.shape[2] * self._read_as.itemsize

    @property
    def dim(self) -> int:
        return int(self._hidden.shape[2])

    def rows_of(self, sentences) -> np.ndarray:
        """Row indices of the given sentences, concatenated in the order given."""
        sentences = id_array(sentences, what="sentences")
        self._check_sentences(sentences)
        return rows_of(self.offsets, sentences)

    def words(self, sentences=None) -> list[list[str]]:
        """The words of each sentence (word granularity: one per row)."""
        if sentences is None:
            ids = range(self.n_sentences)
        else:
            ids = id_array(sentences, what="sentences")
            self._check_sentences(ids)
        flat = self.read_whole("words")
        word_offsets = self._word_offsets()
        return [list(flat[word_offsets[i] : word_offsets[i + 1]]) for i in ids]

    def hidden(self, *, sentences=None, layers=None, dtype=None, as_torch: bool = False):
        """[rows, len(layers), d] for the given sentences (all if None), layers indexing 0..L.

        Returns the storage dtype (float16 by default) unless `dtype` is given; bfloat16 entries
        come back as float32 since numpy has no bfloat16, int8 entries as float16 (q * s, computed
        in float32 and exact when `dtype` is float32; float32 too when a value passes 65504).
        """
        layers = list(range(self._hidden.shape[1])) if layers is None else self._layer_ids(layers)
        rows = None if sentences is None else self.rows_of(sentences)
        if not layers:
            raise LayerfuseError(f"no layers asked of {self.entry.path}")
        out, dtype = None, _float_dtype(dtype)
        # Each layer is decoded once, straight into its place: an int8 layer in one pass from int8
        # and its scales into the float16 result (`Codec.decode`).
        for i, layer in enumerate(layers):
            values = self._read_layer(layer, rows)
            if out is None:
                out = np.empty((values.shape[0], len(layers), values.shape[1]),
                               dtype=self._read_as if dtype is None else dtype)
            self.codec.decode(values, self._read_scales(layer, rows), out=out[:, i])
        if as_torch:
            import torch

            return torch.from_numpy(out)
        return out

    def stored(self, *, sentences=None, layers) -> tuple[np.ndarray, np.ndarray | None]:
        """(values [rows, len(layers), d] exactly as stored: float16, float32, int8, or bfloat16 as its
        uint16 bits; int8 entries' scales [rows, len(layers)] float32, else None). What the training
        store holds, in the storage dtype's bytes, and widens a batch at a time on the device."""
        layers = self._layer_ids(layers)
        if not layers:
            raise LayerfuseError(f"no layers asked of {self.entry.path}")
        rows = None if sentences is None else self.rows_of(sentences)
        values = _by_layer(lambda layer: self._read_layer(layer, rows), layers)
        if self._scales is None:
            return values, None
        return values, _by_layer(lambda layer: self._read_scales(layer, rows), layers)

    def stored_nbytes(self, *, rows: int, layers: int) -> int:
        """Bytes of ``rows`` rows of ``layers`` layers as `stored` returns them (int8: with the scales)."""
        per_vector = self._hidden.shape[2] * self.codec.value_bytes + self.codec.scale_bytes
        return int(rows) * int(layers) * per_vector

    @property
    def storage(self) -> str:
        """The storage dtype's name: float16, bfloat16, float32 or int8 (`codec.CODECS`)."""
        return self.codec.name

    def _read_layer(self, layer: int, rows: np.ndarray | None) -> np.ndarray:
        """One layer of the hidden states at ``rows`` (all if None), as stored."""
        return self._read_rows(self._hidden, "hidden", layer, rows)

    def _read_scales(self, layer: int, rows: np.ndarray | None) -> np.ndarray | None:
        """One layer of a scaled format's scales at ``rows`` (all if None); None for other formats."""
        return None if self._scales is None else self._read_rows(self._scales, SCALES, layer, rows)

    def _read_rows(self, array, name: str, layer: int, rows: np.ndarray | None) -> np.ndarray:
        """One layer of ``array`` (the hidden states, or int8 entries' scales) at ``rows`` (all if None),
        as stored."""
        if rows is None:
            return self._read(array, 0, self.n_rows, layer, name)
        if len(rows) == 0:
            return np.zeros((0, *array.shape[2:]), dtype=array.dtype)
        # Read contiguous runs of needed inner chunks as slices, then pick rows in memory.
        chunk = array.chunks[0]
        needed = np.unique(rows // chunk)
        breaks = np.flatnonzero(np.diff(needed) != 1) + 1
        parts, base = [], []
        for run in np.split(needed, breaks):
            lo, hi = int(run[0]) * chunk, min(int(run[-1] + 1) * chunk, self.n_rows)
            parts.append(self._read(array, lo, hi, layer, name))
            base.append((lo, hi))
        block = np.concatenate(parts) if len(parts) > 1 else parts[0]
        # Map global row -> position in the concatenated block.
        starts = np.array([b[0] for b in base])
        lengths = np.array([b[1] - b[0] for b in base])
        block_starts = np.cumsum(lengths) - lengths
        which = np.searchsorted(starts, rows, side="right") - 1
        return block[rows - starts[which] + block_starts[which]]

    def _read(self, array, lo: int, hi: int, layer: int, name: str) -> np.ndarray:
        try:
            return array[lo:hi, layer, ...]
        except ValueError as exc:
            if "checksum" not in str(exc):
                raise
            chunk = array.chunks[0]
            for start in range(lo - lo % chunk, hi, chunk):  # name the first corrupt chunk exactly
                try:
                    array[start : start + chunk, layer, ...]
                except ValueError:
                    index = f"({start // chunk}, {layer}, 0)" if array.ndim == 3 else f"({start // chunk}, 0)"
                    raise LayerfuseError(
                        f"{self.entry.path}: array {self.name}/{name}, chunk {index} fails its "
                        f"crc32c checksum (corrupt on disk); {manifest.REPAIR}"
                    ) from exc
            raise

    def _word_offsets(self) -> np.ndarray:
        if "word_index" not in self.group:
            return self.offsets
        # Subword granularity: words per sentence = largest word_index + 1 (the rows of special
        # tokens, `extract --special-tokens`, carry -1 and so count for nothing).
        wi = self.read_whole("word_index")
        counts = np.array([wi[a:b].max() + 1 if b > a else 0 for a, b in zip(self.offsets[:-1], self.offsets[1:])])
        return np.concatenate([[0], np.cumsum(counts)])

    def _layer_ids(self, layers) -> list[int]:
        """Layer ids in 0..L, each an integer (`stored` read layer -1 as the last, and 9 failed in zarr)."""
        n_layers = self._hidden.shape[1]
        ids = [int(x) for x in id_array(layers, what="layers")]
        bad = [x for x in ids if not 0 <= x < n_layers]
        if bad:
            raise LayerfuseError(f"layers {bad} out of range: {self.entry.path} has layers 0..{n_layers - 1}")
        return ids

    def _check_sentences(self, sentences: np.ndarray) -> None:
        if len(sentences) and (sentences.min() < 0 or sentences.max() >= self.n_sentences):
            raise LayerfuseError(
                f"sentence ids out of range 0..{self.n_sentences - 1} in split {self.name!r} of {self.entry.path}"
            )


def _open_store(store) -> zarr.Group:
    """A group over a zarr store given directly (tests: one that counts bytes), checked as paths are."""
    from zarr.abc.store import Store

    from .store import CheckedStore

    return zarr.open_group(CheckedStore(store, where=str(store)) if isinstance(store, Store) else store, mode="r")


def expect_files(entry: CacheEntry, split: str, attrs: dict) -> None:
    """Tell the entry's store which chunk files split ``split`` must have: the ones it recorded on
    completion and those of each label set covering it (entries made before these records: none)."""
    store = checked_store(entry.group)
    if store is None:
        return
    files = dict(attrs.get("files") or {})
    if "files" not in attrs and "kind" not in attrs:  # finished before files were listed: a lost shard read as 0
        hidden = entry.group[split].get("hidden")
        if hidden is not None and hidden.shape[0] == attrs.get("n_rows"):  # every shard of its grid is written
            files["hidden"] = shard_keys(hidden)
    store.expect(split, files)
    for name, info in (entry.stored_meta.get(label_sets.LISTING) or {}).items():
        keys = (info.get("files") or {}).get(split)
        if keys is not None:
            store.expect(split, {label_sets.array_name(entry.stored_meta, name): keys})


def _float_dtype(dtype) -> np.dtype | None:
    """``hidden``'s ``dtype``: None (the entry's read dtype) or a float dtype. An integer dtype truncated
    the values to 0 and +-1 (or failed in torch's cast); the stored integers are `CacheSplit.stored`'s."""
    if dtype is None:
        return None
    try:
        chosen = np.dtype(dtype)
    except TypeError:
        raise LayerfuseError(f"hidden(dtype={dtype!r}): not a numpy dtype") from None
    if chosen.kind != "f":
        raise LayerfuseError(f"hidden(dtype={dtype!r}): hidden states read as float16, float32 or float64; "
                             "the values as stored (int8 with their scales) come from `stored()`")
    return chosen


def id_array(ids, *, what: str) -> np.ndarray:
    """``ids`` as int64, refused unless they are a sequence of integers: floats were truncated (0.7 read
    sentence 0), a bool mask read as ids 0 and 1, a string's digits as layers ("26": layers 2 and 6)."""
    array = np.asarray(ids)
    if isinstance(ids, (str, bytes)) or array.ndim != 1:
        raise LayerfuseError(f"{what} must be a sequence of integer ids, got {ids!r}")
    if array.size and (array.dtype == bool or not np.issubdtype(array.dtype, np.integer)):
        raise LayerfuseError(f"{what} must be integer ids, got {array.dtype} ({ids!r:.60})")
    return array.astype(np.int64, copy=False)


def rows_of(offsets: np.ndarray, sentences) -> np.ndarray:
    """Row indices of ``sentences`` (sentence i = rows offsets[i]:offsets[i + 1]), concatenated in
    the order given: one vectorised gather instead of a loop over sentences."""
    sentences = np.asarray(sentences, dtype=np.int64)
    starts, lengths = offsets[sentences], offsets[sentences + 1] - offsets[sentences]
    return np.repeat(starts - np.cumsum(lengths) + lengths, lengths) + np.arange(lengths.sum())


def open_entry(path) -> CacheEntry:
    """The cache entry at ``path``: its folder under the cache root, as `extract` and `layerfuse ls`
    print it (a ``str`` or ``os.PathLike``; ``~`` is not expanded), or a URL under a remote root
    (``s3://...``, or ``http://HOST:PORT/entries/NAME`` from `layerfuse serve`). A path that holds no
    entry raises `LayerfuseError` naming it. Only finished splits are listed (`CacheEntry.splits`);
    `CacheEntry.require_complete` refuses an entry whose planned splits are not all finished.

    To find an entry by what made it rather than by path, use
    `layerfuse.experiments.find.resolve_entry`: ``resolve_entry(model=..., dataset=...)`` (extracted
    first when missing), or ``resolve_entry()`` for the default's entry (or the only one) in the cache root.

    Example:
        ```python
        entry = open_entry("PATH")  # as extract printed it
        train = entry.split("train")
        x = train.hidden(sentences=[0, 5, 9], layers=[2, 6])  # [rows, 2, d]: reads only layers 2 and 6
        ```
    """
    return CacheEntry(path if not isinstance(path, os.PathLike) else os.fspath(path))


def _by_layer(read, layers: list[int]) -> np.ndarray:
    """``read(layer)`` of each of ``layers`` as one array [rows, len(layers), ...], the layers read
    side by side in threads (decoding and checksums release the GIL) straight into their places (no
    stacked copy): docs/results/bench_cache_read.md."""
    from concurrent.futures import ThreadPoolExecutor

    first = read(layers[0])
    out = np.empty((first.shape[0], len(layers), *first.shape[1:]), dtype=first.dtype)
    out[:, 0] = first
    del first

    def fill(i: int) -> None:
        out[:, i] = read(layers[i])

    with ThreadPoolExecutor(max_workers=min(len(layers), usable_cores(), 16)) as pool:
        list(pool.map(fill, range(1, len(layers))))  # list: a read's error is raised here
    return out
