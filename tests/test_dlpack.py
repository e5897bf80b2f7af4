"""Registering tensors: CPU tensors zero-copy through DLPack; reliable writes between them."""

from __future__ import annotations

import numpy as np
import pytest
from test_reliability_support import make_rpair

from sdr.dlpack import device_stage, dlpack_byte_view, is_device_array
from sdr.errors import ConfigError
from sdr.runtime import wait_all

torch = pytest.importorskip("torch")


def test_cpu_tensor_registers_in_place():
    pair = make_rpair()
    t = torch.zeros(1024, dtype=torch.float32)
    mr = pair.s.ctx.register(t)
    assert mr.length == 4096
    assert device_stage(mr) is None
    np.frombuffer(mr.view, dtype=np.float32)[3] = 7.5  # writes land in the tensor
    assert t[3].item() == 7.5


def test_reliable_write_between_cpu_tensors():
    pair = make_rpair("ec-mds", k=8, m=2)
    torch.manual_seed(0)
    src = torch.randn(64, 1000)
    dst = torch.zeros(64, 1000)
    rh = pair.r.post_recv(pair.r.ctx.register(dst))
    wh = pair.s.write(pair.s.ctx.register(src))
    wait_all([wh, rh], timeout=30)
    assert torch.equal(src, dst)


def test_non_contiguous_and_non_tensors_are_refused():
    pair = make_rpair()
    with pytest.raises(ConfigError, match="non-contiguous"):
        pair.s.ctx.register(torch.zeros(8, 8).t())
    with pytest.raises(ConfigError, match="DLPack tensor"):
        pair.s.ctx.register(object())
    assert dlpack_byte_view(object()) is None


def test_cpu_tensors_are_not_device_arrays():
    assert not is_device_array(torch.zeros(2))
    assert not is_device_array(np.zeros(2))
