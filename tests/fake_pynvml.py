"""A stand-in for nvidia-ml-py's `pynvml` module on a machine without an NVIDIA GPU, strict
where the real one is dangerous: nvmlDeviceGetHandleByPciBusId hands its argument to
`c_char_p`, which takes an int as an address (NVML then reads memory there and the process
dies), so here anything but a bus-id string fails loudly.

`state` is what the GPU is doing now: the test switches it between idle and busy; every
reading is logged with the state it saw."""

from __future__ import annotations

import re
import threading
import types

BUS_ID = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
IDLE = {"sm": 210, "mask": 0x1, "temp": 35, "power_mw": 60_000}  # GpuIdle
BUSY_THROTTLED = {"sm": 1410, "mask": 0x40, "temp": 91, "power_mw": 690_000}  # HwThermal


def make(state: dict | None = None) -> types.ModuleType:
    m = types.ModuleType("pynvml")
    m.state = dict(state or IDLE)
    m.readings = []  # the state each reading saw
    m.read_while_busy = threading.Event()
    m.handles = []
    m.NVML_CLOCK_SM, m.NVML_CLOCK_MEM, m.NVML_TEMPERATURE_GPU = 1, 2, 0
    m.nvmlClocksThrottleReasonGpuIdle = 0x1
    m.nvmlClocksThrottleReasonSwPowerCap = 0x4
    m.nvmlClocksThrottleReasonHwSlowdown = 0x8
    m.nvmlClocksThrottleReasonHwThermalSlowdown = 0x40
    m.nvmlClocksThrottleReasonAll = 0xFF
    m.nvmlClocksThrottleReasonNone = 0x0

    def handle_by_bus_id(bus_id):
        if isinstance(bus_id, str):  # convertStrBytes encodes str arguments
            bus_id = bus_id.encode()
        if not isinstance(bus_id, bytes) or not BUS_ID.match(bus_id.decode().lower()):
            raise AssertionError(f"c_char_p({bus_id!r}): NVML would read address {bus_id!r}")
        m.handles.append(bus_id.decode())
        return "handle"

    def read(field):
        def get(handle, *args):
            assert handle == "handle"
            if field == "mask":
                m.readings.append(dict(m.state))
                if m.state != IDLE:
                    m.read_while_busy.set()
            return m.state[field]
        return get

    m.nvmlInit = m.nvmlShutdown = lambda: None
    m.nvmlDeviceGetHandleByPciBusId = handle_by_bus_id
    m.nvmlDeviceGetCurrentClocksEventReasons = read("mask")
    m.nvmlDeviceGetClockInfo = lambda h, kind: read("sm")(h) if kind == 1 else 1593
    m.nvmlDeviceGetMaxClockInfo = lambda h, kind: 1980
    m.nvmlDeviceGetTemperature = read("temp")
    m.nvmlDeviceGetPowerUsage = read("power_mw")
    return m


class Props:
    """torch.cuda.get_device_properties(i) of a GPU at PCI 0000:1b:00.0: the ids are ints."""

    name = "NVIDIA H100 80GB HBM3"
    pci_domain_id, pci_bus_id, pci_device_id = 0, 27, 0
    uuid = "5b2a7c1e-0000-0000-0000-000000000000"
