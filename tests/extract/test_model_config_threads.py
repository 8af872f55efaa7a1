"""Model configs read from several threads at once, as the server reads the jobs submitted side by side:
the first use of transformers' lazy classes from two threads failed one of them (ImportError, which the
server answered as a 422 for a model it could read)."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import sys, threading
from layerfuse.extract.models import model_info
errors = []
def read():
    try:
        model_info(sys.argv[1])
    except Exception as exc:
        errors.append(repr(exc))
threads = [threading.Thread(target=read) for _ in range(4)]
[t.start() for t in threads]
[t.join() for t in threads]
print(errors)
"""


def test_four_threads_read_a_config_in_a_fresh_process(tiny_bert_dir):
    for _ in range(3):  # the race lost about two runs in three before
        out = subprocess.run([sys.executable, "-c", SCRIPT, str(tiny_bert_dir)], capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr[-2000:]
