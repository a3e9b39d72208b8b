"""The benchmark harness, run small, so that it keeps working (the figures are not checked: they are
the benchmarks' business, see `make bench`)."""

from __future__ import annotations

from bench.__main__ import impls, measure_burst, measure_latency
from bench.harness import bench_cluster


def test_bench_harness_measures_our_operator() -> None:
    kube = bench_cluster()  # the test session's cluster (KUBECONFIG)
    (ours,) = impls(["ours"])
    lat = measure_latency(kube, ours, noops=2, creates=1)
    assert set(lat) == {"create → Successful, 1 CR (median of 1) [s]", "no-op run p50 (2 spec changes) [s]",
                        "no-op run p95 (2 spec changes) [s]"}
    assert all(v > 0 for v in lat.values())
    burst = measure_burst(kube, ours, 3)
    assert all(v > 0 for v in burst.values()) and len(burst) == 3
