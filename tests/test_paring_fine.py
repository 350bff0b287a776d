"""PARING's fine mode (Sec. V-C, `--param fine=true`) on topologies/examples/paring-fine.yaml:
a share strictly between 0 and 1 and a rate above every coarse plan's.

The references share no code with the scheme: every coarse plan of the star (which PS, which
workers, which of them S merges) rated by hand with exact fractions, and the fine plan's rate
as a two-variable LP (r, u = s·r) solved by enumerating its vertices.
"""

from __future__ import annotations

import itertools
from fractions import Fraction as F

import pytest
from conftest import EXAMPLES

from controller.evaluator.evaluate import evaluate
from controller.model.network import load_topology
from controller.solvers import SolveOptions, solve

FINE = EXAMPLES / "paring-fine.yaml"
C_S, B_PS, LINK, R = F(3, 2), F(2), F(4), F(4)  # the file's capacities
HOSTS, N = ("PS", "W1", "W2", "W3"), 3


def coarse_optimum() -> F:
    """Every placement on the star and every set M of workers S merges (|M| = 1 is a relay):
    S carries |M| r, the PS gets the n - |M| raw flows plus S's sum, its link as many."""
    best = F(0)
    for ps in HOSTS:
        for workers in itertools.combinations([h for h in HOSTS if h != ps], N):
            for k in range(len(workers) + 1):
                into_ps = N - k + (1 if k >= 2 else k)
                rate = min(R, B_PS / into_ps, LINK / into_ps)
                if k >= 2:
                    rate = min(rate, C_S / k)
                best = max(best, rate)
    return best


def fine_optimum_on(k: int) -> tuple[F, F]:
    """max r with S merging the share s of k workers' fragments, the other n - k raw:
    S: k u ≤ C_S; PS (and its link): r (n - k) + u + (r - u) k ≤ B_PS (LINK); r ≤ R;
    0 ≤ u ≤ r, u = s r. Returns (r, s) at the best vertex."""
    rows = [
        (F(0), F(k), C_S),
        (F(N), F(1 - k), B_PS),
        (F(N), F(1 - k), LINK),
        (F(1), F(0), R),
        (F(0), F(-1), F(0)),
        (F(-1), F(1), F(0)),
    ]  # a r + b u ≤ c
    best = (F(0), F(0))
    for (a1, b1, c1), (a2, b2, c2) in itertools.combinations(rows, 2):
        det = a1 * b2 - a2 * b1
        if det == 0:
            continue
        r, u = (c1 * b2 - c2 * b1) / det, (a1 * c2 - a2 * c1) / det
        if all(a * r + b * u <= c for a, b, c in rows) and r > best[0]:
            best = (r, u / r)
    return best


def test_fine_mode_splits_at_s_and_beats_every_coarse_plan():
    network = load_topology(FINE)
    coarse = solve(network, "paring", SolveOptions(seed=0))
    fine = solve(network, "paring", SolveOptions(seed=0, params={"fine": True}))
    assert coarse_optimum() == F(3, 4)
    assert coarse.tasks[0].rate_gbps == pytest.approx(float(coarse_optimum()))
    (point,) = fine.tasks[0].aggregation  # S merges W1 and W2 (PARING's tree), W3 crosses
    assert (point.switch, point.workers) == ("S", ("W1", "W2"))
    rate, share = fine_optimum_on(2)
    assert (rate, share) == (F(11, 12), F(9, 11))
    assert 0 < point.share < 1 and point.share == pytest.approx(float(share), rel=1e-7)
    assert fine.tasks[0].rate_gbps == pytest.approx(float(rate), rel=1e-7)
    assert fine.tasks[0].rate_gbps > float(coarse_optimum())
    result = evaluate(network, fine)
    assert result.consistent and not result.beyond_data_plane, result.problems
    assert result.tasks[0].rate_gbps >= fine.tasks[0].rate_gbps * (1 - 1e-9)
    into_ps = sum(ll.flows for ll in result.link_loads if ll.dst == fine.tasks[0].ps)
    assert into_ps == pytest.approx(float(2 * share + 3 * (1 - share)))  # 24/11
    # the fine mode keeps PARING's tree: a share of all three at S would give 1 Gbps
    assert fine_optimum_on(3) == (F(1), F(1, 2))
