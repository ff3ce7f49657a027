"""How rnnexp's modules depend on each other: control goes one way, and each layer knows only
what it needs (read from the source, function-level imports included)."""

import ast
import re
import sys
from pathlib import Path
from typing import Optional

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


def _declared_imports(stage: str) -> set[str]:
    """The stages a stage's docstring says it imports (its "Imports (...):" paragraph)."""
    init = PACKAGE / stage.split(".")[1] / "__init__.py"
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    said = re.search(r"^Imports \(.*?\):\s*(.*?)\.?\s*$", doc, re.M | re.S)
    assert said, f"{init}: say what the stage owns and which stages it imports"
    return {f"rnnexp.{name.strip()}" for name in said.group(1).split(",")}


def _imported_stages(stage: str) -> set[str]:
    return {STAGES[stage_of(d)] for m in IMPORTS if stage_of_or_none(m) == stage
            for d in _internal(m) if d != "rnnexp" and STAGES[stage_of(d)] != stage}


def stage_of_or_none(module: str):
    return STAGES[stage_of(module)] if module not in ("rnnexp", "rnnexp.__main__") else None


@pytest.mark.parametrize("stage", STAGES[1:])
def test_every_stage_says_which_stages_it_imports_as_it_does(stage):
    assert _declared_imports(stage) == _imported_stages(stage)


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


# Modules admitted to use a third-party package's private names (`_`-attributes, `_`-modules),
# each for a reason there: TorchScript's executor and fuser flags and cuDNN's switches have
# no public setters; dispatch modes read an operator's schema; the noise flags use
# torch.utils.benchmark's own thresholds; Hydra's and OmegaConf's
# privates live in one module that a test pins to the releases it was read for.
PRIVATES_ADMITTED = {
    "torch": {"rnnexp.backends.jitflags", "rnnexp.backends.te_probe", "rnnexp.backends.vendor",
              "rnnexp.backends.inductor", "rnnexp.backends.torchscript",
              "rnnexp.machine.emulation", "rnnexp.machine.environment",
              "rnnexp.measure.rounding"},
    "hydra": {"rnnexp.config.hydra_private"},
    "omegaconf": {"rnnexp.config.hydra_private"},
}


def _root(node: ast.expr) -> Optional[str]:
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _privates_used(path: Path) -> set[str]:
    """The third-party privates a module uses, as "package: name"; "?" for a `_`-attribute
    of an object that is not the module's own (self, cls, its classes, rnnexp's names)."""
    tree = ast.parse(path.read_text())
    packages: dict[str, str] = {}  # a name bound by an import → its top-level package
    own = {n.name for n in ast.walk(tree) if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                packages[(alias.asname or alias.name).split(".")[0]] = alias.name.split(".")[0]
                if any(map(_private, alias.name.split("."))):
                    found.add(f"{alias.name.split('.')[0]}: {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            top = node.module.split(".")[0]
            for alias in node.names:
                packages[alias.asname or alias.name] = top
                if any(map(_private, [*node.module.split("."), alias.name])):
                    found.add(f"{top}: {node.module}.{alias.name}")
    for node in ast.walk(tree):  # a name bound to a package's attribute (`_C = torch._C`)
        if isinstance(node, ast.Assign) and (root := _root(node.value)) in packages:
            packages.update({t.id: packages[root] for t in node.targets
                             if isinstance(t, ast.Name)})
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            root = _root(node.value)
            if root in ("self", "cls") or root in own:
                continue
            package = packages.get(root or "", "?")
            if package != "rnnexp":
                found.add(f"{package}: {ast.unparse(node)}")
    return {f for f in found if f.split(":")[0] not in sys.stdlib_module_names}


def test_third_party_privates_only_where_admitted():
    """A package's privates can change in any release: each use is in a module admitted for
    that package above; a `_`-attribute of an object whose package the source does not say
    is admitted only in a module admitted for some package."""
    admitted_anywhere = set().union(*PRIVATES_ADMITTED.values())
    wrong = []
    for path in [*PACKAGE.rglob("*.py"), *(ROOT / "hydra_plugins").rglob("*.py")]:
        module = _name(path)
        for use in _privates_used(path):
            package = use.split(":")[0]
            allowed = admitted_anywhere if package == "?" else PRIVATES_ADMITTED.get(package,
                                                                                     set())
            if module not in allowed:
                wrong.append(f"{module} uses {use}")
    assert not wrong, wrong


def test_the_privates_check_sees_objects_modules_and_aliases(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("import os\nimport torch\nfrom hydra._internal.utils import x\n"
                      "from omegaconf import OmegaConf\n_C = torch._C\n"
                      "class A:\n    def f(self, cfg):\n        self._a = A._b\n"
                      "        return cfg._get_node('k'), _C._jit(), os._exit\n")
    assert _privates_used(source) == {
        "hydra: hydra._internal.utils.x", "torch: torch._C", "torch: _C._jit",
        "?: cfg._get_node"}


def test_hydra_is_used_through_its_public_api_but_in_one_module():
    """Hydra's privates can change in any release: the few without a public equivalent
    live in rnnexp/config/hydra_private.py (tests/config/test_hydra_private.py pins them)."""
    found = {_name(p) for p in [*PACKAGE.rglob("*.py"), *(ROOT / "hydra_plugins").rglob("*.py")]
             if any(u.startswith(("hydra:", "omegaconf:")) for u in _privates_used(p))}
    assert found == {"rnnexp.config.hydra_private"}, found


# Module state that a module's functions change: the process's own, each for a reason that
# makes it the process's rather than a run's (docs/architecture.md#data-flow). The signal
# disposition and the exit status are single objects (signals.PROCESS, exit_codes.PROCESS).
PROCESS_STATE = {
    "rnnexp.app.stopping": {"_watching"},  # threads that end this process's job processes
    "rnnexp.config.compositions": {"_BASES", "_GROUPS"},  # caches: compositions, groups
    "rnnexp.config.kernel_plugins": {"_REPORTED"},  # what is said once a process
    "rnnexp.measure.callgrind": {"_request_fn"},  # Valgrind's client request, made once
    "rnnexp.measure.timing": {"_frozen"},  # gc.freeze(), once a process
    "rnnexp.run.overlap": {"_pending"},  # threads of work overlapping a sweep's set-up
    "rnnexp.results.sinks.mlflow": {"_VIEW_SAVED"},  # cache: the stores' views saved
}
MUTATORS = {"append", "extend", "update", "clear", "pop", "add", "remove", "setdefault",
            "popitem", "move_to_end", "insert", "discard"}


def _module_state(path: Path) -> set[str]:
    """Module-level names that the module's functions rebind (`global`) or change in place."""
    tree = ast.parse(path.read_text())
    top = {t.id for n in tree.body if isinstance(n, (ast.Assign, ast.AnnAssign))
           for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
           if isinstance(t, ast.Name)}
    found = set()
    for f in ast.walk(tree):
        if not isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for n in ast.walk(f):
            if isinstance(n, ast.Global):
                found |= set(n.names) & top
            elif isinstance(n, ast.Subscript) and isinstance(n.ctx, (ast.Store, ast.Del)) \
                    and isinstance(n.value, ast.Name) and n.value.id in top:
                found.add(n.value.id)
            elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and \
                    n.func.attr in MUTATORS and isinstance(n.func.value, ast.Name) and \
                    n.func.value.id in top:
                found.add(n.func.value.id)
    return found


def test_module_state_is_the_processs_and_listed():
    found = {_name(p): state for p in [*PACKAGE.rglob("*.py"),
                                       *(ROOT / "hydra_plugins").rglob("*.py")]
             if (state := _module_state(p))}
    assert found == PROCESS_STATE


def test_the_module_state_check_sees_rebinding_and_changes_in_place(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("A = []\nB = 0\nC = {}\nD = (1,)\nE = []\n"
                      "def f():\n    global B\n    B = 1\n    A.append(1)\n    C['k'] = 2\n"
                      "    x = E[0]\n    return D, x\n")
    assert _module_state(source) == {"A", "B", "C"}
