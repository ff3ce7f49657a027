"""bench.malloc: glibc's thresholds pinned in a measuring process, so that a configuration's
buffers come from the heap whatever the process allocated before (rnnexp.machine.malloc)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rnnexp.machine import malloc
from tests.conftest import TINY, load_results

pytestmark = pytest.mark.skipif(malloc.mmapped_bytes() is None, reason="needs glibc ≥ 2.33")

# A fresh interpreter: pinning lasts for a process's life.
PROBE = """
import json, sys, torch
from rnnexp.config.schema import MallocPolicy
from rnnexp.machine import malloc
said = malloc.apply(MallocPolicy(sys.argv[1]))
before = malloc.mmapped_bytes()
held = torch.empty(1 << 20).fill_(1)  # 4 MiB: above glibc's first threshold (128 KiB)
print(json.dumps({"said": said, "mmapped": malloc.mmapped_bytes() - before}))
"""


def probe(policy: str) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, policy], capture_output=True,
                          text=True, timeout=120, check=True)
    return json.loads(done.stdout)


def test_pinned_a_4_mib_buffer_comes_from_the_heap_and_under_glibc_s_own_it_is_mmapped():
    pinned, system = probe("pinned"), probe("system")
    assert pinned["said"] == "pinned: glibc mmap_threshold 32 MiB, trim_threshold 256 MiB"
    assert pinned["mmapped"] == 0
    assert system["said"] == "system" and system["mmapped"] >= 4 << 20


def test_a_process_that_pinned_them_says_so_when_asked_for_glibc_s_own():
    done = subprocess.run([sys.executable, "-c",
                           "from rnnexp.config.schema import MallocPolicy as P; "
                           "from rnnexp.machine import malloc; malloc.apply(P.pinned); "
                           "print(malloc.apply(P.system))"],
                          capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == ("pinned: glibc mmap_threshold 32 MiB, trim_threshold "
                                   "256 MiB (pinned earlier in this process)")


def test_the_result_records_the_policy_its_workers_ran_under(run_here, tmp_path):
    proc = run_here("model=lstm,gru", *TINY, "sinks=[json]", "bench.malloc=system",
                    multirun=True)
    assert proc.returncode == 0, proc.stderr
    for job in ("0", "1"):
        data = load_results(tmp_path / "sweep" / job)
        assert data["config"]["bench"]["malloc"] == "system"
        assert data["environment"]["malloc"] == "system"  # fresh workers, never pinned
