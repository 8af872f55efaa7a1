"""The two tagging metrics on hand-made cases: span F1 in conlleval's convention (chunks of IOB2 tags,
an I- after O starting a chunk) for span label sets, token accuracy for token label sets."""

import numpy as np
import pytest

from layerfuse.training.metrics import Chunker, entity_f1, token_accuracy

NAMES = ["O", "B-NP", "I-NP", "B-VP", "I-VP"]
ID = {name: i for i, name in enumerate(NAMES)}


def _spans(tags: list[list[str]]) -> set:
    return Chunker(NAMES)(np.array([ID[t] for s in tags for t in s]), np.array([len(s) for s in tags]))


def test_span_f1_by_hand():
    gold = [["B-NP", "I-NP", "B-VP", "O"], ["B-NP"]]
    assert _spans(gold) == {("NP", 0, 1), ("VP", 2, 2), ("NP", 5, 5)}  # joined with an O between, as seqeval does
    pred = [["B-NP", "B-NP", "B-VP", "O"], ["I-NP"]]  # NP split in two; an I- after O starts a chunk
    assert _spans(pred) == {("NP", 0, 0), ("NP", 1, 1), ("VP", 2, 2), ("NP", 5, 5)}
    # 2 of 4 predicted right, 2 of 3 gold found: P = 1/2, R = 2/3, F1 = 4/7
    assert entity_f1(_spans(gold), _spans(pred)) == pytest.approx(4 / 7)
    assert entity_f1(_spans(gold), set()) == 0.0


def test_token_accuracy_by_hand():
    assert token_accuracy(np.array([1, 2, 3, 4]), np.array([1, 2, 0, 4])) == 0.75
    assert token_accuracy(np.array([], dtype=int), np.array([], dtype=int)) == 0.0
    with pytest.raises(ValueError, match="differ in shape"):
        token_accuracy(np.array([1, 2]), np.array([1]))
