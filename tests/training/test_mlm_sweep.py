"""`sweep --task mlm`: the grid runs on an MLM cache, and the report shows perplexities (lower is
better: the learning rate is chosen by the lowest dev perplexity)."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner
from mlm_fixtures import tiny_mlm_bert_dir, tiny_mlm_cache, tiny_text_dir  # noqa: F401 (fixtures)

from layerfuse.cli.sweep import main
from layerfuse.experiments.report import table
from layerfuse.experiments.results import RESULTS, read_results


@pytest.mark.slow
def test_sweep_mlm_reports_perplexity(tiny_mlm_cache, tmp_path):
    out = CliRunner().invoke(main, ["--task", "mlm", "--cache", tiny_mlm_cache, "--fusions", "base,concat", "--shots",
                                    "4,all", "--epochs", "1", "--trials", "1", "--eval-points", "1", "--workers", "1",
                                    "--lrs", "0.01", "--out", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert "| fusion | N | epochs | lr (best on dev) | dev perplexity | test perplexity |" in out.output
    records = read_results(str(tmp_path / RESULTS))
    assert len(records) == 4 and all(r["config"]["task"] == "mlm" and r["best_dev_ppl"] > 1 for r in records.values())
    assert not (tmp_path / "layer_scores.json").exists()  # nu needs tag classes
    again = CliRunner().invoke(main, ["--report", "--out", str(tmp_path)])
    assert again.exit_code == 0 and "masked-token perplexity (lower is better)" in (tmp_path / "report.md").read_text()


def test_report_picks_the_lowest_dev_perplexity():
    def run(lr, seed, dev, test):
        return {"run_id": f"{lr}-{seed}", "config": {"fusion": "concat", "shots": None, "epochs": 5, "seed": seed,
                                                      "lr": lr, "task": "mlm"},
                "best_dev_f1": None, "best_dev_ppl": dev, "test_ppl_at_best": test, "evals": []}

    records = [run(1e-3, 0, 20.0, 30.0), run(1e-3, 1, 22.0, 30.0),  # mean dev 21: chosen
               run(1e-2, 0, 25.0, 10.0), run(1e-2, 1, 25.0, 10.0)]  # worse dev, better test: not chosen
    half = 12.706204736174707 * math.sqrt(2) / math.sqrt(2)
    assert f"| concat | all | 5 | 0.001 of 2 | 21.0 ± {half:.1f} (2) | 30.0 ± 0.0 (2) |" in table(records).splitlines()
    assert json.dumps(records)  # records are plain JSON
