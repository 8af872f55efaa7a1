"""The grid: every combination once, cheapest first, fields that change one fusion only multiply it alone."""

from layerfuse.experiments import grid, run_id
from layerfuse.training import TrainConfig


def test_lr_and_layer_score_axes():
    base = TrainConfig(fusion="base", shots=None, epochs=1, seed=0)
    configs = grid(fusions=["concat", "dwatt"], shots=[8], epochs=[10], trials=2, base=base,
                   lr=[1e-3, 3e-4], layer_score=["paper", "scaled"])
    ids = [run_id(c) for c in configs]
    assert len(ids) == len(set(ids)) == 2 * 2 + 2 * 2 * 2  # concat: lr x seed; dwatt: lr x score x seed
    assert {c.layer_score for c in configs if c.fusion == "concat"} == {"scaled"}
    assert {(c.lr, c.layer_score) for c in configs if c.fusion == "dwatt"} == {
        (1e-3, "paper"), (1e-3, "scaled"), (3e-4, "paper"), (3e-4, "scaled")}


def test_old_records_keep_their_ids():
    """A first-release record (no layer_score; lr 5e-5 was then the default) names the same run as
    the config that reproduces it today: the paper's DWAtt score at lr 5e-5."""
    old = {"fusion": "dwatt", "shots": 8, "epochs": 25, "seed": 0, "lr": 5e-5, "batch_size": 16, "precision": "fp32"}
    today = TrainConfig(fusion="dwatt", shots=8, epochs=25, seed=0, lr=5e-5, layer_score="paper")
    assert run_id(old) == run_id(today) == "dwatt-n8-e25-s0-61f86969dc"  # as the first release named it
    assert run_id(TrainConfig(fusion="dwatt", shots=8, epochs=25, seed=0, lr=5e-5)) != run_id(old)  # scaled
    concat_old = {**old, "fusion": "concat"}
    assert run_id(concat_old) == run_id(TrainConfig(fusion="concat", shots=8, epochs=25, seed=0, lr=5e-5)) \
        == "concat-n8-e25-s0-e5166fdacc"
    sweep_run = TrainConfig(fusion="extra", shots=128, epochs=100, seed=4, eval_points=5, precision="bf16",
                            dev_sentences=1000, lr=5e-5)
    assert run_id(sweep_run) == "extra-n128-e100-s4-ba8f4482b0"  # a README sweep run, named as then


def test_default_lr_is_per_fusion_and_named_by_its_value():
    from layerfuse.training.config import default_lr

    base = TrainConfig(fusion="base", shots=None, epochs=1, seed=0)
    configs = {c.fusion: c for c in grid(fusions=["base", "concat", "scalarmix"], shots=[8], epochs=[10], trials=1,
                                         base=base)}
    assert {f: c.max_lr for f, c in configs.items()} == {"base": 1e-2, "concat": 1e-3, "scalarmix": 1e-2}
    assert configs["concat"].record()["lr"] == 1e-3  # a record says the rate that ran
    explicit = TrainConfig(fusion="concat", shots=8, epochs=10, seed=0, lr=1e-3)
    assert run_id(configs["concat"]) == run_id(explicit) == run_id(explicit.record())
    assert default_lr("concat", "ft") == 5e-5 == TrainConfig(fusion="concat", shots=8, epochs=1, seed=0,
                                                             mode="ft").max_lr


def test_one_value_of_an_axis_is_that_value_and_numpy_numbers_are_pythons():
    """`layers="12"` made runs on layer 1 and on layer 2 (a string iterated letter by letter), `lr=1e-3` was a
    TypeError, and numpy numbers failed later as JSON in the run id."""
    import numpy as np
    import pytest

    from layerfuse.errors import LayerfuseError

    base = TrainConfig(fusion="concat", shots=2, epochs=1, seed=0)
    [one] = grid(fusions="concat", shots=np.int64(2), epochs=1, trials=1, base=base, layers="1,2", lr=1e-3)
    assert (one.layers, one.lr, type(one.shots)) == ("1,2", 1e-3, int)
    assert {c.shots for c in grid(fusions="concat", shots=np.array([1, 2]), epochs=[1], trials=1, base=base)} == {1, 2}
    run_id(TrainConfig(fusion="concat", shots=2, epochs=1, seed=np.int64(0), lr=np.float32(1e-3)))  # JSON, no error
    with pytest.raises(LayerfuseError, match="base must be a TrainConfig"):
        grid(fusions="concat", shots=2, epochs=1, trials=1, base=None)


def test_layers_given_as_numbers_are_the_text_layers_takes():
    """`TrainConfig(layers=[4, 8])` made an unhashable config (a list in a frozen dataclass): sets of
    runs and the grid failed on it far from the call. Numbers are written as `--layers` takes them;
    anything else is refused in one line."""
    import numpy as np
    import pytest

    from layerfuse.errors import LayerfuseError

    made = [TrainConfig(fusion="concat", shots=2, epochs=1, seed=0, layers=layers)
            for layers in ([1, 2], (1, 2), np.array([1, 2]), "1,2")]
    assert {c.layers for c in made} == {"1,2"} and len({run_id(c) for c in made}) == 1
    assert TrainConfig(fusion="concat", shots=2, epochs=1, seed=0, layers=np.int64(3)).layers == "3"
    for bad in ([], ["a"], 1.5, True):
        with pytest.raises(LayerfuseError, match="layers must be text"):
            TrainConfig(fusion="concat", shots=2, epochs=1, seed=0, layers=bad)
