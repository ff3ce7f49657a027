"""CUDA graphs (backend=inductor, mode=reduce-overhead/max-autotune): every iteration is
marked as a new step for CUDA graph trees, and nothing reads an output of an earlier replay.

On an H100 both modes failed with "accessing tensor output of CUDAGraphs that has been
overwritten by a subsequent run": a replay's outputs — and the gradients the replayed
backward wrote into `.grad` — live in memory the next replay reuses. Here a workload whose
forward returns one static buffer, overwritten at every call as a replay does, stands in
for the graph on the CPU.
"""

from __future__ import annotations

import torch

from rnnexp.backends.base import untimed_runs
from rnnexp.backends.inductor import Inductor
from rnnexp.measure.verify import results, verify
from rnnexp.models.eltwise import reference
from rnnexp.models.workload import Workload
from tests.backends.test_backends import CUDA_GPU
from tests.backends.test_gpu_paths import SMALL

CUDA = torch.device("cuda", 0)


def test_cudagraph_modes_on_a_gpu_mark_each_step():
    for mode in ("reduce-overhead", "max-autotune"):
        backend = Inductor(CUDA_GPU, CUDA, mode=mode)
        assert backend.step_marker() is torch.compiler.cudagraph_mark_step_begin
        assert backend.info()["cudagraph_step_marks"] is True
    assert Inductor(CUDA_GPU, CUDA, mode="default").step_marker() is None
    cpu = Inductor(CUDA_GPU, torch.device("cpu"), mode="reduce-overhead")
    assert cpu.step_marker() is None and cpu.info()["cudagraph_step_marks"] is False


class Replayed:
    """The eltwise formula as a replayed graph would run it: every call writes its outputs
    into the same two buffers, and a step mark poisons them (NaN) as the next replay's
    reuse of the memory would. The backward writes the leaves' gradients into static
    buffers too, as a replayed backward does."""

    def __init__(self, spec_seed=0):
        self.ref = reference(spec_for_tests(), dtype=torch.float32)
        self.hy = torch.empty_like(self.ref.inputs[2])
        self.cy = torch.empty_like(self.ref.inputs[2])
        self.grads = [torch.empty_like(p) for p in self.ref.params]
        self.log: list[str] = []

    def step_begin(self):
        self.log.append("step")
        for t in (self.hy, self.cy, *self.grads):
            t.fill_(float("nan"))

    def forward(self, *inputs):
        self.log.append("forward")
        with torch.enable_grad():
            leaves = [x.detach().requires_grad_() for x in inputs]
            hy, cy = self.ref.forward(*leaves)
        self._graph = (leaves, hy, cy, inputs)
        with torch.no_grad():
            self.hy.copy_(hy)
            self.cy.copy_(cy)
        return self.hy, self.cy

    def backward(self, outputs, grads):
        self.log.append("backward")
        leaves, hy, cy, inputs = self._graph
        got = torch.autograd.grad((hy, cy), leaves, grads)
        for param, buffer, g in zip(inputs, self.grads, got, strict=True):
            if param.grad is not None:
                buffer.add_(param.grad)  # accumulating reads the previous replay's gradient
            else:
                buffer.copy_(g)
            param.grad = buffer


def spec_for_tests():
    from rnnexp.models.workload import WorkloadSpec
    return WorkloadSpec(shape=SMALL, device=torch.device("cpu"), dtype=torch.float32, seed=0)


def replayed_workload() -> tuple[Workload, Replayed]:
    graph = Replayed()
    inputs = [p.detach().clone().requires_grad_() for p in graph.ref.params]
    workload = Workload(inputs=tuple(inputs), params=inputs, forward=graph.forward,
                        work=graph.ref.work, backward_setup=graph.ref.backward_setup,
                        backward=graph.backward,
                        reference=lambda dtype=torch.float64: reference(spec_for_tests(),
                                                                        dtype=dtype),
                        step_begin=graph.step_begin)
    return workload, graph


def test_untimed_runs_start_each_call_with_a_step_and_no_gradients():
    workload, graph = replayed_workload()
    untimed_runs(workload, torch.device("cpu"), 3)
    assert graph.log == ["step", "forward", "backward"] * 3
    # Without clearing, the second backward would have accumulated into the first's
    # (poisoned) gradient buffers.
    assert all(not torch.isnan(b).any() for b in graph.grads)


def test_verification_keeps_copies_of_the_outputs_not_the_replay_buffers():
    workload, graph = replayed_workload()
    kept = results(workload, grads=True)
    graph.step_begin()  # the next replay reuses the memory
    assert not any(torch.isnan(t).any() for _, t in kept)
    assert graph.log[:2] == ["step", "forward"]


def test_a_replayed_workload_verifies_and_times():
    from rnnexp.measure.timing import PerfCounterClock, measure

    workload, graph = replayed_workload()
    untimed_runs(workload, torch.device("cpu"), 2)
    result = verify(workload, torch.float32, backward=True)
    assert result.status == "passed", result.detail
    samples = measure(workload, warmup=2, iters=3, clock=PerfCounterClock())
    assert len(samples.forward_ms) == 3
    forwards = [i for i, e in enumerate(graph.log) if e == "forward"]
    assert all(graph.log[i - 1] == "step" for i in forwards)
