"""The benchmark harness, run small, so that it keeps working (the figures are not checked: they are
the benchmarks' business, see `make bench`)."""

from __future__ import annotations

import pytest

from bench.__main__ import impls, measure_burst, measure_idle, measure_latency
from bench.harness import bench_cluster
from bench.profile import IMPORTS, PHASES, TOTAL, profile
from tests.kube import Kube


@pytest.fixture(scope="module")
def bench_kube() -> Kube:
    return bench_cluster()  # the test session's cluster (KUBECONFIG), with the Bench CRD applied once


def test_bench_harness_measures_our_operator(bench_kube: Kube) -> None:
    (ours,) = impls(["ours"])
    lat = measure_latency(bench_kube, ours, noops=2, creates=1)
    assert set(lat) == {"create → Successful, 1 CR (median of 1) [s]", "no-op run p50 (2 spec changes) [s]",
                        "no-op run p95 (2 spec changes) [s]"}
    assert all(v > 0 for v in lat.values())
    burst = measure_burst(bench_kube, ours, 3)
    assert all(v > 0 for v in burst.values()) and len(burst) == 3


def test_bench_idle_measure_counts_runs_memory_and_api_writes(bench_kube: Kube) -> None:
    (ours,) = impls(["ours"])
    # A short period: the resync may overlap the (shortened) idle window; only the plumbing is checked,
    # not the counts (other tests write to the same cluster meanwhile).
    figures, _ = measure_idle(bench_kube, ours, 3, None, period=4, settle=0.5, idle_window=0.5)
    assert figures["RSS idle with 3 CRs (operator + children) [MB]"] > 0
    assert {"resync 1 of all 3: runs", "resync 1 of all 3: API writes"} <= set(figures)


def test_bench_profile_splits_a_run_into_phases_from_its_job_events(bench_kube: Kube) -> None:
    medians, imports = profile(bench_kube, runs=2)
    for executor in ("cold", "warm"):
        assert set(medians[executor]) == {*PHASES, TOTAL}
        # Each phase ends at a later event than it starts: a missing or reordered event shows here.
        assert all(seconds > 0 for seconds in medians[executor].values()), medians[executor]
    assert set(imports) == set(IMPORTS) and all(seconds > 0 for seconds in imports.values())
