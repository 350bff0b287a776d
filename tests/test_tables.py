"""Tables piped into a log keep every header and number whole (controller/tools/tables.py)."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table

from controller.tools.tables import print_table


def _narrow_log() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=40, force_terminal=False, color_system=None), out


def test_a_table_wider_than_the_log_is_printed_whole():
    console, out = _narrow_log()
    table = Table(title="closed loop on Mininet")
    headers = ("scheme", "plan rate (Gbps)", "mean iteration (s)", "flows into PS")
    for header in headers:
        table.add_column(header)
    table.add_row("paring:fine=true", "0.916666666667", "5.38", "2.18212890625")
    print_table(console, table)
    text = out.getvalue()
    assert "…" not in text
    for cell in (*headers, "paring:fine=true", "0.916666666667", "2.18212890625"):
        assert cell in text
    assert console.width == 40  # the console is left as it was


def test_plain_console_print_would_cut_the_same_table():
    """The reference the first test is measured against: rich alone cuts at 40 columns."""
    console, out = _narrow_log()
    table = Table()
    for header in ("scheme", "plan rate (Gbps)", "mean iteration (s)", "flows into PS"):
        table.add_column(header)
    table.add_row("paring:fine=true", "0.916666666667", "5.38", "2.18212890625")
    console.print(table)
    assert "…" in out.getvalue()


def test_a_table_too_wide_for_80_columns_is_printed_in_parts_that_fit():
    """Twelve columns of a benchmark's row: each line of the output fits 80 columns, every
    header and cell is there whole, and each part names its rows by the first column."""
    out = io.StringIO()
    console = Console(file=out, width=80, force_terminal=False, color_system=None)
    table = Table(title="aro-fig1: 2 × 1 MB")
    headers = ["impairment", *(f"resent_on_cause_{i}" for i in range(11))]
    for header in headers:
        table.add_column(header)
    rows = [
        ["none", *(str(1000 + i) for i in range(11))],
        ["loss 5 %", *("0.3291" for _ in range(11))],
    ]
    for row in rows:
        table.add_row(*row)
    print_table(console, table)
    lines = out.getvalue().splitlines()
    assert max(len(line) for line in lines) <= 80
    text = out.getvalue()
    assert "…" not in text
    for cell in (*headers, *rows[0], "0.3291"):
        assert cell in text
    parts = text.count("aro-fig1: 2 × 1 MB")
    assert parts >= 2 and text.count("loss 5 %") == parts == text.count("impairment")
    assert console.width == 80


def test_a_table_that_fits_is_printed_as_one():
    out = io.StringIO()
    console = Console(file=out, width=80, force_terminal=False, color_system=None)
    table = Table(title="closed loop")
    for header in ("scheme", "rate"):
        table.add_column(header)
    table.add_row("aro", "1")
    print_table(console, table)
    assert out.getvalue().count("closed loop") == 1 and "(1 of" not in out.getvalue()
