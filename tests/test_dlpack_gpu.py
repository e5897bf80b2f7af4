"""GPU arrays registered through pinned staging: reliable writes from and into GPU memory.

Skipped without CuPy and a CUDA device (marker ``gpu``).
"""

from __future__ import annotations

import numpy as np
import pytest
from test_reliability_support import make_rpair

from sdr.backends.gpu.codecs import gpu_available
from sdr.dlpack import device_stage, is_device_array
from sdr.runtime import wait_all

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu_available(), reason="needs CuPy and a CUDA device"),
]


def test_cupy_array_is_staged_in_pinned_memory():
    import cupy as cp

    pair = make_rpair()
    x = cp.arange(256, dtype=cp.float32)
    mr = pair.s.ctx.register(x)
    stage = device_stage(mr)
    assert is_device_array(x) and stage is not None
    assert np.array_equal(np.frombuffer(mr.view, dtype=np.float32), np.arange(256))


def test_reliable_write_from_cupy_into_a_torch_cuda_tensor():
    import cupy as cp

    torch = pytest.importorskip("torch")
    pair = make_rpair("ec-mds", k=8, m=2)
    src = cp.random.default_rng(1).random(100_000, dtype=cp.float32)
    dst = torch.zeros(100_000, dtype=torch.float32, device="cuda")
    rh = pair.r.post_recv(pair.r.ctx.register(dst))
    mr = pair.s.ctx.register(src)
    src *= 2  # changed after registration: write() refreshes the staged copy
    wh = pair.s.write(mr)

    wait_all([wh, rh], timeout=60)
    assert np.array_equal(dst.cpu().numpy(), cp.asnumpy(src))
