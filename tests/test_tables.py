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
