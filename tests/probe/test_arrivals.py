"""Open-loop arrivals: evenly spaced, or Poisson (exponential gaps of mean 1 / rate, as
perf_analyzer's ``--request-distribution poisson``), and a rate-mode sweep step built
with the arrivals its settings ask for."""

from __future__ import annotations

import itertools
import random
import statistics

import pytest

from tritonwatch.kserve.payload import Tensor
from tritonwatch.records.sweep_records import SweepSettings
from tritonwatch.sweep.load_sweep import _spec
from tritonwatch.sweep.spec import arrival_gaps


def test_constant_arrivals_are_evenly_spaced() -> None:
    assert (
        list(itertools.islice(arrival_gaps(40.0, "constant", random.Random(1)), 3)) == [0.025] * 3
    )


def test_poisson_arrivals_have_exponential_gaps_of_the_rates_mean() -> None:
    """Fails if Poisson gaps are not exponential of mean 1 / rate: their mean within 3 %
    and their spread as large as their mean (an exponential's coefficient of variation is 1)."""
    gaps = list(itertools.islice(arrival_gaps(40.0, "poisson", random.Random(7)), 20_000))
    mean = statistics.fmean(gaps)
    assert mean == pytest.approx(0.025, rel=0.03)
    assert statistics.pstdev(gaps) / mean == pytest.approx(1.0, rel=0.05)
    assert min(gaps) < 0.1 * mean  # bursts: some requests arrive almost together


def test_a_rate_step_is_built_with_the_settings_arrivals() -> None:
    """Fails if a rate-mode sweep step drops ``arrivals`` (its requests would be evenly
    spaced whatever the settings say)."""
    tensors = [Tensor("INPUT0", "FP32", (1, 2), bytes(8))]
    settings = SweepSettings(url="http://127.0.0.1:1", model="m", levels=(5.0,), mode="rate")
    poisson = SweepSettings(
        url="http://127.0.0.1:1", model="m", levels=(5.0,), mode="rate", arrivals="poisson"
    )
    assert _spec(settings, tensors, 5.0).arrivals == "constant"
    built = _spec(poisson, tensors, 5.0)
    assert (built.mode, built.rate, built.arrivals) == ("rate", 5.0, "poisson")


def test_no_arrivals_at_a_rate_of_zero() -> None:
    with pytest.raises(ValueError, match="rate must be positive"):
        next(arrival_gaps(0.0, "poisson", random.Random(1)))
