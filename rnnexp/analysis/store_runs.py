"""Every job run of an MLflow experiment whose recorded choices match, each read from the
results.json it logged: what `rnnexp history` reads as series.

The store narrows the search by the runs' params (each group choice and resolved config field
is one: rnnexp.results.sinks.mlflow.runs.params_of) and keeps runs that ended ok; the choices
are then checked on the results themselves the way `compare` checks a `--baseline`
(compare_select.parse_choice), so a misspelt field gets the same one-line answer.
"""

from __future__ import annotations

from typing import Iterator, Sequence

from rnnexp.analysis.compare_select import parse_choice
from rnnexp.analysis.sweeps import Run, read_runs
from rnnexp.errors import RnnexpError
from rnnexp.results.result import OK
from rnnexp.results.sinks.mlflow import runs as mlflow_runs

PAGE = 1000
HINT_RUNS = 200  # runs read to say what a choice that matches nothing could have been


def _quote(value: str) -> str:
    return "'" + value.replace("'", "\\'") + "'"


def store_filter(choices: Sequence[tuple[str, str]]) -> str:
    """The MLflow search that finds job runs that ended ok with these params."""
    parts = [f"tags.`{mlflow_runs.TAG_KIND}` = 'job'", f"tags.status = '{OK}'"]
    parts += [f"params.`{k}` = {_quote(v)}" for k, v in choices
              if not k.endswith("_target_")]  # never a param (params_of leaves them out)
    return " and ".join(parts)


def _search(client, exp_id: str, filter_string: str, limit: int) -> Iterator:
    token = None
    found = 0
    while found < limit:
        page = client.search_runs([exp_id], filter_string=filter_string,
                                  max_results=min(PAGE, limit - found), page_token=token,
                                  order_by=["attributes.start_time ASC"])
        yield from page
        found += len(page)
        token = page.token
        if not token or not page:
            return


def parse(texts: Sequence[str]) -> list[tuple[str, str]]:
    """KEY=VALUE texts as pairs (each checked on the runs later, by `select`)."""
    out = []
    for text in texts:
        key, sep, value = text.partition("=")
        if not sep or not key or not value:
            raise RnnexpError(f"'{text}': expected KEY=VALUE, e.g. model=lstm or "
                              "shape.seq_len=20")
        out.append((key, value))
    return out


def select(client, exp_id: str, choices: Sequence[tuple[str, str]],
           limit: int = 100_000) -> list[Run]:
    """The ok job runs whose config has every KEY=VALUE of `choices`."""
    runs = read_runs(client, _search(client, exp_id, store_filter(choices), limit))
    chosen = [r for r in runs if all(r.config.get(k) == v for k, v in choices)]
    if chosen:
        return chosen
    # Nothing matched: say why as compare does, from the runs the store holds.
    some = read_runs(client, _search(client, exp_id, store_filter([]), HINT_RUNS))
    if not some:
        raise RnnexpError("no job run that ended ok in this experiment — record some with "
                          "python -m rnnexp ... (sinks include mlflow)")
    for key, value in choices:
        parse_choice(f"{key}={value}", some, "selection", "the runs in the store")
        some = [r for r in some if r.config.get(key) == value]
    raise RnnexpError("no run in the store has all of "
                      + " ".join(f"{k}={v}" for k, v in choices))
