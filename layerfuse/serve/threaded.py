"""The server on a background thread, on a free port: what tests and benchmarks start (the
`serve` command runs uvicorn in the foreground instead).

uvicorn installs no signal handlers off the main thread; stopping sets ``should_exit``, which its
main loop checks every tenth of a second, and falls back to ``force_exit`` if requests hang on.
"""

from __future__ import annotations

import threading
import time

from .state import DEFAULT_HOST, ServerState

START_SECONDS = 30.0  # the app's startup (the job queue's) plus binding
STOP_SECONDS = 10.0


class BackgroundServer:
    def __init__(self, state: ServerState, *, host: str = DEFAULT_HOST, log_level: str = "warning"):
        import uvicorn

        from .app import create_app
        from .guard import server_options

        self.state = state
        self.app = create_app(state)
        # Port 0: the kernel picks a free one when uvicorn binds (read back once started). Handing
        # uvicorn a socket bound here instead measured 42 ms per request on loopback, against 0.4 ms.
        config = uvicorn.Config(self.app, **server_options(host=host, port=0, log_level=log_level, access_log=False))
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="layerfuse-serve", daemon=True)
        self.host, self.port, self.url = host, None, None

    def start(self) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + START_SECONDS
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the server on {self.host} did not start")
            time.sleep(0.01)
        self.port = self._server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://{self.host}:{self.port}"
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=STOP_SECONDS)
        if self._thread.is_alive():
            self._server.force_exit = True
            self._thread.join(timeout=STOP_SECONDS)

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
