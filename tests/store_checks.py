"""What the activation-store tests share: one run held and the same run streamed."""

from __future__ import annotations

from layerfuse.training import budget, load_data, store, train_head


def held_and_streamed_dev_f1(entry, config, monkeypatch) -> tuple[list[float], list[float]]:
    """The dev F1 of each evaluation of ``config`` on ``entry``, held, then streamed as one block (so
    a streamed epoch draws the held order)."""
    held = train_head(config, load_data(entry))
    store.clear()
    monkeypatch.setattr(budget, "MEMORY_BUDGET_BYTES", 0)
    monkeypatch.setattr(budget, "BLOCK_ROWS", 1 << 30)
    data = load_data(entry)
    assert data.dev.streamed
    streamed = train_head(config, data)
    return [e["dev_f1"] for e in held.evals], [e["dev_f1"] for e in streamed.evals]
