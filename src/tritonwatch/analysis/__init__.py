"""Judgement, as pure functions of recorded observations: quantiles, knee, stability, SLOs."""
