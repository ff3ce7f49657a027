"""Pages opened as a person opens them: Debian's Chromium, headless, driven by Playwright.

Chromium comes from Debian's package (`make browser` installs it with apt-get as root, and
this fixture runs it where Chromium is missing); Playwright never downloads a browser of its
own. Without either, the tests that use `browser` skip with one line saying why. Chromium
runs with the flags a closed network and a root user need: no sandbox, no GPU, none of its
background connections."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium() -> str:
    """The browser's path, installed (`make browser`) where it is missing and this is root;
    else the reason there is none."""
    if Path(CHROMIUM).is_file():
        return CHROMIUM
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        pytest.skip(f"no Chromium at {CHROMIUM}: run `make browser` as root (Debian's "
                    "chromium package)")
    done = subprocess.run(["make", "-s", "browser", f"CHROMIUM={CHROMIUM}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    if done.returncode != 0 or not Path(CHROMIUM).is_file():
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        pytest.skip(f"Chromium could not be installed (make browser: {last[0]})")
    return CHROMIUM


@pytest.fixture(scope="session")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="playwright is not installed (pip install -e .[dev])")
    path = chromium()
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, headless=True, args=FLAGS)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    """A fresh page (its own context: no state shared between tests) that records every
    request other than file: and data: ones, and every script error."""
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    page = context.new_page()
    page.remote_requests = []
    page.errors = []
    page.on("request", lambda r: None if r.url.startswith(("file:", "data:", "blob:"))
            else page.remote_requests.append(r.url))
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    yield page
    context.close()


def open_report(page, path: Path, timeout_ms: int = 60_000):
    """Open a report from disk and wait until its figures are drawn."""
    page.goto(Path(path).resolve().as_uri())
    page.wait_for_selector("body[data-ready='1']", timeout=timeout_ms)
    return page
