"""The DiLoCo example's local carry: a site keeps, for its next inner steps, exactly the
part of its pseudo-gradient whose slices missed the deadline (nothing of what is in)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "experiments"))

import diloco_wan  # noqa: E402

from sdr.collectives.deadline import slice_bounds  # noqa: E402


def test_only_the_missed_slices_of_this_site_are_kept() -> None:
    own = torch.arange(1.0, 11.0)  # 10 elements in 4 slices: [0,2) [2,5) [5,8) [8,10)
    included = np.array([[True, False, True, False], [True, True, False, True]])
    report = SimpleNamespace(included=included, slices=4)
    bounds = slice_bounds(10, 4)
    assert bounds.tolist() == [0, 2, 5, 8, 10]
    kept = diloco_wan._missed(report, 0, own)  # site 0 missed slices 1 and 3
    assert kept.tolist() == [0, 0, 3, 4, 5, 0, 0, 0, 9, 10]
    kept = diloco_wan._missed(report, 1, own)  # site 1 missed slice 2
    assert kept.tolist() == [0, 0, 0, 0, 0, 6, 7, 8, 0, 0]
    everything = SimpleNamespace(included=np.ones((2, 4), bool), slices=4)
    assert diloco_wan._missed(everything, 0, own) is None
    assert own.tolist() == list(range(1, 11))  # the site's own delta is not changed
