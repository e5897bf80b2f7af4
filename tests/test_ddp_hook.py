"""The DDP communication hook: training across two "datacenters" equals single-site training.

Four processes (two datacenters of two ranks, SDR over loopback UDP between them, shared
memory inside) train a small MLP with PyTorch DDP and the SDR hook; one process trains the
same model on the whole global batch. Loss curves and final parameters must agree up to
float rounding, and every rank must end with bitwise identical parameters.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from experiments.dc_training import TrainSpec, _model, run_job, train_single_site  # noqa: E402
from sdr.backends.hierarchical import SdrLinkOptions  # noqa: E402
from sdr.backends.shm import free_port  # noqa: E402
from sdr.errors import ConfigError  # noqa: E402

SPEC = TrainSpec(steps=6, batch=32, hidden=64, bucket_mb=0.01)


def test_two_datacenter_ddp_matches_single_site() -> None:
    opts = SdrLinkOptions(scheme="sr-nack", rtt="2ms", rate="4Gbit/s", timeout=60)
    result = run_job(SPEC, datacenters=2, local_size=2, options=opts, port=free_port())
    reference = train_single_site(SPEC)
    np.testing.assert_allclose(result["losses"], reference, rtol=1e-5, atol=1e-6)
    assert reference[-1] < reference[0]  # it learned something: the comparison means something
    ranks = result["ranks"]
    for r in ranks[1:]:
        assert np.array_equal(r["params"], ranks[0]["params"])  # DDP replicas stay identical
    single = torch.cat([p.detach().reshape(-1) for p in _single_site_model()]).numpy()
    np.testing.assert_allclose(ranks[0]["params"], single, rtol=1e-4, atol=1e-5)
    # several buckets per step went through the hook, all over SDR
    assert all(r["buckets"] > SPEC.steps for r in ranks), [r["buckets"] for r in ranks]
    assert all(r["counters"]["writes_completed"] > 0 for r in ranks)


def _single_site_model() -> list:
    model = _model(SPEC)
    opt = torch.optim.SGD(model.parameters(), lr=SPEC.lr, momentum=SPEC.momentum)
    from experiments.dc_training import _batches

    for x, y in _batches(SPEC):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return list(model.parameters())


def test_hook_rejects_unsupported_gradients() -> None:
    from sdr.backends.hierarchical.ddp_hook import _as_numpy

    arr, name = _as_numpy(torch.ones(3, dtype=torch.bfloat16))
    assert name == "bfloat16" and arr.dtype == np.uint16 and arr[0] == 0x3F80
    with pytest.raises(ConfigError, match="float64"):
        _as_numpy(torch.ones(3, dtype=torch.float64))
