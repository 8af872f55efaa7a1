"""Probing the cached layers: which layer holds what a label set asks for (`layerfuse probe`).

Following Tenney et al. (2019, "BERT rediscovers the classical NLP pipeline") and Hewitt and Liang
(2019, "Designing and interpreting probes with control tasks"), for each label set of a cache entry
(ner, pos, chunk, ...):

- a linear probe (d -> C, softmax cross-entropy) on the token vectors of each layer 0..L
  (`probe.LinearProbe`), and one on a ScalarMix of all of them (`probe.ScalarMixProbe`), trained
  on the whole train split or an N-shot sample (N x C sentences), in a fixed way (`ProbeConfig`);
- scored on dev (and test): token accuracy for every set, span F1 (conlleval) for span sets;
- the layer's variability nu on the train tokens (`layerfuse.layers.variability`);
- the same probes on a control task (`control.ControlTask`: one random label per word type), and
  the selectivity, task accuracy - control accuracy: how much of a score is not type memorisation;
- where the task is resolved (`expected`): the ScalarMix weights' center of gravity, and an
  expected layer from the single-layer score gains.

Results are one JSON line per probe in ``<out>/probe.jsonl`` (a rerun trains only what is missing,
`records`), summarised in ``probe.md`` and ``probe.png`` (`report`). Everything reads a label set
through ``CacheEntry.with_labels(name)``; an entry from before label sets is one span set, ``ner``.
"""

from .control import ControlTask, label_distribution
from .expected import center_of_gravity, expected_layer
from .probe import LinearProbe, ProbeConfig, ScalarMixProbe, predict, score, train_probe
from .report import summarize, write_report
from .run import run_probes

__all__ = [
    "ControlTask", "label_distribution", "center_of_gravity", "expected_layer", "LinearProbe", "ProbeConfig",
    "ScalarMixProbe", "predict", "score", "train_probe", "summarize", "write_report", "run_probes",
]
