"""`rnnexp --help`: the project's help page, through Hydra's help template
(conf/hydra/help/rnnexp.yaml). The groups a user picks are listed from conf/ by the
`rnnexp_help_groups` resolver, so the page cannot drift from the configs; internal groups
(the schema/ nodes, Hydra's own) stay out, and so do fields a user never sets."""

from __future__ import annotations

import textwrap

import yaml
from omegaconf import OmegaConf

from rnnexp.app.config_check import CONF_DIR, CONFIG_NAME, group_options

# What each group chooses, in the order a user meets them.
GROUPS = {
    "model": "the formulation: what is computed",
    "backend": "the execution stack: how it runs",
    "shape": "sizes, or set one: shape.hidden_size=1024",
    "device": "where it runs",
    "bench": "the timing policy",
    "sinks": "where results go, a list ([json,console]: no MLflow)",
}
# Added with `+group=option`: presets, and DeepBench's problems.
ADDED = {
    "experiment": "a preset sweep, +experiment=NAME",
}
WIDTH = 96
INDENT = 14


def defaults() -> dict[str, str]:
    """The default option of each group, from conf/config.yaml's defaults list."""
    data = yaml.safe_load((CONF_DIR / f"{CONFIG_NAME}.yaml").read_text()) or {}
    out = {}
    for item in data.get("defaults", []):
        if isinstance(item, dict):
            for key, value in item.items():
                if not key.startswith("override"):
                    out[key] = ", ".join(value) if isinstance(value, list) else str(value)
    return out


def _entry(group: str, what: str, options: list[str], default: str = "") -> str:
    head = f"  {group:<{INDENT - 2}}{what}" + (f"; default {default}" if default else "")
    body = textwrap.fill(", ".join(options), WIDTH, initial_indent=" " * INDENT,
                         subsequent_indent=" " * INDENT)
    return f"{head}\n{body}"


def groups_text() -> str:
    chosen = defaults()
    lines = [_entry(g, what, group_options(g), chosen.get(g, "")) for g, what in GROUPS.items()]
    lines += [_entry(f"+{g}", what, group_options(g)) for g, what in ADDED.items()]
    lines.append(f"  {'+deepbench':<{INDENT - 2}}one of Baidu DeepBench's 110 RNN problems\n"
                 f"{' ' * INDENT}e.g. +deepbench=train_lstm_h512_b16_t25; all of them: "
                 "+experiment=deepbench")
    return "\n".join(lines)


OmegaConf.register_new_resolver("rnnexp_help_groups", groups_text, replace=True)
