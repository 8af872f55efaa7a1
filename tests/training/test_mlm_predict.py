"""`predict --fill-mask` with FE and FT MLM heads: k tokens per mask, the head's own ranking, and
one-line errors for a NER head or a text without a mask."""

from __future__ import annotations

import json

import pytest
import torch
from click.testing import CliRunner
from mlm_fixtures import tiny_mlm_bert_dir, tiny_mlm_cache, tiny_text_dir  # noqa: F401 (fixtures)

from layerfuse.cli.predict import main as predict
from layerfuse.cli.train import main as train


@pytest.fixture(scope="module")
def fe_head(tiny_mlm_cache, tmp_path_factory):
    out = tmp_path_factory.mktemp("mlm_heads")
    result = CliRunner().invoke(train, ["--cache", tiny_mlm_cache, "--task", "mlm", "--fusion", "dwatt",
                                        "--epochs", "1",
                                        "--shots", "8", "--lr", "1e-2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return str(out / "dwatt-mlm-n8-e1-s0.head")


def test_fill_mask_prints_k_tokens_per_mask(fe_head):
    text = "alice visited [MASK] today. bob met [MASK] in paris."
    out = CliRunner().invoke(predict, ["--fill-mask", text, "--checkpoint", fe_head, "--top-k", "3"])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[0] == text and len(lines) == 3
    assert all(line.startswith(f"  mask {k}: ") and line.count("(") == 3 for k, line in enumerate(lines[1:], 1))
    row = json.loads(CliRunner().invoke(predict, ["--fill-mask", text.replace("[MASK]", "<mask>"), "--head", fe_head,
                                                  "--json"]).output)
    assert len(row["masks"]) == 2 and all(len(m["top"]) == 5 for m in row["masks"])
    probs = [t["probability"] for t in row["masks"][0]["top"]]
    assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1 + 1e-6


def test_fill_mask_ranks_as_the_head_does(fe_head):
    from layerfuse.inference import MaskFiller

    filler = MaskFiller(fe_head)
    ids = filler.encode("alice visited [MASK] today.")
    hidden, mask = filler.backbone.encode_ids([ids], filler.layers)
    rows = torch.tensor([[t == filler.tokenizer.mask_token_id for t in ids]])
    with torch.inference_mode():
        best = filler.head(hidden, mask, rows=rows).argmax(-1).item()
    assert filler.fill("alice visited [MASK] today.", top_k=1)[0]["top"][0]["id"] == best
    assert filler.head.lm.decoder_weight is filler.backbone.model.get_input_embeddings().weight


def test_ft_head_fills_with_its_tuned_backbone(tiny_mlm_cache, tmp_path):
    result = CliRunner().invoke(train, ["--cache", tiny_mlm_cache, "--task", "mlm", "--mode", "ft", "--fusion", "base",
                                        "--epochs", "1", "--shots", "4", "--lr", "1e-3", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "best dev perplexity" in result.output
    meta = json.loads((tmp_path / "base-ft-mlm-n4-e1-s0.head.json").read_text())
    assert meta["task"] == "mlm" and meta["backbone_path"] == "base-ft-mlm-n4-e1-s0.backbone"
    out = CliRunner().invoke(predict, ["--fill-mask", "bob met [MASK] in rome.", "--checkpoint",
                                       str(tmp_path / "base-ft-mlm-n4-e1-s0.head")])
    assert out.exit_code == 0 and out.output.splitlines()[1].count("(") == 5, out.output


def test_fill_mask_errors_are_one_line(fe_head, tiny_cache, tmp_path):
    out = CliRunner().invoke(predict, ["--fill-mask", "no mask here", "--checkpoint", fe_head])
    assert out.exit_code == 1 and out.output.startswith("error: no mask in 'no mask here'")
    # an MLM head fills --text too
    text = CliRunner().invoke(predict, ["--text", "alice met [MASK]", "--head", fe_head])
    assert text.exit_code == 0 and text.output.splitlines()[1].startswith("  mask 1: ")
    ner = CliRunner().invoke(train, ["--cache", tiny_cache, "--fusion", "base", "--epochs", "0",
                                     "--out", str(tmp_path)])
    assert ner.exit_code == 0, ner.output
    out = CliRunner().invoke(predict, ["--fill-mask", "a [MASK]",
                                       "--checkpoint", str(tmp_path / "base-nall-e0-s0.head")])
    assert out.exit_code == 1 and "is a NER head; --fill-mask needs an MLM head" in out.output
