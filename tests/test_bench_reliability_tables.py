"""`ina bench reliability` tables stay whole when piped into a log (no header or number cut
to `…`), however narrow the console (the team's standard for tables)."""

from __future__ import annotations

import io

from rich.console import Console

from controller.tools.bench.reliability import _table

ROWS = [
    {
        "impairment": "reorder 10 %",
        "results exact": "3/3",
        "fragments finished / expected": "6144 / 6144",
        "retransmissions": 123456789,
        "plan versions after 1 cut": 2,
        "cut → new plan (s)": 1.2345,
        "rx/offered": 0.98765,
    }
]


def test_a_wide_table_on_a_narrow_console_keeps_every_header_and_cell_whole():
    out = io.StringIO()
    _table("a title", ROWS * 2, Console(file=out, width=40, force_terminal=False))
    text = out.getvalue()
    assert "…" not in text
    for key, value in ROWS[0].items():
        assert key in text, f"header {key!r} cut:\n{text}"
        assert str(value) in text, f"cell {value!r} cut:\n{text}"
    rows = [line for line in text.splitlines() if line.startswith(("┃", "│"))]
    assert all(line.endswith(("┃", "│")) for line in rows), "a line was wrapped"


def test_a_row_without_a_finished_iteration_shows_no_counts_rather_than_zeros():
    """A row whose iteration hung has no retransmission or fragment counts: "–" in the table
    and a gap in the plot, not 0, which reads as "nothing resent". Reports written before
    such counts were null say 0 there: the finished-iteration count decides."""
    from controller.tools.bench.reliability import _counted, _summary

    empty = _summary([])
    assert empty["retransmissions"] is None and empty["fragments_finished"] is None
    assert _counted(empty, "retransmissions") == "–"
    assert _counted({"iterations_completed": 0, "retransmissions": 0}, "retransmissions") == "–"
    assert _counted({"iterations_completed": 1, "retransmissions": 0}, "retransmissions") == 0


def test_a_row_that_did_not_finish_is_marked_in_the_plot_not_left_out():
    """The 4x4 plot at 4 MB once showed only "none": its loss 5 % row had hung. A hung row
    sits at the least slowdown its timeout proves; a partly finished one at its own."""
    from controller.tools.bench.reliability import _unfinished_marks

    rows = {
        "none": {"iterations_completed": 2, "mean_seconds": 100.0, "slowdown": 1.0, "error": ""},
        "loss 1 %": {
            "iterations_completed": 2,
            "mean_seconds": 150.0,
            "slowdown": 1.5,
            "error": None,
        },
        "loss 5 %": {
            "iterations_completed": 0,
            "mean_seconds": None,
            "slowdown": None,
            "error": "worker h0_1 did not finish iteration 1 in time (hang)",
        },
        "reorder 10 %": {
            "iterations_completed": 1,
            "mean_seconds": 300.0,
            "slowdown": 3.0,
            "error": "hang in iteration 2",
        },
    }
    assert _unfinished_marks(rows, 2, 900.0) == [
        ("loss 5 %", 9.0, "not finished in 900 s: > this"),
        ("reorder 10 %", 3.0, "1 of 2 finished"),
    ]
    assert _unfinished_marks(rows, 2, None) == [("reorder 10 %", 3.0, "1 of 2 finished")]


def test_iterations_that_ended_before_a_hang_are_kept_with_the_hang_error():
    """The congestion item lost every finished iteration when a later one hung."""
    from controller.emulation.mininet_runner import RunnerError
    from controller.tools.bench.reliability import _until_hang

    def two_then_a_hang():
        yield "iteration 1"
        yield "iteration 2"
        raise RunnerError("iteration 3: no result within 90 s")

    assert _until_hang(two_then_a_hang()) == (
        ["iteration 1", "iteration 2"],
        "iteration 3: no result within 90 s",
    )
    assert _until_hang(iter(["iteration 1"])) == (["iteration 1"], None)


def test_the_congestion_table_says_from_what_depth_each_kind_of_port_marked():
    """A run's congestion marks depend on the depth its ports mark from (half of each
    queue by default): the table names it per kind of port, as the JSON keeps it."""
    import argparse

    from controller.tools.bench.reliability import congestion_rows

    run = {
        "congested": {
            "iterations_completed": 3,
            "plan_versions": 1,
            "exact": True,
            "link_monitor": {"saved_by_traffic": 0},
        },
        "after_cut": {"exact": True, "plan_versions": 2},
        "cut_to_new_plan_seconds": 1.5,
    }
    runs = {
        "1000-packet queues": {
            **run,
            "mark_from": {"switch ports": {"32": 14}, "worker ports": {"500": 5}},
        },
        "2-packet queues": {
            **run,
            "mark_from": {"switch ports": {"1": 12, "never": 2}, "worker ports": {"1": 5}},
        },
    }
    rows = congestion_rows(runs, argparse.Namespace(iterations=3))
    cells = [row["marks from (frames queued)"] for row in rows]
    assert cells == [
        "switch ports 32, worker ports 500",
        "switch ports 1 (12) / never (2), worker ports 1",
    ]
    out = io.StringIO()
    _table("congestion", rows, Console(file=out, width=80, force_terminal=False))
    assert "…" not in out.getvalue() and "never (2)" in out.getvalue()
