"""Kernel plugins: models contributed by packages installed beside rnnexp.

A package declares a kernel under the entry point group `rnnexp.kernels`; the entry point
names a `Kernel`. rnnexp stores each installed kernel's model config in Hydra's ConfigStore
(group `model`, under the kernel's name), so `model=<name>` and `-m model=lstm,<name>`
compose like the built-in models. The kernel's factory is admitted by the target allowlist
(rnnexp.config.targets) because an installed package declares it here — a config that names any
other callable of that package is refused like any callable outside rnnexp.

Discovery imports only what the entry points name: a plugin keeps its declaration cheap
(no extension built or loaded at import) and does the heavy work in its factory.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import sys
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, Callable, Mapping, Optional

from rnnexp.errors import ConfigError, UnsupportedError

GROUP = "rnnexp.kernels"
# What a kernel computes: the recurrences rnnexp has a float64 reference and work counts for.
COMPUTES = {"lstm": "LSTM", "gru": "GRU"}
# Who builds the reference: rnnexp's nn.LSTM / nn.GRU ("native"), or the factory ("own").
REFERENCES = ("native", "own")
# The backends that run a model as it is (the vendor RNN library on or off: it does not
# touch a plugin's kernel); the others script (jit, te) or compile (inductor) it.
AS_IS = ("aten", "cudnn", "miopen")
FORMS = ("module", "eager")
DEVICES = ("cpu", "cuda")
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Kernel:
    """One kernel a plugin declares (the object its `rnnexp.kernels` entry point names).

    With `reference="native"` the kernel computes what nn.LSTM / nn.GRU (`computes`) do,
    takes their call — `forward(x, (h0, c0))` → `(output, (h_n, c_n))`, or `h0` / `h_n` for
    a GRU — and their weights: `factory(spec, weights, **options)` gets the seeded
    parameters in nn.LSTM's order and layout (w_ih, w_hh, b_ih, b_hh per layer, gates
    i, f, g, o) as `nn.Parameter`s on the job's device and dtype, and returns the forward
    callable (an nn.Module or a function). rnnexp builds the inputs, the float64 reference
    and the work counts. A kernel that keeps its weights in another layout gives `layout`: a
    differentiable function from nn.LSTM's parameters to its own, which the factory then
    receives instead; gradients are mapped back through it for verification only.

    With `reference="own"`, `factory(spec, **options)` returns a whole
    `rnnexp.models.workload.Workload` (inputs, parameters, work counts and a `reference`), as a
    built-in model's factory does; `computes` then sizes its memory and run-time estimates.
    """

    name: str  # model=<name>
    factory: Callable[..., Any]
    computes: str  # "lstm" | "gru"
    reference: str = "native"
    layout: Optional[Callable[[list], list]] = None
    # The rnnexp backends the kernel runs under (backend=auto picks aten on the CPU, cudnn
    # on an NVIDIA GPU, miopen on an AMD GPU).
    backends: tuple[str, ...] = AS_IS
    devices: tuple[str, ...] = DEVICES
    # The dtypes it supports (float32, float16, bfloat16); None: every dtype of the device.
    dtypes: Optional[tuple[str, ...]] = None
    # "module": run as is; "eager": Python that backend=inductor may compile.
    form: str = "module"
    # Default options of the factory, written into the model config (model.build.<option>).
    options: Mapping[str, Any] = field(default_factory=dict)
    # "" when the kernel can run in this environment, else why not (a library that is not
    # installed); asked at plan time, before anything is built.
    requires: Optional[Callable[[], str]] = None
    description: str = ""

    def __post_init__(self) -> None:
        def bad(what: str, problem: str) -> ConfigError:
            return ConfigError(f"{GROUP}: kernel {self.name!r}: {what}", problem)

        if not isinstance(self.name, str) or not NAME.fullmatch(self.name):
            raise bad("name", "must be an identifier (letters, digits, _)")
        if not callable(self.factory):
            raise bad("factory", "must be a function")
        if self.computes not in COMPUTES:
            raise bad("computes", f"'{self.computes}' is not one of {', '.join(COMPUTES)}")
        if self.reference not in REFERENCES:
            raise bad("reference", f"'{self.reference}' is not one of {', '.join(REFERENCES)}")
        if self.layout is not None and self.reference != "native":
            raise bad("layout", "maps nn.LSTM's weights: only with reference='native'")
        if self.form not in FORMS:
            raise bad("form", f"'{self.form}' is not one of {', '.join(FORMS)}")
        for name in self.devices:
            if name not in DEVICES:
                raise bad("devices", f"'{name}' is not one of {', '.join(DEVICES)}")

    @property
    def factory_path(self) -> str:
        """Where the factory is defined: the `_target_` its model config names."""
        return f"{self.factory.__module__}.{self.factory.__qualname__}"

    def model_config(self) -> dict[str, Any]:
        """The `model` group's node for this kernel (what conf/model/<name>.yaml holds for a
        built-in)."""
        node: dict[str, Any] = {"build": {"_target_": self.factory_path, **self.options},
                                "family": self.computes, "form": self.form}
        if self.dtypes is not None:
            node["dtypes"] = list(self.dtypes)
        return node

    def check(self, model_name: str, device: str, backend: str, dtype: str) -> None:
        """Refuse in one line, before anything is built, where the plugin says it cannot
        run: its library missing, another device, a backend or dtype it does not declare."""
        where = f"model={model_name}"
        why = self.requires() if self.requires is not None else ""
        if why:
            raise UnsupportedError(f"{where} cannot run here: {why}")
        if device not in self.devices:
            raise UnsupportedError(f"{where} runs on {' or '.join(self.devices)} only (its "
                                   f"plugin says so); device is {device} — use "
                                   f"device={self.devices[0]}")
        if backend not in self.backends:
            raise UnsupportedError(f"{where} runs under backend {', '.join(self.backends)} "
                                   f"only (its plugin says so), not backend={backend} — use "
                                   f"backend={self.backends[0]}")
        if self.dtypes is not None and dtype not in self.dtypes:
            raise UnsupportedError(f"{where} supports dtype {', '.join(self.dtypes)} only (its "
                                   f"plugin says so), not {dtype} — use dtype={self.dtypes[0]}")


@dataclass(frozen=True)
class Discovery:
    kernels: dict[str, Kernel]  # by name
    problems: tuple[str, ...]  # one line per entry point that could not be used


def _entry_points() -> list[metadata.EntryPoint]:
    return list(metadata.entry_points(group=GROUP))


@functools.cache
def discover() -> Discovery:
    """The kernels installed here, each loaded once per process (cache_clear() after the
    path changes). An entry point that fails to load, declares no Kernel or reuses a name
    is left out with one line saying why; it never stops rnnexp."""
    from rnnexp.config.schema import CONF_DIR

    builtin = {p.stem for p in (CONF_DIR / "model").glob("*.yaml")}
    kernels: dict[str, Kernel] = {}
    problems: list[str] = []
    for ep in _entry_points():
        where = f"{GROUP} entry point {ep.name} = {ep.value}"
        try:
            kernel = ep.load()
        except Exception as err:  # a plugin's import error is the plugin's, reported
            problems.append(f"{where}: cannot be loaded ({type(err).__name__}: {err})")
            continue
        if not isinstance(kernel, Kernel):
            problems.append(f"{where}: names a {type(kernel).__name__}, not an "
                            "rnnexp.config.kernel_plugins.Kernel")
        elif kernel.name in builtin:
            problems.append(f"{where}: the name {kernel.name} is a built-in model's; "
                            "rename the kernel")
        elif kernel.name in kernels:
            problems.append(f"{where}: the name {kernel.name} is taken by "
                            f"{kernels[kernel.name].factory_path}; rename one kernel")
        elif any(k.factory_path == kernel.factory_path for k in kernels.values()):
            # A model config names its kernel by the factory: one factory, one kernel.
            problems.append(f"{where}: its factory {kernel.factory_path} is another "
                            "kernel's; give each kernel its own factory")
        else:
            kernels[kernel.name] = kernel
    return Discovery(kernels, tuple(problems))


def installed() -> dict[str, Kernel]:
    return discover().kernels


def declaring(target: Any) -> Optional[Kernel]:
    """The installed kernel whose factory `target` (a `_target_` path) is, if any."""
    if not isinstance(target, str) or target.startswith("rnnexp."):
        return None  # a built-in model: no need to look at what is installed
    return next((k for k in installed().values() if k.factory_path == target), None)


def of_model(build: Any) -> Optional[Kernel]:
    """The kernel behind a model's `build` node, or None for a built-in model."""
    target = getattr(build, "_target_", None) if dataclasses.is_dataclass(build) else \
        build.get("_target_")
    return declaring(target)


def factory_args(build: Any) -> tuple[None, ...]:
    """Placeholders for what the factory takes besides its options (the spec; and the
    weights, for a kernel with rnnexp's reference), for checking options by signature."""
    kernel = of_model(build)
    return (None, None) if kernel is not None and kernel.reference == "native" else (None,)


_REPORTED: set[str] = set()  # said once per process


def register(report: Callable[[str], None] = lambda line: print(line, file=sys.stderr)
             ) -> None:
    """Store every installed kernel's model config as the `model` option of its name, and
    report, one line each, the entry points left out."""
    from hydra.core.config_store import ConfigStore

    found = discover()
    for line in found.problems:
        if line not in _REPORTED:
            _REPORTED.add(line)
            report(f"rnnexp: kernel plugin skipped — {line}")
    cs = ConfigStore.instance()
    for name, kernel in found.kernels.items():
        cs.store(group="model", name=name, node=kernel.model_config(),
                 provider=kernel.factory.__module__.split(".")[0])
