"""Tag-scheme normalisation against hand-written IOB2 tags."""

import pytest

from layerfuse.errors import LayerfuseError
from layerfuse.extract.iob import detect_scheme, split_tag, to_iob2


def test_iob1_to_iob2():
    tags = ["I-PER", "I-PER", "B-PER", "O", "I-LOC", "I-ORG", "I-ORG", "O", "I-MISC"]
    expected = ["B-PER", "I-PER", "B-PER", "O", "B-LOC", "B-ORG", "I-ORG", "O", "B-MISC"]
    assert to_iob2(tags, scheme="iob1") == expected
    assert to_iob2(tags) == expected  # auto sees an I- opening an entity


def test_iob2_is_unchanged():
    tags = ["B-PER", "I-PER", "B-PER", "O", "B-LOC", "O", "B-geo-loc", "I-geo-loc"]
    assert to_iob2(tags, scheme="iob2") == tags
    assert to_iob2(tags) == tags


def test_iobes_to_iob2():
    tags = ["S-PER", "B-LOC", "I-LOC", "E-LOC", "O", "B-ORG", "E-ORG", "S-ORG", "B-ORG", "E-ORG"]
    expected = ["B-PER", "B-LOC", "I-LOC", "I-LOC", "O", "B-ORG", "I-ORG", "B-ORG", "B-ORG", "I-ORG"]
    assert to_iob2(tags, scheme="iobes") == expected
    assert to_iob2(tags) == expected


def test_bilou_aliases():
    tags = ["U-PER", "B-LOC", "I-LOC", "L-LOC", "O"]
    assert to_iob2(tags, scheme="bilou") == ["B-PER", "B-LOC", "I-LOC", "I-LOC", "O"]
    assert to_iob2(tags) == ["B-PER", "B-LOC", "I-LOC", "I-LOC", "O"]


def test_o_stays_o():
    assert to_iob2(["O", "O"]) == ["O", "O"]
    assert split_tag("O") == ("O", None)


def test_detect_scheme_is_per_dataset():
    # The second sentence alone looks like IOB2; the first one shows the corpus is IOB1.
    assert detect_scheme([["I-PER", "O"], ["B-LOC", "I-LOC"]]) == "iob1"
    assert detect_scheme([["B-PER", "O"], ["B-LOC", "I-LOC"]]) == "iob2"
    assert detect_scheme([["I-PER", "E-PER"], ["O"]]) == "iobes"
    assert detect_scheme([["O"], ["U-PER"]]) == "iobes"
    assert detect_scheme([["O"]]) == "iob2"


@pytest.mark.parametrize("bad", ["X-PER", "B-", "B-PER X", "PER", "b-PER", "", "B-PER\n"])
def test_malformed_tags_name_location_and_value(bad):
    with pytest.raises(LayerfuseError) as info:
        to_iob2(["O", bad], where="data/train.txt:17")
    message = str(info.value)
    assert "data/train.txt:17" in message
    assert repr(bad) in message
    assert "\n" not in message


def test_unknown_scheme_name():
    with pytest.raises(LayerfuseError, match="iob3"):
        to_iob2(["O"], scheme="iob3")
