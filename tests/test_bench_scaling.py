"""bench/scaling.py's simulation (NFR-8, docs/kubernetes.md): it reads the rule from the KEDA
manifest, replays the seed's day (400,000 jobs), and tells a rule that holds NFR-8 from one that
does not; no measurement here (the overhead per job is given)."""

from __future__ import annotations

import dataclasses

import pytest

from bench import scaling


@pytest.fixture(scope="module")
def rule() -> scaling.Rule:
    return scaling.Rule.from_manifest()


def test_the_rule_is_the_manifests(rule: scaling.Rule) -> None:
    assert (rule.min_workers, rule.max_workers, rule.polling_s) == (2, 60, 15)
    assert (rule.depth_target, rule.age_target_s, rule.cooldown_s) == (80.0, 15.0, 300)


def test_the_day_has_the_seeds_volume_and_sixfold_peaks() -> None:
    day_total = sum(scaling.arrival_rate(t) for t in range(scaling.DAY_S))
    assert day_total == pytest.approx(50_000 * 8, rel=1e-6)
    night, peak = scaling.arrival_rate(2 * 3600), scaling.arrival_rate(8 * 3600)
    assert peak / night == pytest.approx(6.0, rel=0.01)
    assert scaling.arrival_rate(19 * 3600) == pytest.approx(peak, rel=0.01)


def test_the_manifests_rule_holds_nfr8_through_the_seeds_day(rule: scaling.Rule) -> None:
    day = scaling.simulate(rule, slots_per_worker=100, overhead_s=0.3)
    assert day.jobs == pytest.approx(400_000, rel=0.01)
    assert day.within_slo / day.jobs >= 0.95
    assert max(day.workers) > rule.min_workers  # it did scale for the peaks
    assert min(day.workers[: 3600 * 4]) == rule.min_workers  # and back down at night


def test_a_pool_that_cannot_grow_misses_nfr8_at_the_peak(rule: scaling.Rule) -> None:
    fixed = dataclasses.replace(rule, min_workers=2, max_workers=2)
    day = scaling.simulate(fixed, slots_per_worker=100, overhead_s=0.3, load=3.0)
    assert day.within_slo / day.jobs < 0.95
    # time is the subject: a simulated age (no wall clock): the oldest job waits past NFR-8's 60 s
    assert max(day.oldest_age_s) > 60
