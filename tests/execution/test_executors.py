"""The pools that run jobs: the devices and threads each slot of the local pool gives its run."""

import pytest

from lit_resformer.execution.executors import LocalExecutor


def test_local_pool_slots():
    assert [s["CUDA_VISIBLE_DEVICES"] for s in LocalExecutor(devices=["4", "5", "6", "7", "8"], gpus_per_run=2).slots] == ["4,5", "6,7"]
    cpu = LocalExecutor(devices=[], cpu_slots=2).slots
    assert len(cpu) == 2 and all(s["CUDA_VISIBLE_DEVICES"] == "" for s in cpu)
    with pytest.raises(ValueError, match="gpus_per_run=4"):
        LocalExecutor(devices=["0", "1"], gpus_per_run=4)
