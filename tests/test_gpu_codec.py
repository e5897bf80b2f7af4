"""The GPU erasure codec on a GPU: parity bit-identical to the CPU codecs, decode round trips.

Skipped without CuPy and a CUDA device (marker ``gpu``).
"""

from __future__ import annotations

import numpy as np
import pytest

from sdr.backends.gpu.codecs import gpu_available
from sdr.codecs import TooManyLosses, get_codec

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not gpu_available(), reason="needs CuPy and a CUDA device"),
]


def _data(subs: int, k: int, cs: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (subs, k, cs), dtype=np.uint8)


def _cpu_parity(name: str, data: np.ndarray, m: int) -> np.ndarray:
    subs, k, cs = data.shape
    codec = get_codec(name, k, m, cs)
    return np.stack([np.stack(codec.encode(np.ascontiguousarray(d))) for d in data])


@pytest.mark.parametrize(
    ("k", "m", "cs", "subs"), [(32, 8, 65536, 3), (4, 2, 64, 5), (10, 4, 4096, 2)]
)
def test_rs_parity_is_bit_identical_to_isal(k, m, cs, subs):
    import cupy as cp

    from sdr.backends.gpu.codecs import GpuRSCodec

    data = _data(subs, k, cs, seed=k)
    parity = GpuRSCodec(k, m, cs).encode(cp.asarray(data)).get()
    assert np.array_equal(parity, _cpu_parity("mds", data, m))


@pytest.mark.parametrize("seed", range(8))
def test_rs_decode_rebuilds_up_to_m_losses(seed):
    import cupy as cp

    from sdr.backends.gpu.codecs import GpuRSCodec

    k, m, cs, subs = 32, 8, 4096, 3
    rng = np.random.default_rng(seed)
    codec = GpuRSCodec(k, m, cs)
    data = _data(subs, k, cs, seed=seed)
    chunks = cp.concatenate([cp.asarray(data), codec.encode(cp.asarray(data))], axis=1)
    present = np.ones(k + m, dtype=bool)
    lost = rng.choice(k + m, size=int(rng.integers(1, m + 1)), replace=False)
    present[lost] = False
    damaged = chunks.copy()
    damaged[:, lost] = 0
    rebuilt = codec.decode(damaged, present.tolist())
    assert rebuilt == sorted(int(i) for i in lost if i < k)
    assert np.array_equal(damaged[:, :k].get(), data)


def test_rs_more_than_m_losses_raise():
    import cupy as cp

    from sdr.backends.gpu.codecs import GpuRSCodec

    codec = GpuRSCodec(4, 2, 64)
    with pytest.raises(TooManyLosses):
        codec.decode(cp.zeros((6, 64), dtype=cp.uint8), [False, False, False, True, True, True])


def test_xor_parity_and_decode_match_cpu():
    import cupy as cp

    from sdr.backends.gpu.codecs import GpuXORCodec

    k, m, cs = 32, 8, 65536
    data = _data(2, k, cs, seed=5)
    codec = GpuXORCodec(k, m, cs)
    parity = codec.encode(cp.asarray(data))
    assert np.array_equal(parity.get(), _cpu_parity("xor", data, m))
    chunks = cp.concatenate([cp.asarray(data), parity], axis=1)
    present = [True] * (k + m)
    for i in (0, 9, 31):  # groups 0, 1, 7: one loss each
        present[i] = False
        chunks[:, i] = 0
    assert codec.decode(chunks, present) == [0, 9, 31]
    assert np.array_equal(chunks[:, :k].get(), data)
    present[16] = False  # a second loss in group 0
    with pytest.raises(TooManyLosses):
        codec.decode(chunks, present)


def test_torch_tensors_encode_in_place_on_the_gpu():
    torch = pytest.importorskip("torch")
    from sdr.backends.gpu.codecs import GpuRSCodec

    k, m, cs = 8, 2, 4096
    torch.manual_seed(0)
    grads = torch.randn(2 * k * cs // 4, device="cuda")
    codec = GpuRSCodec(k, m, cs)
    parity_t = torch.empty(2 * m * cs, dtype=torch.uint8, device="cuda")
    codec.encode(grads, parity_t)
    torch.cuda.synchronize()
    host = grads.cpu().numpy().view(np.uint8).reshape(2, k, cs)
    assert np.array_equal(parity_t.cpu().numpy().reshape(2, m, cs), _cpu_parity("mds", host, m))


@pytest.mark.parametrize("name", ["mds", "xor"])
def test_registry_host_adapters_give_the_cpu_bytes(name):
    k, m, cs = 8, 2, 1024
    rng = np.random.default_rng(2)
    data = [rng.integers(0, 256, cs, dtype=np.uint8) for _ in range(k - 1)]
    data.append(rng.integers(0, 256, 100, dtype=np.uint8))  # short last chunk
    cpu, gpu = get_codec(name, k, m, cs), get_codec(f"{name}-gpu", k, m, cs)
    parity = gpu.encode(data)
    assert all(np.array_equal(a, b) for a, b in zip(parity, cpu.encode(data), strict=True))
    chunks = [c.copy() for c in data] + [p.copy() for p in parity]
    chunks[1][:] = 0
    present = [i != 1 for i in range(k + m)]
    assert gpu.decode(chunks, present) == [1]
    assert np.array_equal(chunks[1], data[1])
