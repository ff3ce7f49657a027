"""The experiment's saved view in MLflow's UI: its runs table opens on rnnexp's key columns.

MLflow keeps the runs table's column choice in the browser and shows no metric until one is
picked. A view stored as the experiment tag `mlflow.sharedViewState.<key>` is what the link
`<ui>/#/experiments/<id>/runs?viewStateShareKey=<key>` opens (and, from MLflow 3.17, what
its *Views* menu lists by name). rnnexp stores one, `rnnexp`: the group params and the key
metrics (runs.KEY_METRICS) as columns, newest first, sweeps with their jobs folded in
beneath them, and bar charts of the forward and backward medians first in the chart view.

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

from rnnexp.results.sinks.mlflow.runs import KEY_METRICS

SHARE_KEY = "rnnexp"
TAG = f"mlflow.sharedViewState.{SHARE_KEY}"
# The hash of the view rnnexp last stored: the view is rewritten when rnnexp's own view
# changes (new key metrics), not when a person saved their changes over it in the UI.
FINGERPRINT_TAG = "rnnexp.view"
NAME = "rnnexp: key metrics"
# The config groups a person tells runs apart by (a sweep's parent carries what it swept).
GROUP_PARAMS = ("model", "backend", "shape", "device")
STATUS_TAGS = ("status", "env.flags")
CHARTED = ("fwd_median_ms", "bwd_median_ms")
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
    """The key metrics in their order (the UI would sort them by name), then the params and
    the status."""
    return [*(column("metrics", m) for m in KEY_METRICS),
            *(column("params", p) for p in GROUP_PARAMS),
            *(column("tags", t) for t in STATUS_TAGS)]


# The columns MLflow 3.17's runs table always shows first, by their ids there: the run's
# name, when it started (with the fold of a sweep's jobs) and how long it took.
_LEADING = ("attributes.`Run Name`", "runDateAndNestInfo", "duration")


def widths() -> dict[str, int]:
    """Pixels that fit each metric's name (the UI's default cuts `fwd_median_ms` short), and
    a sweep's name up to its date."""
    return {_LEADING[0]: 280, **{column("metrics", m): 150 for m in KEY_METRICS}}


def _bar(metric: str) -> dict[str, Any]:
    return {"uuid": f"rnnexp-{metric}", "type": "BAR", "metricKey": metric,
            "metricSectionId": _SECTION, "runsCountToCompare": 20, "deleted": False,
            "isGenerated": False}


def state() -> dict[str, Any]:
    """The whole view, as the UI saves one: earlier UIs take the UI part as it is, so
    every field is given (MLflow's defaults where rnnexp has no choice)."""
    return {
        # Search facets: every active run, newest first.
        "searchFilter": "", "orderByKey": "attributes.start_time", "orderByAsc": False,
        "startTime": "ALL", "lifecycleFilter": "Active", "modelVersionFilter": "All Runs",
        "datasetsFilter": [],
        # The runs table.
        "selectedColumns": columns(), "columnOrder": [*_LEADING, *columns()],
        "columnWidths": widths(),
        "runsExpanded": {}, "runsPinned": [], "runsHidden": [], "runsVisibilityMap": {},
        "runsHiddenMode": "FIRST_20_RUNS", "viewMaximized": False, "runListHidden": False,
        "groupBy": None, "groupsExpanded": {}, "autoRefreshEnabled": True,
        # The chart view: the key metrics' section first, the medians charted in it.
        "compareRunCharts": [_bar(m) for m in CHARTED],
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


# Read only by the UIs that read the envelope: left out of the copy for earlier ones.
_ENVELOPE_ONLY = ("columnOrder", "columnWidths")


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
