"""How much of the cache a run holds in memory, declared once.

A split (train sentences, dev, test) whose fused layers fit in ``MEMORY_BUDGET_BYTES`` (storage
dtype) is read once and held, as it always was; a larger one is streamed from the cache in blocks
of ``BLOCK_ROWS`` rows (`layercache.training.stream`). At roberta-large shape (24 layers x 1024,
48 KiB per row in float16 over layers 1..24) the budget holds about 21,000 rows: a few-shot sample
and MiniLM-sized splits stay in memory, while CoNLL-2003 dev and test (51k and 46k words) and its
train split (203k words, 10 GB) stream, and a streamed split costs a few blocks (400 MB each).

Evaluation batches sentences within blocks of ``BLOCK_ROWS`` cache rows (length-sorted inside each
block), whether the split is held or streamed, so both give the same numbers bit for bit.
"""

MEMORY_BUDGET_BYTES = 1 << 30  # a split's fused layers up to this size are held; larger ones stream
BLOCK_ROWS = 8192  # cache rows per streamed block, and the span of one length-sorted evaluation group
SHUFFLE_WINDOW = 2  # streamed training: sentences are shuffled within this many consecutive blocks
