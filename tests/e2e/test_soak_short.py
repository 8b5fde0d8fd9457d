"""The soak's arithmetic (benchmarks/soak.py), on synthetic series.

The soak itself is a benchmark: ``python benchmarks/soak.py`` for 30 min, and its 45 s
form in test_soak_short_bench.py (``pytest -m bench``). These check the growth and
slope analysis, so that its FAIL means what it says.
"""

from __future__ import annotations

import os
import random
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from soak import Sample, analyse, canary_outcomes, parse_status, read_sample, slope, table

MB = 1024 * 1024


# -- the arithmetic, on synthetic samples ------------------------------------------------


Curve = Callable[[int], float]


def _series(
    seconds: int,
    rss_mb: Curve,
    threads: Curve = lambda t: 15,
    fds: Curve = lambda t: 27,
) -> list[Sample]:
    """A sample every 10 s for ``seconds``, each column a function of the time."""
    return [
        Sample(float(t), int(rss_mb(t) * MB), int(threads(t)), int(fds(t)))
        for t in range(0, seconds + 1, 10)
    ]


def test_a_steadily_growing_rss_fails_and_its_slope_says_how_fast() -> None:
    """RSS growing 1 MB a minute fails the soak, with a slope of 60 MB an hour."""
    samples = _series(1800, lambda t: 100 + t / 60)  # 1 MB a minute
    growth = analyse(samples, warm_up=120)
    assert growth.baseline.at == 120
    assert growth.rss_growth_mb == pytest.approx(28.0, abs=0.01)
    assert growth.rss_slope_mb_per_hour == pytest.approx(60.0, rel=1e-3)
    assert not growth.passed
    assert growth.failures() == ["RSS grew 28.0 MB (> 5 MB)"]


def test_a_flat_noisy_series_passes_with_a_slope_near_zero() -> None:
    """Noise around a flat RSS, thread and file count passes, with a slope near zero."""
    noise = random.Random(7)
    samples = _series(
        1800,
        lambda t: 150 + noise.uniform(-1.5, 1.5),
        threads=lambda t: 15 + noise.choice([0, 0, 1]),
        fds=lambda t: 27 + noise.choice([-1, 0, 1]),  # a band of 2: the jitter allowed
    )
    growth = analyse(samples, warm_up=120)
    assert growth.passed, growth.failures()
    assert abs(growth.rss_slope_mb_per_hour) < 1.0
    assert growth.rss_growth_mb <= 3.0


def test_growth_is_counted_from_the_end_of_the_warm_up_not_from_the_start() -> None:
    """Start-up (imports, first scrapes) may take 40 MB; only what follows counts."""
    samples = _series(600, lambda t: 60 + min(t, 100) * 0.4)
    growth = analyse(samples, warm_up=120)
    assert growth.baseline.rss_mb == pytest.approx(100.0, abs=0.01)
    assert growth.rss_growth_mb == pytest.approx(0.0, abs=0.01)
    assert growth.passed


@pytest.mark.parametrize(
    ("threads", "fds", "failures"),
    [
        (lambda t: 15 + (t > 300) * 2, lambda t: 27 + (t > 300) * 2, []),  # +2: jitter
        (lambda t: 15 + t // 200, lambda t: 27, ["threads grew by 9 (> +2)"]),
        (lambda t: 15, lambda t: 27 + (t > 900) * 3, ["open files grew by 3 (> +2)"]),
    ],
)
def test_threads_and_open_files_may_jitter_by_two_but_not_grow(
    threads: Curve, fds: Curve, failures: list[str]
) -> None:
    """Threads and open files may rise by two and no more, each failure named."""
    growth = analyse(_series(1800, lambda t: 100, threads, fds), warm_up=120)
    assert growth.failures() == failures


def test_analysis_needs_samples_on_both_sides_of_the_warm_up() -> None:
    """A soak with no sample after the warm-up is refused rather than passed."""
    with pytest.raises(ValueError, match="both in the warm-up and after it"):
        analyse(_series(100, lambda t: 100), warm_up=120)


def test_slope_is_least_squares() -> None:
    """The growth slope is the least-squares fit, 0 for one point or one instant."""
    assert slope([0, 1, 2, 3], [1, 3, 5, 7]) == pytest.approx(2.0)
    assert slope([0, 1, 2, 3], [0, 2, 0, 2]) == pytest.approx(0.4)
    assert slope([5], [1]) == 0.0
    assert slope([1, 1], [0, 9]) == 0.0


def test_status_and_fds_are_read_from_proc() -> None:
    """RSS and thread count are read from /proc status, which without VmRSS is refused."""
    text = "Name:\tpython\nVmPeak:\t  9 kB\nVmRSS:\t  123456 kB\nThreads:\t7\n"
    assert parse_status(text) == (123456 * 1024, 7)
    with pytest.raises(ValueError, match="no VmRSS"):
        parse_status("Name:\tzombie\nThreads:\t1\n")
    me = read_sample(os.getpid(), started=0.0)
    assert me.rss_bytes > 10 * MB and me.threads >= 1 and me.fds >= 3


def test_table_rows_are_coarse_and_end_with_the_last_sample() -> None:
    """The soak table has a row per step and always ends with the last sample."""
    rows = table(_series(95, lambda t: 100), step=30).splitlines()
    assert [row.split()[0] for row in rows] == ["time_s", "0", "30", "60", "90"]
    rows = table(_series(100, lambda t: 100), step=30).splitlines()
    assert rows[-1].split() == ["100", "100.0", "15", "27"]


def test_canary_outcomes_are_summed_over_models() -> None:
    """Canary outcomes are summed over models and protocols, _created samples left out."""
    page = (
        'tritonwatch_canary_requests_total{model="a",outcome="success",protocol="http",target="s"} 10.0\n'
        'tritonwatch_canary_requests_total{model="b",outcome="success",protocol="grpc",target="s"} 5.0\n'
        'tritonwatch_canary_requests_total{model="b",outcome="timeout",protocol="grpc",target="s"} 1.0\n'
        'tritonwatch_canary_requests_created{model="b",outcome="timeout"} 1.7e9\n'
    )
    assert canary_outcomes(page) == {"success": 15.0, "timeout": 1.0}
