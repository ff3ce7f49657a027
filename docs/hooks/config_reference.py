"""MkDocs hook: the configuration reference, generated from rnnexp/config/schema.py at build.

A page places each group's table with a marker line, `<!-- config-fields: bench -->`
(`top` for the top-level fields). Each field's row gives its full name, its type, its default
and its documentation: an attribute docstring after it, else the comment on its line, else the
comment lines just above it — the schema's own comments, so the reference cannot lag behind
it. The build fails when a field has no documentation, when a marker names no group, or when a
group of the schema has no marker.

Hand-written rather than taken from a library: griffe (mkdocstrings') reads attribute
docstrings but not comments, Sphinx's analyser only `#:` comments; the schema documents its
fields with plain comments.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import inspect
import io
import re
import textwrap
import tokenize
import typing
from pathlib import Path
from typing import Any

MARKER = re.compile(r"^<!-- config-fields: ([a-z_]+) -->$", re.MULTILINE)
TOP = "top"


class ReferenceError(Exception):
    """The reference cannot be generated (a field without documentation, a marker without a
    group, a group without a marker)."""


# --- documentation of a class's fields, read from its source --------------------------------

def _comments(source: str) -> dict[int, tuple[str, bool]]:
    """Line → (comment text, whether the line holds only the comment)."""
    found = {}
    lines = source.splitlines()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            line = tok.start[0]
            alone = not lines[line - 1][:tok.start[1]].strip()
            found[line] = (tok.string.lstrip("#").strip(), alone)
    return found


def field_docs(cls: type) -> dict[str, str]:
    """Name → documentation of each field (or enum member) the class itself defines."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except OSError:  # made by a call (a functional Enum): no class body to read
        return {}
    comments = _comments(source)
    body = ast.parse(source).body[0].body  # type: ignore[attr-defined]
    docs = {}
    for i, node in enumerate(body):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            name = node.target.id
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and \
                isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
        else:
            continue
        after = body[i + 1] if i + 1 < len(body) else None
        if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) and \
                isinstance(after.value.value, str):
            docs[name] = " ".join(inspect.cleandoc(after.value.value).split())
            continue
        trailing = [comments[n][0] for n in range(node.lineno, node.end_lineno + 1)
                    if n in comments and not comments[n][1]]
        above, line = [], node.lineno - 1
        while line in comments and comments[line][1]:
            above.insert(0, comments[line][0])
            line -= 1
        text = " ".join(trailing or above).strip()
        if text:
            docs[name] = text
    return docs


def doc_of(cls: type, name: str) -> str:
    """The field's documentation, from the class in the hierarchy that defines it."""
    for klass in cls.__mro__:
        if name in vars(klass).get("__annotations__", {}):
            return field_docs(klass).get(name, "")
    return ""


# --- types and defaults as a user writes them ---------------------------------------------

def _enum_values(kind: type[enum.Enum]) -> str:
    return " | ".join(f"`{m.value}`" for m in kind)


def type_text(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union:
        rest = [a for a in args if a is not type(None)]
        text = " or ".join(type_text(a) for a in rest)
        return f"{text} or `null`" if len(rest) < len(args) else text
    if origin in (list, tuple):
        return f"list of {type_text(args[0])}" if args else "list"
    if origin is dict:
        return "mapping"
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _enum_values(hint)
    if hint is Any:
        return "any"
    return getattr(hint, "__name__", str(hint))


def value_text(value: Any) -> str:
    if value is None:
        return "`null`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, enum.Enum):
        return f"`{value.value}`"
    if value == "???":
        return "required (set by the group's option)"
    if isinstance(value, str):
        return f'`"{value}"`' if value == "" else f"`{value}`"
    if isinstance(value, dict):
        return "`{}`" if not value else f"`{value}`"
    return f"`{value}`"


def default_of(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return f.default_factory()  # type: ignore[misc]
    return "???"


def _enum_docs(hint: Any) -> str:
    """What each value of an enum-typed field means, from the enum's own comments."""
    kinds = [a for a in (typing.get_args(hint) or (hint,))
             if isinstance(a, type) and issubclass(a, enum.Enum)]
    if not kinds:
        return ""
    docs = field_docs(kinds[0])
    parts = [f"`{m.value}`: {docs[m.name].rstrip('.')}." for m in kinds[0]
             if docs.get(m.name)]
    return (" " + " ".join(parts)) if len(parts) == len(kinds[0]) else ""


# --- the tables --------------------------------------------------------------------------------

CODE_SPAN = re.compile(r"(`[^`]*`)")


def _cell(text: str) -> str:
    """Text for a table cell: outside code spans, the schema's comments are plain text
    (`_target_` is no emphasis, `<index>` no tag); a pipe ends no cell."""
    parts = CODE_SPAN.split(text)
    for i in range(0, len(parts), 2):
        parts[i] = re.sub(r"([\\`*_\[\]])", r"\\\1", parts[i]).replace("<", "&lt;")
    return "".join(parts).replace("|", "\\|")


def rows(cls: type, prefix: str, own_only: bool = False) -> list[tuple[str, str, str, str]]:
    """(name, type, default, doc) of each field of `cls` that is a value, not a group."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if own_only and f.name not in vars(cls).get("__annotations__", {}):
            continue
        hint = hints[f.name]
        if dataclasses.is_dataclass(hint):
            continue  # a group of its own
        doc = doc_of(cls, f.name)
        if not doc:
            raise ReferenceError(f"{prefix}{f.name} ({cls.__module__}.{cls.__qualname__}) "
                                 "has no documentation: add a comment on or above it")
        out.append((f"{prefix}{f.name}", type_text(hint), value_text(default_of(f)),
                    doc + _enum_docs(hint)))
    return out


def table(fields: list[tuple[str, str, str, str]]) -> str:
    lines = ["| field | type | default | what it does |", "|---|---|---|---|"]
    lines += [f"| `{name}` | {_cell(kind)} | {_cell(default)} | {_cell(doc)} |"
              for name, kind, default, doc in fields]
    return "\n".join(lines)


def _option_schemas(group: str, conf_dir: Path) -> dict[str, list[str]]:
    """Schema kind → the group's options whose defaults list names it (conf/<group>/*.yaml)."""
    found: dict[str, list[str]] = {}
    for path in sorted((conf_dir / group).glob("*.yaml")):
        for kind in re.findall(rf"/schema/{group}/(\w+)@", path.read_text()):
            found.setdefault(kind, []).append(path.stem)
    return found


def groups() -> dict[str, str]:
    """Each group's Markdown: `top` and every dataclass-typed field of the schema's Config."""
    from rnnexp.config import schema

    hints = typing.get_type_hints(schema.Config)
    out = {TOP: table(rows(schema.Config, ""))}
    for f in dataclasses.fields(schema.Config):
        node = hints[f.name]
        if not dataclasses.is_dataclass(node):
            continue
        parts = [table(rows(node, f"{f.name}."))]
        options = _option_schemas(f.name, schema.CONF_DIR)
        for kind, sub in schema._GROUP_SCHEMAS.get(f.name, {}).items():
            names = ", ".join(f"`{f.name}={o}`" for o in options.get(kind, [])) or \
                f"options naming `/schema/{f.name}/{kind}`"
            parts.append(f"Fields of {names} ({sub.__name__}):\n\n"
                         + table(rows(sub, f"{f.name}.", own_only=True)))
        out[f.name] = "\n\n".join(parts)
    return out


def render(markdown: str) -> str:
    """The page with each marker replaced by its group's table."""
    tables = groups()
    placed = MARKER.findall(markdown)
    unknown = sorted(set(placed) - set(tables))
    if unknown:
        raise ReferenceError(f"config-fields marker names no group: {', '.join(unknown)} "
                             f"(groups: {', '.join(tables)})")
    missing = [g for g in tables if g not in placed]
    if missing:
        raise ReferenceError("the schema's groups without a config-fields marker: "
                             + ", ".join(missing))
    return MARKER.sub(lambda m: tables[m.group(1)], markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if not MARKER.search(markdown):
        return markdown
    from mkdocs.exceptions import PluginError

    try:
        return render(markdown)
    except ReferenceError as err:
        raise PluginError(f"{page.file.src_path}: {err}") from None
