"""The documentation site opens from disk as the README says (`make docs`, then
site/index.html): its menu leads to pages, not to folder listings, and its search finds
pages — in headless Chromium, from file://."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run([str(Path(sys.executable).parent / "mkdocs"), "build", "--strict",
                           "--site-dir", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    return out


def test_every_menu_link_is_a_page_of_the_site(site):
    """use_directory_urls: false — a link to quickstart/ would open a folder listing."""
    html = (site / "index.html").read_text()
    assert 'href="quickstart.html"' in html and 'href="quickstart/"' not in html
    assert (site / "quickstart.html").is_file() and not (site / "quickstart").exists()


@pytest.mark.browser
def test_the_site_navigates_and_searches_from_disk(site, page):
    page.goto((site / "index.html").as_uri())
    page.get_by_role("navigation").get_by_role("link", name="Quick start").first.click()
    page.wait_for_load_state()
    assert page.url.endswith("/quickstart.html")
    assert page.locator("h1").first.inner_text().startswith("Quick start")
    # Search: its index is a script beside the pages (Material's offline plugin), its worker
    # run by the iframe-worker shim kept beside them too: nothing comes from a network.
    page.locator("input.md-search__input").click()
    page.keyboard.type("roofline", delay=50)  # as a person types: the search reads keys
    results = page.locator(".md-search-result__item")
    results.first.wait_for(timeout=30_000)
    assert results.count() > 0
    assert "roofline" in results.first.inner_text().lower()
    assert not page.remote_requests, page.remote_requests  # nothing fetched from a network


def test_the_menu_is_by_kind_and_the_field_reference_is_built(site):
    """Tutorial, how-to guides, reference, explanation; the configuration fields page made
    from the schema at build, every field of the schema on it."""
    from tests.config.test_config_reference import schema_fields

    menu = re.sub(r"\s+", " ", (site / "index.html").read_text())
    for kind in ("Tutorial", "How-to guides", "Reference", "Explanation"):
        assert f" {kind} </" in menu, kind
    fields = (site / "config-fields.html").read_text()
    assert "config-fields:" not in fields  # every marker replaced
    for name in schema_fields():
        assert f"<code>{name}</code>" in fields, name
