"""The report as one HTML file: Jinja templates (templates/) filled from the report's data,
the figures as Plotly JSON, Plotly's own JavaScript inside the file.

The page must open offline and inside MLflow's artifact view, which shows an HTML artifact
in a sandboxed frame from a blob URL where no relative path resolves: everything is in the
file. Plotly's bundle is 4.8 MB; gzip-compressed (base64) it is 2 MB, and the page unpacks
it with the browser's own DecompressionStream. Every cell's details are packed the same way:
a 1,000-cell report stays a few MB and its tables paint before anything is unpacked. The
compressed bundle is cached per Plotly version (beside the roofline cache): compressing it
costs about a second, reading it a few milliseconds.
"""

from __future__ import annotations

import base64
import functools
import gzip
import os
from pathlib import Path

from rnnexp.analysis.report import figures
from rnnexp.analysis.report.model import Report
from rnnexp.results.cache import cache_dir


@functools.lru_cache(maxsize=1)
def environment():
    import jinja2
    from plotly.io.json import to_json_plotly

    # Compiling the templates costs a third of a second of a sweep's end: their bytecode is
    # cached beside Plotly's bundle (Jinja checks it against the templates' sources).
    folder = cache_dir() / "report" / "jinja"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        bytecode = jinja2.FileSystemBytecodeCache(str(folder))
    except OSError:
        bytecode = None
    env = jinja2.Environment(loader=jinja2.PackageLoader("rnnexp.analysis.report", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined,
                             bytecode_cache=bytecode)
    # `tojson` writes figures through Plotly's encoder (NaN → null, numpy arrays) and keeps
    # them safe inside <script> (Jinja escapes <, >, & and ').
    env.policies["json.dumps_function"] = lambda obj, **_: to_json_plotly(obj)
    env.policies["json.dumps_kwargs"] = {}
    return env


def pack(text: str, level: int = 6) -> str:
    """gzip, then base64: what the page's `unpack` reads back."""
    return base64.b64encode(gzip.compress(text.encode(), compresslevel=level, mtime=0)).decode()


def plotly_version() -> str:
    import plotly

    return plotly.__version__


@functools.lru_cache(maxsize=1)
def plotly_js() -> str:
    """Plotly's JavaScript, packed; read from the cache when this Plotly's is there."""
    path = cache_dir() / "report" / f"plotly-{plotly_version()}.min.js.gz.b64"
    try:
        return path.read_text()
    except OSError:
        pass
    from plotly.offline import get_plotlyjs

    packed = pack(get_plotlyjs(), level=9)
    try:  # written whole or not at all: a reader never sees half of it
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(packed)
        tmp.replace(path)
    except OSError:
        pass  # an unwritable cache costs the compression on every report
    return packed


def html(report: Report) -> str:
    env = environment()
    details = env.get_template("details.html.j2").render(
        cells=report.cells, charts=figures.cell_charts(report.cells))
    return env.get_template("report.html.j2").render(
        report=report, figures=figures.all_of(report), details=pack(details),
        plotly_js=plotly_js(), plotly_version=plotly_version())


def write(report: Report, path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(html(report), encoding="utf-8")
    return path
