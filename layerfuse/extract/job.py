"""One split of an extraction as a job: `SplitJob` holds the split's tokens, plan, writer and
encoder, and runs its stages in order: plan (tokenize, lay out the rows, fix the unit size and
token budget), open (wait for the model, record the plan, open the split for writing), encode
the units (a background thread writes each while the next is encoded), finish (flag the split
complete with its statistics, read back its summary).

A unit is a fixed range of rows (one zarr shard), encoded from the sentences that overlap it,
length-sorted within the unit. Because a unit's batches depend only on the plan, a resumed run
recomputes exactly the same bytes.
"""

from __future__ import annotations

import hashlib
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np

from ..cache.codec import codec_of
from ..cache.label_sets import SPAN, TOKEN
from ..cache.manage import bytes_on_disk
from ..cache.store import open_group
from ..cache.writer import SplitPlan, SplitWriter, open_root, plan_splits
from .distributed import Ranks
from .encode import RowMap, UnitEncoder, row_map
from .entry import ExtractConfig, default_token_budget, default_unit_rows, special_counts, stored_setting
from .masking import IGNORE, MaskedBlocks, masked_split
from .models import ModelInfo
from .tokenize import Tokenized, subword_rows, tokenize_words


@dataclass
class SplitSummary:
    split: str
    sentences: int
    words: int
    rows: int
    layers: int
    width: int
    dtype: str
    bytes_on_disk: int | None
    seconds: float
    words_per_second: float | None
    reused: bool
    empty_words: int = 0
    windowed_sentences: int = 0


@dataclass
class Extraction:
    """What every split of one run shares: the options, the data, the model (loading meanwhile),
    the entry being written, the ranks, and where progress goes."""

    config: ExtractConfig
    dataset: object  # a TaggedDataset, or the TextCorpus of MLM
    info: ModelInfo
    tokenizer: object  # None until the backbone starts, unless the entry's description needed it (MLM)
    path: str
    attrs: dict  # the entry's attributes (`entry.describe`)
    ranks: Ranks
    model: Future | None = None  # the backbone, loading in a thread while the first split is planned
    device: object = None  # torch.device, chosen when the backbone starts
    progress: bool = True
    log: Callable[[str], None] = print
    on_unit: Callable[[str, int, int], None] | None = None  # (split, rows done, rows in all)


@dataclass
class SplitJob:
    """One split's extraction; `execute` goes through the stages in order."""

    run: Extraction
    split: str
    tokens: Tokenized
    rows: RowMap
    blocks: MaskedBlocks | None  # MLM: the masked blocks the tokens come from
    plan: SplitPlan | None = None
    writer: SplitWriter | None = None
    encoder: UnitEncoder | None = None
    windowed: int = 0  # sentences longer than the encoder's window, encoded in overlapping windows
    pending: list[int] = field(default_factory=list)  # the units not yet cached when the job opened

    @classmethod
    def tokenized(cls, run: Extraction, split: str) -> SplitJob:
        """The job of ``split`` with its sentences (MLM: its masked blocks) tokenized and mapped to rows."""
        config, tokenizer, sentences = run.config, run.tokenizer, run.dataset.splits[split]
        blocks = None
        if config.task_info.masks_inputs:
            blocks = masked_split(tokenizer, sentences, spec=config.masking, split=split, source=run.dataset.source)
            tokens = blocks.tokenized()
        else:
            tokens = tokenize_words(tokenizer, [s[0] for s in sentences])
        rows = row_map(tokens, granularity=config.granularity, pooling=config.pooling,
                       specials=special_counts(config, tokenizer))
        return cls(run=run, split=split, tokens=tokens, rows=rows, blocks=blocks)

    def execute(self) -> SplitSummary:
        """Every stage in order; the split's summary."""
        self.plan_rows()
        self.open()
        seconds = self.encode_units()
        return self.finish(seconds)

    # -- plan

    def plan_rows(self) -> SplitPlan:
        """The `SplitPlan`: rows, labels and words, unit size, token budget, and the id that hashes
        everything that decides the bytes."""
        config, info = self.run.config, self.run.info
        offsets, labels, word_index, words, arrays, extra = (
            self._tagged_rows() if self.blocks is None else self._masked_rows())
        n_layers, dim = info.num_layers + 1, info.hidden_size
        unit_rows = config.unit_rows or default_unit_rows(n_layers, dim, codec_of(config.dtype).value_bytes)
        # A resume keeps the budget its split was started with (the bytes then match); one given anew and
        # different starts the split again, as another --unit-rows does, and says so (it was ignored).
        started = stored_setting(self.run.path, self.split, "token_budget", None)
        token_budget = config.token_budget or started or default_token_budget(self.run.device)
        if started and token_budget != started and self.run.ranks.main:
            self.run.log(f"{self.split}: --token-budget {token_budget}, not the {started} it was started with: "
                         "starting it again")
        self.plan = SplitPlan(n_layers=n_layers, dim=dim, dtype=config.dtype, offsets=offsets, labels=labels,
                              words=words, unit_rows=unit_rows, plan_id=self._plan_id(unit_rows, token_budget),
                              word_index=word_index, attrs={"token_budget": token_budget, **extra}, arrays=arrays)
        return self.plan

    def _tagged_rows(self):
        """Rows of a tagged split: a word's label on its row (subword rows: on each of its subwords'
        rows, IGNORE on special tokens' rows)."""
        config, dataset = self.run.config, self.run.dataset
        label_index = {name: i for i, name in enumerate(dataset.label_names)}
        sentences = dataset.splits[self.split]
        word_labels = np.array([label_index[t] for _, tags in sentences for t in tags], dtype=np.int16)
        offsets, labels, word_index = self.rows.row_offsets, word_labels, None
        if config.granularity == "subword":
            offsets, labels, word_index = subword_rows(self.tokens, word_labels,
                                                       special_counts(config, self.run.tokenizer), ignore=IGNORE)
        words = [w for ws, _ in sentences for w in ws]
        extra = {"unseen_in_train": int(dataset.unseen_in_train.get(self.split, 0))}
        return offsets, labels, word_index, words, {}, extra

    def _masked_rows(self):
        """Rows of an MLM split: labels are token ids (int32), the words are the masked input's tokens."""
        blocks = self.blocks
        labels = blocks.labels.astype(np.int32)
        words = self.run.tokenizer.convert_ids_to_tokens(blocks.inputs.tolist())
        arrays = {"input_ids": blocks.inputs.astype(np.int32)}
        extra = {"n_masked": int(np.sum(blocks.labels != IGNORE))}
        return self.rows.row_offsets, labels, self.tokens.word_of_sub, words, arrays, extra

    def _plan_id(self, unit_rows: int, token_budget: int) -> str:
        tok = self.tokens
        h = hashlib.sha256()
        parts = (self.run.attrs["key"], self.split, tok.ids, tok.sub_offsets, tok.word_of_sub, unit_rows, token_budget)
        masked = (self.blocks.labels,) if self.blocks is not None else ()  # NER plan ids stay as they were
        for part in parts + masked:
            h.update(part.tobytes() if isinstance(part, np.ndarray) else str(part).encode())
        return h.hexdigest()[:16]

    # -- open

    def open(self) -> None:
        """Wait for the model, then open the split for writing (the entry opened once for it) and
        build the encoder."""
        run, ranks = self.run, self.run.ranks
        # loaded meanwhile; a model that cannot load fails here, before the split is opened
        backbone = run.model.result()
        ranks.barrier()  # every rank has read the stored settings before rank 0 (re)creates the split
        if ranks.main:
            root = open_root(run.path, run.attrs)
            # before any split is written (once the model loads: a failed load leaves no entry),
            plan_splits(root, list(run.dataset.splits))  # the whole plan: complete only once each split is
            self.writer = SplitWriter.in_root(root, self.split, self.plan)
        ranks.barrier()
        if self.writer is None:
            self.writer = SplitWriter.in_root(open_root(run.path, run.attrs), self.split, self.plan, create=False)
        self.encoder = UnitEncoder(backbone, run.tokenizer, device=run.device, precision=run.config.precision,
                                   token_budget=self.plan.attrs["token_budget"], max_length=run.attrs["max_length"])
        self.windowed = int(np.sum(np.diff(self.tokens.sub_offsets) > self.encoder.width))

    # -- encode the units

    def encode_units(self) -> float:
        """Encode and write this rank's share of the pending units; the seconds it took."""
        ranks = self.run.ranks
        self.pending = self.writer.pending_units()
        # Every rank reads the done flags before any rank writes: a rank that read them after another
        # had finished a unit would deal the units out differently and leave one unwritten.
        ranks.barrier()
        mine = ranks.share(self.pending)
        self._report()
        t0 = time.perf_counter()
        self._encode(mine)
        ranks.barrier()  # every rank's shards are written
        return time.perf_counter() - t0

    def _report(self) -> None:
        """What the log should know before the units run: a resume, and the words and sentences
        that needed special handling."""
        log, split, plan = self.run.log, self.split, self.plan
        if len(self.pending) < plan.n_units:
            log(f"resuming {split}: {plan.n_units - len(self.pending)} of {plan.n_units} units already cached")
        unseen = getattr(self.run.dataset, "unseen_in_train", {}).get(split, 0)
        if unseen:
            types = ", ".join(getattr(self.run.dataset, "unseen_types", {}).get(split, []))
            what = "a word class" if getattr(self.run.dataset, "primary_kind", SPAN) == TOKEN else "an entity type"
            log(f"{split}: {unseen} tokens carry {what} never seen in train"
                + (f" ({types})" if types else "") + "; kept under their own labels")
        if split == "train" and hasattr(self.run.dataset, "entity_types") and not self.run.dataset.entity_types:
            log("train: every tag is O (no entity type): an N-shot sample draws N sentences per type, so only "
                "--shots all trains on this entry; check the tag column (--columns)")
        if self.tokens.n_empty_words:
            log(f"{split}: {self.tokens.n_empty_words} words tokenize to nothing; encoded as "
                f"{self.run.tokenizer.unk_token}")
        if self.windowed:
            log(f"{split}: {self.windowed} sentences exceed {self.encoder.width} subwords; encoded in overlapping "
                f"windows")

    def _encode(self, units: list[int]) -> None:
        """Encode ``units`` in order, each handed to the background writer, progress reported."""
        from tqdm.auto import tqdm

        run, plan, split = self.run, self.plan, self.split
        storage = codec_of(run.config.dtype).encoded  # int8: float32, quantised after (`Codec.encoded`)
        bar = tqdm(total=self._rows_in(units), unit="row", desc=f"extract {split}", disable=not run.progress,
                   leave=False)
        rows_done = plan.n_rows - self._rows_in(self.pending)
        if run.on_unit:
            run.on_unit(split, rows_done, plan.n_rows)
        with bar, BackgroundWriter(self.writer) as background:  # the bar closed on Ctrl-C too: a line of its own
            for unit in units:
                lo, hi = plan.unit_range(unit)
                out = self.encoder.encode_unit(self.tokens, self.rows, lo, hi, storage=storage, split=split)
                background.put(unit, out, run.device)
                bar.update(hi - lo)
                rows_done += hi - lo
                if run.on_unit:
                    run.on_unit(split, rows_done, plan.n_rows)

    def _rows_in(self, units) -> int:
        return sum(hi - lo for lo, hi in map(self.plan.unit_range, units))

    # -- finish

    def finish(self, seconds: float) -> SplitSummary:
        """Flag the split complete with its statistics (rank 0); its summary, read back from the entry."""
        run, ranks = self.run, self.run.ranks
        n_words = int(self.tokens.word_offsets[-1])
        written = self._rows_in(self.pending)
        wps = float(n_words * written / max(self.plan.n_rows, 1) / seconds) if seconds > 0 else None
        if ranks.main:
            lossy = self.writer.zero_shares()
            if lossy:  # the entry is usable, but a head reads far less than the float16 one would give it
                shown = ", ".join(f"layer {layer} {share:.0%}" for layer, share in lossy.items())
                run.log(f"{self.split}: int8 stores many of some layers' values as 0 ({shown}; a model without "
                        "outliers holds a few percent): a few outlier dimensions set each vector's scale and the "
                        "rest lose their precision; --dtype float16 (or bfloat16, past float16's range) keeps them")
            self.writer.finish({"seconds": round(seconds, 3), "words_per_second": wps,
                                "n_empty_words": self.tokens.n_empty_words, "n_windowed_sentences": self.windowed,
                                "device": str(run.device), "processes": ranks.world})
        ranks.barrier()
        summary = summary_from_cache(run.path, self.split, reused=False)
        summary.seconds, summary.words_per_second = seconds, wps
        return summary


def summary_from_cache(path: str, split: str, *, reused: bool, group=None) -> SplitSummary:
    """What a finished split holds, read back from the entry (every rank reads what rank 0 wrote);
    ``group``: the entry, when the caller holds it open already (not opened again)."""
    group = open_group(path, mode="r") if group is None else group
    g = group[split]
    a = dict(g.attrs)
    shape = g["hidden"].shape
    return SplitSummary(
        split=split,
        sentences=a["n_sentences"],
        words=a["n_words"],
        rows=a["n_rows"],
        layers=shape[1],
        width=shape[2],
        dtype=group.attrs["dtype"],
        bytes_on_disk=_bytes_on_disk(path, split),
        seconds=a.get("seconds", 0.0),
        words_per_second=a.get("words_per_second"),
        reused=reused,
        empty_words=a.get("n_empty_words", 0),
        windowed_sentences=a.get("n_windowed_sentences", 0),
    )


def _bytes_on_disk(path: str, split: str) -> int | None:
    return bytes_on_disk(path.rstrip("/") + "/" + split)


class BackgroundWriter:
    """Writes finished units in a thread while the next unit is encoded; at most two in flight so
    memory stays flat however large the dataset."""

    def __init__(self, writer: SplitWriter):
        self.writer = writer
        self.queue: queue.Queue = queue.Queue(maxsize=2)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def put(self, unit: int, out, device) -> None:
        if self.error:
            raise self.error
        import torch

        parts = self.writer.codec.encode_torch(out) if self.quantizes_on(device) else (out,)
        if device.type == "cuda":
            hosts = tuple(torch.empty(p.shape, dtype=p.dtype, pin_memory=True) for p in parts)
            for host, part in zip(hosts, parts):
                host.copy_(part, non_blocking=True)
            event = torch.cuda.Event()
            event.record()
            self.queue.put((unit, hosts, event))
        elif device.type != "cpu":
            # Any other accelerator (MPS, XPU): a blocking copy to the host here, as the writer
            # thread's numpy() reads host tensors only.
            self.queue.put((unit, tuple(p.cpu() for p in parts), None))
        else:
            self.queue.put((unit, parts, None))

    def quantizes_on(self, device) -> bool:
        """Whether a unit is stored-encoded where it was computed (`Codec.encodes_on_device`): int8 on a
        GPU (a quarter of float32's bytes cross to the host), not on the CPU (there the writer thread
        does it beside the next unit's forward pass)."""
        return self.writer.codec.encodes_on_device and device.type != "cpu"

    def _run(self):
        while True:
            item = self.queue.get()
            if item is None:
                return
            unit, (tensor, *scales), event = item  # scales: an int8 unit quantised on the device
            try:
                if self.error is None:
                    if event is not None:
                        event.synchronize()
                    values = self.writer.codec.to_numpy(tensor)
                    if scales:
                        self.writer.write_unit(unit, values, scales=scales[0].numpy())
                    else:  # the plain call: wrappers of `write_unit` take (unit, rows)
                        self.writer.write_unit(unit, values)
            except BaseException as exc:  # surfaced in the main thread
                self.error = exc

    def __exit__(self, exc_type, *rest):
        self.queue.put(None)
        self.thread.join()
        if self.error and exc_type is None:
            raise self.error
