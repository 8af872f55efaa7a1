"""A screenshot of the page `layerfuse serve` shows, taken in headless Chromium.

    python scripts/screenshot_serve_page.py --cache-dir ROOT --runs runs/sweep \
        [--out docs/results/screenshot_serve_page.png]

The server runs inside this script on a free port of 127.0.0.1 (`serve.threaded`), over ROOT and
the run folders given; the whole page, not only its first screen, goes to --out. The browser is
Debian's (``apt-get install chromium chromium-driver``) at `CHROMIUM` and `CHROMEDRIVER`: nothing
is downloaded. The page's browser test (tests/serve/test_page.py) opens its browser with
`chromium` and checks `screenshot`.
"""

from __future__ import annotations

import argparse
import secrets
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from _common import results_path, say

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
# No sandbox (containers and CI run as root), and none of the browser's own network traffic:
# updates, sync, first-run pages, background fetches.
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--no-first-run", "--hide-scrollbars", "--force-device-scale-factor=1")
WIDTH = 1280  # CSS pixels: the width of a laptop screen


@contextmanager
def chromium(*, width: int = WIDTH, height: int = 900):
    """A headless Chromium under selenium, with a throwaway profile; closed on exit."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    with tempfile.TemporaryDirectory(prefix="layerfuse-chromium-") as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM  # with the driver's path too, selenium looks for nothing itself
        for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"):
            options.add_argument(flag)
        driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
        try:
            yield driver
        finally:
            driver.quit()


def screenshot(driver, url: str, out: str | Path, *, width: int = WIDTH) -> Path:
    """Load ``url`` and save the whole page (the window grown to its height) as a PNG at ``out``."""
    driver.get(url)
    # The window's size counts the browser's own frame (headless too): the page gets what is left.
    page, frame_width, frame_height = driver.execute_script(
        "return [document.documentElement.scrollHeight, outerWidth - innerWidth, outerHeight - innerHeight]")
    driver.set_window_size(width + frame_width, page + frame_height)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    if not driver.save_screenshot(str(out)):
        raise RuntimeError(f"no screenshot was written to {out}")
    return out


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", required=True, help="The cache root served.")
    parser.add_argument("--runs", action="append", default=[], help="A run folder shown on the page (repeatable).")
    parser.add_argument("--out", default=results_path("screenshot_serve_page", ".png"))
    parser.add_argument("--width", type=int, default=WIDTH)
    args = parser.parse_args(argv)
    from layerfuse.serve.state import ServerState
    from layerfuse.serve.threaded import BackgroundServer

    state = ServerState(root=Path(args.cache_dir), token=secrets.token_urlsafe(), runs=[Path(r) for r in args.runs])
    with BackgroundServer(state) as server, chromium(width=args.width) as driver:
        out = screenshot(driver, server.url + "/", args.out, width=args.width)
    say(f"wrote {out}")
    return out


if __name__ == "__main__":
    main(sys.argv[1:])
