"""What a client is told of an entry the server does not serve."""

from __future__ import annotations

import pytest

from layerfuse.cache.store import open_group
from layerfuse.errors import LayerfuseError


def test_an_entry_not_served_says_why_it_may_be_missing(served):
    """An entry being extended (a job adding dev) read as plain "no cache entry at URL" while the server's
    404 said it was not complete yet."""
    url = f"{served.url}/entries/not-served-yet"
    with pytest.raises(LayerfuseError, match=r"no cache entry at .*not-served-yet \(a server serves complete entries "
                                             r"only, none being extracted or extended\)"):
        open_group(url)


def test_a_submission_the_server_is_slow_to_answer_says_it_may_be_queued(monkeypatch):
    """A server still hashing a large model folder when the client gave up was reported as "cannot reach",
    and the job it then queued and ran was a surprise."""
    import http.server
    import threading
    import time

    import pytest

    from layerfuse.errors import LayerfuseError
    from layerfuse.serve import submit

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - the handler's name is the method's
            time.sleep(1.5)
            self.send_response(202)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(submit, "TIMEOUT_S", 0.3)
    try:
        with pytest.raises(LayerfuseError, match=r"did not answer within 0.3 s \(the job may be queued all the same"):
            submit.submit_job(f"http://127.0.0.1:{server.server_port}", {"model": "m"}, token=None)
    finally:
        server.shutdown()
