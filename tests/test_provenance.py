"""The device's peaks that a GPU run's MFU is stated against (lit_resformer.provenance): the datasheet table by the
names torch gives, the measured peak's arithmetic, and what a run's environment passes on."""

import time

import pytest
import torch

from lit_resformer.provenance import (
    MEASURED_PEAK_ENV,
    RUNS_SHARING_ENV,
    device_use,
    measure_peak_flops,
    spec_peak_flops,
)


@pytest.mark.parametrize(("device", "peak"), [
    ("NVIDIA H200", 989.4e12),  # the lent H200's name (docs/results/*/provenance)
    ("NVIDIA H100 80GB HBM3", 989.4e12),  # an H100 SXM
    ("NVIDIA H100 PCIe", 756e12),
    ("NVIDIA H200 NVL", 835e12),
    ("NVIDIA A100-SXM4-80GB", 312e12),
    ("CPU: AMD EPYC 7B13", None),
    ("Tesla T4", None),  # not listed: no MFU rather than a wrong one
    (None, None),
])
def test_the_datasheet_peak_is_found_by_the_name_torch_gives(device, peak):
    assert spec_peak_flops(device) == peak


def test_the_measured_peak_is_the_best_rounds_flops(monkeypatch):
    """With a clock that advances one second a reading, every timed call takes one second: the peak is the largest
    size's FLOPs per call (2 n^3 per product), so a wrong count or a warm-up round timed would show."""
    ticks = iter(range(10**6))
    monkeypatch.setattr(time, "perf_counter", lambda: float(next(ticks)))
    products = []
    monkeypatch.setattr(torch, "mm", lambda a, b, out: products.append(a.shape[0]))
    peak = measure_peak_flops("cpu", sizes=(16, 32), rounds=3, dtype=torch.float32, call_flops=4 * 2 * 16**3)
    # 16: 4 products a call; 32: max(1, round(4 * 16^3 / 32^3)) = 1 product; each size 1 warm-up + 3 timed calls
    assert products == [16] * 16 + [32] * 4
    assert peak == max(4 * 2 * 16**3, 2 * 32**3)


def test_a_real_measurement_on_this_machine_is_a_finite_rate():
    peak = measure_peak_flops("cpu", sizes=(64,), rounds=2, dtype=torch.float32, call_flops=2 * 64**3)
    assert 1e6 < peak < 1e15


def test_a_runs_environment_passes_on_the_measured_peak_and_the_sharing():
    assert device_use({}) == {"measured_peak_flops": None, "runs_sharing_device": None}
    assert device_use({MEASURED_PEAK_ENV: "7.764e+14", RUNS_SHARING_ENV: "10"}) == \
        {"measured_peak_flops": 7.764e14, "runs_sharing_device": 10}
