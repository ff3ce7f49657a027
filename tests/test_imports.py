"""How rnnexp's modules depend on each other: control goes one way, and each layer knows only
what it needs (read from the source, function-level imports included)."""

import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT

PACKAGE = ROOT / "rnnexp"


def _name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """Every rnnexp module and the modules it imports (rnnexp's and third parties')."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                deps.add(node.module)
                deps |= {f"{node.module}.{alias.name}" for alias in node.names}
            elif isinstance(node, ast.Import):
                deps |= {alias.name for alias in node.names}
        found[_name(path)] = deps
    return found


IMPORTS = _imports()


def _internal(module: str) -> set[str]:
    return {d for d in IMPORTS[module] if d in IMPORTS and d != module}


def test_no_module_imports_itself_through_others():
    def reaches(start: str, target: str) -> list[str]:
        stack, seen = [(start, [start])], set()
        while stack:
            module, path = stack.pop()
            for dep in _internal(module):
                if dep == target:
                    return [*path, dep]
                if dep not in seen:
                    seen.add(dep)
                    stack.append((dep, [*path, dep]))
        return []

    cycles = [" → ".join(path) for m in IMPORTS if (path := reaches(m, m))]
    assert not cycles, cycles


@pytest.mark.parametrize("module, forbidden", [
    # The plan decides and refuses before anything is built; it does not measure.
    ("rnnexp.measure.job", ("rnnexp.run.execution", "rnnexp.run.schedule", "rnnexp.measure.measurer",
                    "rnnexp.measure.isolation", "rnnexp.measure.timing")),
    # The timer knows only the Steps it times.
    ("rnnexp.measure.timing", ("rnnexp.models", "rnnexp.backends", "rnnexp.measure.job", "mlflow")),
])
def test_a_layer_does_not_reach_into_another(module, forbidden):
    assert not {d for d in IMPORTS[module] if d.startswith(forbidden)}


def test_models_know_nothing_of_tracking():
    for module in IMPORTS:
        if module.startswith(("rnnexp.models", "rnnexp.backends")):
            assert not {d for d in IMPORTS[module]
                        if d.startswith(("mlflow", "rnnexp.results.sinks", "hydra"))}, module


def _hydra_privates(folder: Path) -> dict[str, set[str]]:
    """Modules under `folder` that import from hydra._internal, and what."""
    found = {}
    for path in folder.rglob("*.py"):
        names = {node.module for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.ImportFrom) and node.module
                 and node.module.startswith("hydra._internal")}
        names |= {alias.name for node in ast.walk(ast.parse(path.read_text()))
                  if isinstance(node, ast.Import) for alias in node.names
                  if alias.name.startswith("hydra._internal")}
        if names:
            found[path.relative_to(ROOT).as_posix()] = names
    return found


def test_hydra_is_used_through_its_public_api_but_in_one_module():
    """Hydra's privates can change in any release: the few without a public equivalent
    live in rnnexp/config/hydra_private.py (tests/test_hydra_private.py pins them)."""
    found = {**_hydra_privates(PACKAGE), **_hydra_privates(ROOT / "hydra_plugins")}
    assert set(found) == {"rnnexp/config/hydra_private.py"}, found
