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


# The stages, lowest first: a module imports only from its own stage and those below it
# (each subpackage's docstring says the same). rnnexp.errors sits under them all.
STAGES = ["rnnexp.errors", "rnnexp.config", "rnnexp.machine", "rnnexp.models",
          "rnnexp.backends", "rnnexp.measure", "rnnexp.results", "rnnexp.run",
          "rnnexp.analysis", "rnnexp.app"]


def stage_of(module: str) -> int:
    for i, stage in enumerate(STAGES):
        if module == stage or module.startswith(stage + "."):
            return i
    raise AssertionError(f"{module} is in no stage: put it in one of {STAGES}")


def test_every_module_sits_in_a_stage():
    for module in IMPORTS:
        if module not in ("rnnexp", "rnnexp.__main__"):
            stage_of(module)


def test_no_stage_imports_a_later_one():
    upward = [f"{m} imports {d}" for m in IMPORTS if m not in ("rnnexp", "rnnexp.__main__")
              for d in _internal(m) if d != "rnnexp" and stage_of(d) > stage_of(m)]
    assert not upward, upward


def test_every_stage_says_what_it_owns_and_may_import():
    for stage in STAGES[1:]:
        init = PACKAGE / stage.split(".")[1] / "__init__.py"
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and "import" in doc.lower(), f"{init}: say what it owns and may import"


@pytest.mark.parametrize("module, forbidden", [
    # The plan decides and refuses before anything is built; it does not measure.
    ("rnnexp.measure.job", ("rnnexp.run", "rnnexp.measure.measurer",
                            "rnnexp.measure.isolation", "rnnexp.measure.timing")),
    # The timer knows only the Steps it times.
    ("rnnexp.measure.timing", ("rnnexp.models", "rnnexp.backends", "rnnexp.measure.job",
                               "mlflow")),
])
def test_a_layer_does_not_reach_into_another(module, forbidden):
    assert not {d for d in IMPORTS[module] if d.startswith(forbidden)}


def test_models_know_nothing_of_tracking():
    for module in IMPORTS:
        if module.startswith(("rnnexp.models", "rnnexp.backends")):
            assert not {d for d in IMPORTS[module]
                        if d.startswith(("mlflow", "rnnexp.results", "hydra"))}, module


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
    live in rnnexp/config/hydra_private.py (tests/config/test_hydra_private.py pins them)."""
    found = {**_hydra_privates(PACKAGE), **_hydra_privates(ROOT / "hydra_plugins")}
    assert set(found) == {"rnnexp/config/hydra_private.py"}, found
