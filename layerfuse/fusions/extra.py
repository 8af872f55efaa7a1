"""Extra-layers fusion (R+n): new transformer encoder layers on top of the last layer."""

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from layerfuse.errors import LayerfuseError
from layerfuse.transfer import to_device

from .dropout import Dropout, dropout
from .fusion import Fusion
from .options import Option, Style
from .stacked import cast, layer_norm, linear, under


def paper_depth(num_layers: int | None) -> int:
    """Paper Table 2: one extra layer on a 12-layer backbone (or smaller, or of unknown depth), two on
    a 24-layer one."""
    return 1 if num_layers is None or num_layers <= 12 else 2


# At most as deep as the deepest common backbones (48 layers): a deeper "head" is a model of its own.
EXTRA_LAYERS = Option("extra_layers", None, type=int, minimum=1, maximum=48, by_depth=paper_depth,
                      help="Layers of the extra head (1 to 48). Default: 1 if L <= 12 else 2.")


class ExtraLayers(Fusion):
    """``h = Enc_n(... Enc_1(z_L))``: ``extra_layers`` fresh post-LN encoder layers.

    Each layer has the backbone's width ``d``, ``num_heads`` heads and FFN size ``ffn_dim`` (GELU),
    and attends over the sentence's positions; padded positions are masked as keys. The caller picks
    ``extra_layers`` (the paper: 1 for 12-layer, 2 for 24-layer backbones), since the head only sees
    the selected layers.
    """

    token_wise = False  # attends across the sentence: packed batches need the sentence lengths
    style = Style("C3", "D", "extra layers (R+n)")
    top_layer_only = True  # reads z_L alone: a run holds and batches that one layer
    reads_query_layer = True  # z_L is the input of the new layers
    options = (EXTRA_LAYERS,)
    shares_evaluation_batch = True
    casts_stacked_weights = True  # stacked_forward: cast(params, rows.dtype) first

    def __init__(self, *, dim: int, num_heads: int, ffn_dim: int, extra_layers: int, dropout: float) -> None:
        super().__init__()
        EXTRA_LAYERS.check(extra_layers)
        if num_heads < 1 or dim % num_heads != 0:
            raise LayerfuseError(f"num_heads={num_heads!r} must be >= 1 and divide dim={dim!r}")
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(
                dim,
                num_heads,
                ffn_dim,
                dropout,
                activation="gelu",
                batch_first=True,
                norm_first=False,
            )
            for _ in range(extra_layers)
        )
        for layer in self.layers:  # the cheaper mask on CPU (no parameters: state_dicts are unchanged)
            layer.dropout, layer.dropout1, layer.dropout2 = (Dropout(dropout) for _ in range(3))

    def forward(self, hidden: Tensor, mask: Tensor) -> Tensor:
        # hidden [B, T, L, d], mask [B, T] (True = real token)
        h = hidden[:, :, -1]  # [B, T, d]
        # A sentence with no real token would softmax over nothing (NaN); let it attend everywhere
        # instead: its outputs are padding and ignored anyway.
        padding = ~mask & mask.any(dim=1, keepdim=True)  # [B, T], True = ignore as key
        for layer in self.layers:
            h = layer(h, src_key_padding_mask=padding)  # [B, T, d]
        return h

    def forward_packed(self, hidden: Tensor, lengths) -> Tensor:
        """The same layers on a packed batch: ``hidden [1, R, L, d]`` holds sentences of ``lengths``
        (a host array) back to back (then padding rows), output ``[1, R, d]``.

        Only attention needs the sentences apart: the projections, the FFN and the norms (most of
        the cost) run on the packed rows, and attention runs per group of sentences of similar
        length, each group padded to its longest (a random batch padded to its longest sentence
        wastes ~5x on the quadratic part). Equals `forward` on the padded batch (tested).
        """
        x = hidden[0, :, -1]  # [R, d]
        groups = _length_groups(lengths, device=x.device)
        for layer in self.layers:
            x = _packed_layer(layer, x, groups)
        return x[None]


    @staticmethod
    def stacked_forward(fusion, params: dict, buffers: dict, rows: Tensor, mask: Tensor, *, k: int, shared: bool,
                        lengths) -> Tensor:
        """`forward_packed` for K heads: ``rows [K, R, L, d]`` packed rows with each head's ``lengths``;
        or shared ``[B*T, L, d]`` (a padded batch, ``mask [B, T]``): its real rows packed, the outputs
        put back in place (zeros at padding). Attention runs per group of sentences of similar length
        across all K heads' rows at once (it has no weights); everything else per head."""
        w = cast(params, rows.dtype)
        top = rows[..., -1, :]  # z_L
        if shared:
            flat_mask = mask.reshape(-1)
            x = top[flat_mask].expand(k, -1, -1)  # [K, N, d]: the real rows, as every head's input
            lengths = [mask.sum(1).cpu().numpy()] * k  # evaluation of a pack: one copy per batch
        else:
            x = top
        n = x.shape[1]
        lengths = [np.asarray(ls, dtype=np.int64) for ls in lengths]  # host arrays: planned without the device
        starts = np.concatenate([k_ * n + np.cumsum(ls) - ls for k_, ls in enumerate(lengths)])
        groups = _length_groups(np.concatenate(lengths), device=x.device, starts=starts)
        for i, layer in enumerate(fusion.layers):
            x = _stacked_layer(layer, under(w, f"layers.{i}."), x, groups, k=k)
        if not shared:
            return x
        out = x.new_zeros((k, flat_mask.shape[0], x.shape[-1]))
        out[:, flat_mask] = x
        return out


def _stacked_layer(layer: nn.TransformerEncoderLayer, p: dict, x: Tensor, groups, *, k: int) -> Tensor:
    """`_packed_layer` for K heads: ``x [K, N, d]``, ``p`` the layer's K stacked weights."""
    n = x.shape[1]
    qkv = linear(x, p["self_attn.in_proj_weight"], p["self_attn.in_proj_bias"])  # [K, N, 3d]
    drop = layer.self_attn.dropout if layer.training else 0.0
    attn = _grouped_attention(qkv.reshape(k * n, -1), groups, heads=layer.self_attn.num_heads, p=drop)
    attn = linear(attn.view(k, n, -1), p["self_attn.out_proj.weight"], p["self_attn.out_proj.bias"])
    x = layer_norm(x + layer.dropout1(attn), p["norm1.weight"][:, None], p["norm1.bias"][:, None],
                   eps=layer.norm1.eps)
    ffn = layer.activation(linear(x, p["linear1.weight"], p["linear1.bias"]))
    ffn = linear(layer.dropout(ffn), p["linear2.weight"], p["linear2.bias"])
    return layer_norm(x + layer.dropout2(ffn), p["norm2.weight"][:, None], p["norm2.bias"][:, None],
                      eps=layer.norm2.eps)


# How attention finds each sentence's rows, by device type (`_length_groups`): "groups" pads
# sentences of similar length together (power-of-two ceilings), "padded" pads all of them to the
# longest, in one group. On a CPU padding costs arithmetic; on a GPU a group costs a dozen kernels a
# layer and the padding next to nothing. (A nested tensor, padding nothing, made the extra layers'
# grid steps three times slower on an H100: every operation on one dispatches in Python, and these
# steps wait on the host. docs/results/bench_grid_gpu_nested_attention_per_head.md)
ATTENTION = {"cpu": "groups", "cuda": "padded"}


def _length_groups(lengths, *, device, starts=None, method: str | None = None) -> tuple[list, Tensor]:
    """(index [b, T] of rows, mask [b, T], the flat slots of real rows) per group of sentences, T the
    group's longest rounded up to a multiple of 8; and the rows of all groups' real tokens in group
    order (where the groups' outputs go, concatenated). Sentence i starts at row ``starts[i]``
    (default: back to back from row 0). ``method`` (default by device: `ATTENTION`): "groups", a
    group per power-of-two ceiling of the lengths (at least 8); "padded", one group of all.

    ``lengths`` and ``starts`` are host arrays (a batch's sentence lengths are known before it is
    built): the grouping is planned on the host and its index tensors copied over in two copies
    (integers, masks) without waiting for the device, so a training step never turns a device
    tensor into a host value."""
    lengths = np.asarray(lengths, dtype=np.int64)
    starts = np.cumsum(lengths) - lengths if starts is None else np.asarray(starts, dtype=np.int64)
    real = lengths > 0
    method = method or ATTENTION.get(torch.device(device).type, "groups")
    if method == "padded":
        caps = np.zeros_like(lengths)
    else:
        caps = np.maximum(8, 1 << np.ceil(np.log2(np.maximum(lengths, 1))).astype(np.int64))
    plans, targets = [], []
    for cap in dict.fromkeys(caps[real].tolist()):  # in order of first appearance, as before
        members = np.flatnonzero(real & (caps == cap))
        group_starts, group_lengths = starts[members], lengths[members]
        T = int(group_lengths.max())
        T += -T % 8
        slots = np.arange(T)
        mask = slots[None, :] < group_lengths[:, None]  # [b, T]
        index = np.where(mask, group_starts[:, None] + slots[None, :], 0)
        # keep: the slots of real rows, as indices (a boolean mask would wait for the device on CUDA)
        plans.append((index, mask, np.flatnonzero(mask.ravel())))
        targets.append(index[mask])
    targets = np.concatenate(targets) if targets else np.zeros(0, dtype=np.int64)
    ints = to_device(np.concatenate([targets, *(a.ravel() for index, _, keep in plans for a in (index, keep))]),
                     device)
    masks = to_device(np.concatenate([mask.ravel() for _, mask, _ in plans] or [np.zeros(0, dtype=bool)]), device)
    groups, at, at_mask = [], len(targets), 0  # views of the two copies, group by group
    for index, mask, keep in plans:
        n_index, n_keep = index.size, keep.size
        groups.append((ints[at:at + n_index].view(index.shape), masks[at_mask:at_mask + n_index].view(mask.shape),
                       ints[at + n_index:at + n_index + n_keep]))
        at, at_mask = at + n_index + n_keep, at_mask + n_index
    return groups, ints[:len(targets)]


def _packed_layer(layer: nn.TransformerEncoderLayer, x: Tensor, groups) -> Tensor:
    """``nn.TransformerEncoderLayer`` (post-LN, batch_first) on packed rows ``x [R, d]``: the same
    parameters and operations, with attention within each sentence (rows in no sentence, the
    padding after them, get no attention output)."""
    attn = layer.self_attn
    qkv = F.linear(x, attn.in_proj_weight, attn.in_proj_bias)  # [R, 3d]
    out = _grouped_attention(qkv, groups, heads=attn.num_heads, p=attn.dropout if layer.training else 0.0)
    x = layer.norm1(x + layer.dropout1(attn.out_proj(out)))
    ffn = layer.linear2(layer.dropout(layer.activation(layer.linear1(x))))
    return layer.norm2(x + layer.dropout2(ffn))


def _grouped_attention(qkv: Tensor, groups, *, heads: int, p: float) -> Tensor:
    """Multi-head attention (no projections) within each sentence of ``groups`` (`_length_groups`):
    ``qkv [R, 3d]`` -> ``[R, d]``, zeros at rows in no sentence; attention dropout ``p``. It has no
    weights, so the rows of a pack of heads go through it at once (`ExtraLayers.stacked_forward`).

    `scaled_dot_product_attention` with the sentences' mask computes it (a fused kernel on a GPU),
    except for training with dropout on a CPU, where the attention is written out so that the
    dropout draws the library's CPU mask (`layerfuse.fusions.dropout`) as the other layers do."""
    groups, targets = groups
    d = qkv.shape[-1] // 3
    cpu = qkv.device.type == "cpu"
    # On a CPU, small products in float32 (no new bfloat16 kernel per shape); on a GPU, as they come.
    wide = torch.promote_types(qkv.dtype, torch.float32) if cpu else qkv.dtype
    rows = []
    with torch.autocast(qkv.device.type, enabled=False):
        for index, mask, keep in groups:
            b, T = index.shape
            # index_select, not qkv[index]: its backward adds rows (index_add_; padding slots add exact
            # zeros), where an indexed read's sorts the indices (half of a pack step on CUDA)
            rows_in = qkv.index_select(0, index.reshape(-1)).to(wide)
            q, k, v = rows_in.view(b, T, 3, heads, d // heads).permute(2, 0, 3, 1, 4)  # [b, h, T, dh]
            if p > 0 and cpu:
                scores = (q @ k.transpose(-1, -2)) * (d // heads) ** -0.5  # [b, h, T, T]
                probs = torch.softmax(scores.masked_fill(~mask[:, None, None, :], float("-inf")), dim=-1)
                out = dropout(probs, p) @ v
            else:
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask[:, None, None, :], dropout_p=p)
            rows.append(out.transpose(1, 2).reshape(b * T, d).index_select(0, keep))  # [n_b, d] in group order
        # One scatter of all groups' rows to their places (one per group copied all R rows).
        out = qkv.new_zeros((qkv.shape[0], d))
        if rows:
            out = out.index_copy(0, targets, torch.cat(rows).to(qkv.dtype))
    return out
