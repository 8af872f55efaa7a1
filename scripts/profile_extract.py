"""Where one `extract` call spends its time: cProfile of the main thread over the first N CoNLL-2003
train sentences (the writer thread's own work shows as the main thread waiting for it).

    python scripts/profile_extract.py --sentences 14041
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
import time
from pathlib import Path

from _common import CONLL, write_subset


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=CONLL)
    p.add_argument("--sentences", type=int, default=3000)
    p.add_argument("--top", type=int, default=35)
    args = p.parse_args(argv)
    from layerfuse.extract.run import ExtractConfig, extract

    tmp = Path(tempfile.mkdtemp(prefix="profile_extract_"))
    write_subset(args.data, args.sentences, tmp / "data")
    profile = cProfile.Profile()
    t0 = time.perf_counter()
    profile.enable()
    extract(ExtractConfig(model=None, dataset=str(tmp / "data"), cache_dir=str(tmp / "cache")), progress=False,
            log=lambda m: None)
    profile.disable()
    print(f"wall {time.perf_counter() - t0:.1f} s")
    pstats.Stats(profile).sort_stats("cumulative").print_stats(args.top)


if __name__ == "__main__":
    main()
