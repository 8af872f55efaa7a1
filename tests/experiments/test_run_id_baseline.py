"""Run ids are named against the first release's defaults; `id_baseline` is derived from
`TrainConfig` and the fusions' declared settings, so this pins it: changing a default must add its
old value to `FIRST_RELEASE` (or to the setting's `Option.before`), or every run already in a
results file would be renamed."""

from layerfuse.experiments.results import id_baseline

FIRST_RELEASE_DEFAULTS = {
    "lr": 5e-5, "batch_size": 16, "eval_every": None, "eval_points": None, "dev_sentences": None,
    "layers": None, "extra_layers": None, "dropout": 0.1, "weight_decay": 0.01, "warmup": 0,
    "max_grad_norm": 1.0, "mode": "fe", "freeze": None, "grad_accum": 1, "precision": "fp32",
    "layer_score": "paper", "task": "ner", "labels": None, "query_layer": "fused",
}


def test_id_baseline_is_the_first_releases_defaults():
    assert id_baseline() == FIRST_RELEASE_DEFAULTS
