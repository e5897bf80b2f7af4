"""A datacenter's ranks share its one inter-datacenter link: each paces at its share.

With two ranks per datacenter each sending half of the gradient at the whole link rate,
the pair offered twice the link's rate and its queue dropped what did not fit (the
emulator's queue-full drops; RTT samples three times the link's). ``sharers`` divides
the rate: the QP's pacing and the rate ``auto`` picks its scheme for.
"""

from __future__ import annotations

import pytest

from sdr.backends.hierarchical.links import SdrLinkOptions
from sdr.errors import ConfigError


def test_each_sharer_paces_at_its_share_of_the_link() -> None:
    alone = SdrLinkOptions(rate="1Gbit/s", scheme="sr-nack")
    shared = alone.replace(sharers=4)
    assert alone.attr().rate_limit == pytest.approx(1e9)
    assert shared.attr().rate_limit == pytest.approx(2.5e8)
    assert shared.reliability()[0].link_rate == pytest.approx(2.5e8)


def test_auto_is_given_the_share_as_its_link_rate() -> None:
    shared = SdrLinkOptions(rate="1Gbit/s", sharers=2, loss=1e-3, size_hint="2MiB")
    config, selection = shared.reliability()
    assert config.link_rate == pytest.approx(5e8) and selection is not None


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_a_bad_number_of_sharers_is_refused(bad: object) -> None:
    with pytest.raises(ConfigError, match="sharers must be a positive integer"):
        SdrLinkOptions(sharers=bad)  # type: ignore[arg-type]
