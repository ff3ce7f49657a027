"""The HTML report of a sweep, a comparison or a history: one self-contained page that opens
offline from disk and from an MLflow run's artifacts.

- `model`: what a report shows, as data (cells, the status matrix, the comparison, the
  roofline, the environments, history series) — a history command passes its `Series`;
- `build`: that data from a sweep's runs and compare's `Comparison`;
- `figures`: the Plotly figures (forest plot, roofline, samples over rounds, series);
- `render`: the page, from Jinja templates (`templates/`), with Plotly's JavaScript inside;
- `sink`: the sweep's report at its end (`sinks=[...,report,...]`);
- `command`: `rnnexp report`, and the report `rnnexp compare` writes beside its chart.
"""
