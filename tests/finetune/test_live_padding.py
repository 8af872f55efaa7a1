"""Live batches padded to a multiple of tokens (on a GPU: few shapes, each costing kernel choice once)
give the same rows as batches padded to their longest sentence."""

from __future__ import annotations

import torch


def test_padding_a_live_batch_further_leaves_its_rows_unchanged(tiny_cache):
    from layerfuse.cache.reader import open_entry
    from layerfuse.finetune.live import load_live_backbone

    entry = open_entry(tiny_cache)
    backbone = load_live_backbone(entry.meta, device="cpu")
    backbone.eval()
    sentences = entry.split("train").words()[:6]
    layers = list(range(1, entry.num_layers + 1))
    assert backbone.encoder.pad_to_multiple == 1  # on a CPU padding costs arithmetic: none
    with torch.no_grad():
        tight, tight_mask = backbone(sentences, layers)
        backbone.encoder.pad_to_multiple = 32
        padded, padded_mask = backbone(sentences, layers)
    assert torch.equal(tight_mask, padded_mask)
    torch.testing.assert_close(padded, tight, atol=1e-5, rtol=1e-5)


def test_the_padded_width_is_a_multiple_up_to_the_longest_input(tiny_cache):
    from layerfuse.cache.reader import open_entry
    from layerfuse.finetune.live import load_live_backbone

    encoder = load_live_backbone(open_entry(tiny_cache).meta, device="cpu").encoder
    encoder.pad_to_multiple, encoder.max_length = 32, 100
    assert [encoder.padded_width(n) for n in (1, 32, 33, 96, 97, 100)] == [32, 32, 64, 96, 100, 100]
