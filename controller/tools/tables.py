"""Print rich tables whole: as wide as their headers and cells need, whatever the console's width.

Piped into a log, rich's console is 80 columns wide and squeezes a wider table by cutting
headers and numbers to `…`; a log reader then cannot tell 0.1 from 0.1875. Every table the CLI
and the benchmarks print goes through `print_table`.
"""

from __future__ import annotations

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table


def print_table(console: Console, table: Table) -> None:
    """Print `table` on `console` at its natural width, never wrapped or cut."""
    for column in table.columns:
        column.no_wrap = True
    natural = Measurement.get(console, console.options.update_width(10_000), table).maximum
    width = console.width
    console.width = max(width, natural)  # print() itself never goes beyond the console's width
    try:
        console.print(table, crop=False)
    finally:
        console.width = width
