"""The configuration reference (docs/config-fields.md) is generated from the schema when the
site is built (docs/hooks/config_reference.py): every field of every group — a field added
to the schema later included — with its default and its documentation; a field without
documentation fails the build."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import typing
from dataclasses import dataclass
from typing import Optional

import pytest
from omegaconf import OmegaConf

from rnnexp.config import schema
from tests.conftest import ROOT

PAGE = ROOT / "docs" / "config-fields.md"


def _load_hook():
    spec = importlib.util.spec_from_file_location(
        "config_reference", ROOT / "docs" / "hooks" / "config_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hook = _load_hook()


def _expected_text(value) -> str:
    """A default as OmegaConf gives it, written as on a command line."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if value == "???":
        return "required"
    if value == "":
        return '""'
    return str(value)


def schema_fields() -> dict[str, str]:
    """Full name → default text of every value field, read from the schema's dataclasses
    through OmegaConf (not through the hook): Config's own fields, each group's, and each
    group option's schema (backend=jit's executor, …)."""
    hints = typing.get_type_hints(schema.Config)
    found = {}

    def add(cls: type, prefix: str) -> None:
        values = OmegaConf.to_container(OmegaConf.structured(cls), enum_to_str=True)
        cls_hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if not dataclasses.is_dataclass(cls_hints[f.name]):
                found[f"{prefix}{f.name}"] = _expected_text(values[f.name])

    add(schema.Config, "")
    for f in dataclasses.fields(schema.Config):
        if dataclasses.is_dataclass(hints[f.name]):
            for cls in [hints[f.name], *schema._GROUP_SCHEMAS.get(f.name, {}).values()]:
                add(cls, f"{f.name}.")
    return found


def table_rows(markdown: str) -> dict[str, tuple[str, str, str]]:
    """Field name → (type, default, doc) of every row of the page's tables."""
    rows = {}
    for line in markdown.splitlines():
        match = re.match(r"^\| `([\w.]+)` \|", line)
        if match:
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            rows[match.group(1)] = (cells[1], cells[2], cells[3])
    return rows


def test_every_schema_field_is_in_the_reference_with_its_default_and_a_doc():
    rows = table_rows(hook.render(PAGE.read_text()))
    fields = schema_fields()
    assert "bench.window" in fields and "bench.python" in fields  # the walk reaches them
    assert "backend.executor" in fields and "deepbench.scale" in fields
    missing = sorted(set(fields) - set(rows))
    assert not missing, f"fields missing from the reference: {missing}"
    for name, default in fields.items():
        kind, shown, doc = rows[name]
        assert shown.replace("`", "").startswith(default), (name, shown, default)
        assert kind, name
        assert len(doc.split()) >= 3, f"{name}: {doc!r}"  # a sentence, not a placeholder
    assert not set(rows) - set(fields), "rows for fields the schema does not have"


def test_the_reference_reads_the_schema_comments():
    rows = table_rows(hook.render(PAGE.read_text()))
    assert rows["bench.window"][2].startswith("A sweep under rnnexp's launcher measures")
    assert rows["bench.iters"][1] == "`100`"
    assert rows["bench.python"][0] == "str or `null`"
    # An enum field: its values, and what each means where the enum says so.
    kind, default, doc = rows["bench.quiet"]
    assert kind == r"`warn` \| `wait` \| `refuse`" and default == "`warn`"
    assert "`refuse`: decline at once." in doc


@dataclass
class _Toy:
    documented: int = 1  # a comment on its line
    # A comment above it,
    # over two lines.
    above: Optional[float] = None
    attribute: bool = True
    """An attribute docstring."""
    undocumented: str = "x"


def test_a_field_without_documentation_fails():
    with pytest.raises(hook.ReferenceError, match=r"toy\.undocumented .*no documentation"):
        hook.rows(_Toy, "toy.")
    docs = hook.field_docs(_Toy)
    assert docs == {"documented": "a comment on its line",
                    "above": "A comment above it, over two lines.",
                    "attribute": "An attribute docstring."}


def test_every_group_has_its_place_on_the_page():
    page = PAGE.read_text()
    with pytest.raises(hook.ReferenceError, match="without a config-fields marker: bench"):
        hook.render(page.replace("<!-- config-fields: bench -->", ""))
    with pytest.raises(hook.ReferenceError, match="names no group: nope"):
        hook.render(page + "\n<!-- config-fields: nope -->\n")
