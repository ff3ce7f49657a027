"""The experiment's saved view in MLflow's UI: its runs table opens on rnnexp's key columns.

MLflow keeps the runs table's column choice in the browser and shows no metric until one is
picked. A view stored as the experiment tag `mlflow.sharedViewState.<key>` is what the link
`<ui>/#/experiments/<id>/runs?viewStateShareKey=<key>` opens (and, from MLflow 3.17, what
its *Views* menu lists by name). rnnexp stores one, `rnnexp`, that shows the figures without
a click:
- every job, newest first, and no sweep parent: MLflow folds a sweep's jobs under their
  parent (with `-` in every metric column) unless the table is filtered, so the view filters
  on `tags.rnnexp.kind = 'job'` — each job names its sweep in the `sweep` column;
- its status and the machine's flags first, then the key metrics (runs.KEY_METRICS, logged
  rounded to four digits), then the group params: what matters fits 1600 pixels;
- in the chart view, runs compared where they are comparable: a parallel-coordinates chart
  from shape through model and backend to the forward median (a shape's runs share its axis
  point), and the shares of the measured GEMM and copy peaks, which do not depend on the
  shape; no chart of a figure that does (MLflow would add one per metric).

The value is one JSON object read both ways: MLflow 3.17's saved-view envelope (`name`,
`createdAt`, `updatedAt` and `state`, the view as a JSON string) and, for earlier UIs, the
same view's fields at the top level (they parse the whole value and pick those).
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any, Optional
from urllib.parse import urlsplit

from rnnexp.results.sinks.mlflow.runs import KEY_METRICS, TAG_SWEEP

SHARE_KEY = "rnnexp"
TAG = f"mlflow.sharedViewState.{SHARE_KEY}"
# The hash of the view rnnexp last stored: the view is rewritten when rnnexp's own view
# changes (new key metrics), not when a person saved their changes over it in the UI.
FINGERPRINT_TAG = "rnnexp.view"
NAME = "rnnexp: key metrics"
# The config groups a person tells runs apart by (a sweep's parent carries what it swept).
GROUP_PARAMS = ("model", "backend", "shape", "device")
STATUS_TAGS = ("status", "env.flags")
# Only jobs: with any filter MLflow lists runs flat instead of folding them under parents.
JOBS_ONLY = "tags.`rnnexp.kind` = 'job'"
# The parallel chart's axes: comparable runs meet at their shape (one metric: the card is
# narrow, and the table has the backward median beside it).
PARALLEL_PARAMS = ("shape", "model", "backend")
PARALLEL_METRICS = ("fwd_median_ms",)
# Bars: shares of the device's measured peaks, comparable across shapes. MLflow adds a bar
# chart of every other metric not charted yet; the key metrics whose value depends on the
# shape are given one, deleted, so that none is drawn across shapes.
CHARTED = ("pct_peak_flops", "pct_peak_bandwidth")
# MLflow's limit on an experiment tag value: 5000 characters until a recent MLflow raised
# it to 20000, and a server may run an older MLflow than this client.
MAX_VALUE = 5000
# Where `make ui` (and `mlflow ui` by default) serves a database store.
UI_ADDRESS = "http://127.0.0.1:5000"
_SECTION = "rnnexp-key-metrics"


def column(kind: str, name: str) -> str:
    """MLflow's canonical column key: metrics.`fwd_median_ms`, params.`model`, ..."""
    return f"{kind}.`{name}`"


def columns() -> list[str]:
    """The status and flags, the key metrics in their order (the UI would sort them by name),
    the group params, and the sweep a job belongs to."""
    return [*(column("tags", t) for t in STATUS_TAGS),
            *(column("metrics", m) for m in KEY_METRICS),
            *(column("params", p) for p in GROUP_PARAMS),
            column("tags", TAG_SWEEP)]


# The columns MLflow 3.17's runs table always shows first, by their ids there: the run's
# name, when it started (with the fold of a sweep's jobs) and how long it took.
_LEADING = ("attributes.`Run Name`", "runDateAndNestInfo", "duration")


def widths() -> dict[str, int]:
    """Pixels that fit a job's name, each metric's name (the UI's default cuts
    `fwd_median_ms` short) and a machine's flags."""
    return {_LEADING[0]: 250, column("tags", "status"): 80, column("tags", "env.flags"): 120,
            **{column("metrics", m): 118 for m in KEY_METRICS}}


def _bar(metric: str) -> dict[str, Any]:
    return {"uuid": f"rnnexp-{metric}", "type": "BAR", "metricKey": metric,
            "metricSectionId": _SECTION, "runsCountToCompare": 20, "deleted": False,
            "isGenerated": False}


def _not_charted(metric: str) -> dict[str, Any]:
    """A deleted chart of `metric`: the UI adds none of its own (the view's tag has a
    length limit: only what the UI reads)."""
    return {"uuid": f"rnnexp-{metric}", "type": "BAR", "metricKey": metric, "deleted": True}


def _parallel() -> dict[str, Any]:
    return {"uuid": "rnnexp-by-shape", "type": "PARALLEL", "metricSectionId": _SECTION,
            "selectedParams": list(PARALLEL_PARAMS), "selectedMetrics": list(PARALLEL_METRICS),
            "runsCountToCompare": 100, "showAllRuns": True, "deleted": False,
            "isGenerated": False}


def state() -> dict[str, Any]:
    """The whole view, as the UI saves one: earlier UIs take the UI part as it is, so
    every field is given (MLflow's defaults where rnnexp has no choice)."""
    return {
        # Search facets: every active job, newest first.
        "searchFilter": JOBS_ONLY, "orderByKey": "attributes.`end_time`", "orderByAsc": False,
        "startTime": "ALL", "lifecycleFilter": "Active", "modelVersionFilter": "All Runs",
        "datasetsFilter": [],
        # The runs table.
        "selectedColumns": columns(), "columnOrder": [*_LEADING, *columns()],
        "columnWidths": widths(),
        "runsExpanded": {}, "runsPinned": [], "runsHidden": [], "runsVisibilityMap": {},
        "runsHiddenMode": "FIRST_20_RUNS", "viewMaximized": False, "runListHidden": False,
        "groupBy": None, "groupsExpanded": {}, "autoRefreshEnabled": True,
        # The chart view: the key metrics' section first, the medians charted in it.
        "compareRunCharts": [_parallel(), *(_bar(m) for m in CHARTED),
                             *(_not_charted(m) for m in KEY_METRICS if m not in CHARTED)],
        "compareRunSections": [
            {"uuid": _SECTION, "name": "Model metrics", "display": True, "isReordered": True},
            {"uuid": "rnnexp-system-metrics", "name": "System metrics", "display": True,
             "isReordered": False}],
        "isAccordionReordered": True, "useGroupedValuesInCharts": True,
        "hideEmptyCharts": True,
        "globalLineChartConfig": {"xAxisKey": "step", "lineSmoothness": 0,
                                  "selectedXAxisMetricKey": ""},
    }


def _state_text() -> str:
    return json.dumps(state(), separators=(",", ":"))


def fingerprint() -> str:
    return hashlib.sha256(_state_text().encode()).hexdigest()[:16]


# Read only by the UIs that read the envelope, or left out of the copy for earlier ones so
# that the whole value stays under MAX_VALUE (earlier UIs chart every metric, as by default).
_ENVELOPE_ONLY = ("columnOrder", "columnWidths", "compareRunCharts", "compareRunSections")


def tag_value(created_ms: int, updated_ms: int) -> str:
    earlier = {k: v for k, v in state().items() if k not in _ENVELOPE_ONLY}
    return json.dumps({"name": NAME, "createdAt": created_ms, "updatedAt": updated_ms,
                       "state": _state_text(), **earlier}, separators=(",", ":"))


def _created(value: Optional[str]) -> Optional[int]:
    try:
        created = json.loads(value or "").get("createdAt")
    except (ValueError, AttributeError):
        return None
    return created if isinstance(created, int) else None


def save(client, exp_id: str) -> bool:
    """Store the view unless the experiment holds rnnexp's current one (or a person's
    changes saved over it); True if it was written."""
    tags = client.get_experiment(exp_id).tags
    if TAG in tags and tags.get(FINGERPRINT_TAG) == fingerprint():
        return False
    now = int(time.time() * 1000)
    client.set_experiment_tag(exp_id, TAG, tag_value(_created(tags.get(TAG)) or now, now))
    client.set_experiment_tag(exp_id, FINGERPRINT_TAG, fingerprint())
    return True


def link(uri: str, exp_id: str, shared: bool = True) -> Optional[str]:
    """The address that opens the view (the plain runs table unless `shared`): on the
    tracking server itself for an HTTP store; on `mlflow ui`'s default address for a
    database store; None for Databricks (its workspace has other addresses)."""
    scheme = uri.split(":", 1)[0].lower()
    if scheme.startswith("databricks"):
        return None
    if scheme in ("http", "https"):
        parts = urlsplit(uri)
        host = parts.netloc.rpartition("@")[2]  # never the credentials
        base = f"{parts.scheme}://{host}{parts.path.rstrip('/')}"
    else:
        base = UI_ADDRESS
    runs = f"{base}/#/experiments/{exp_id}/runs"
    return f"{runs}?viewStateShareKey={SHARE_KEY}" if shared else runs
