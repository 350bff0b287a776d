"""Print rich tables whole: every header and cell as wide as it needs, in parts that fit.

Piped into a log, rich's console is 80 columns wide and squeezes a wider table by cutting
headers and numbers to `…`; a log reader then cannot tell 0.1 from 0.1875. Every table the CLI
and the benchmarks print goes through `print_table`, which never cuts a cell: a table wider
than the console is printed as several tables, each with the first column (the row's name)
and as many of the others as fit, so that an 80-column terminal or log shows every line whole.
Only a part whose first column and one other are wider than the console goes beyond it.
"""

from __future__ import annotations

from rich.console import Console
from rich.measure import Measurement
from rich.table import Column, Table


def _width(console: Console, table: Table) -> int:
    return Measurement.get(console, console.options.update_width(10_000), table).maximum


def _part(table: Table, indices: list[int], title: str | None) -> Table:
    """The columns `indices` of `table` (rows in the same order) as a table of their own."""
    columns = [table.columns[i] for i in indices]
    part = Table(
        *(Column(c.header, justify=c.justify, style=c.style, no_wrap=True) for c in columns),
        title=title,
    )
    for row in zip(*(c._cells for c in columns), strict=True):
        part.add_row(*row)
    return part


def _parts(console: Console, table: Table) -> list[Table]:
    """`table` whole if it fits the console, else split by columns, the first in every part."""
    if len(table.columns) <= 2 or _width(console, table) <= console.width:
        return [table]
    title = str(table.title) if table.title is not None else None
    groups: list[list[int]] = []
    group = [0]
    for i in range(1, len(table.columns)):
        if len(group) > 1 and _width(console, _part(table, [*group, i], title)) > console.width:
            groups.append(group)
            group = [0]
        group.append(i)
    groups.append(group)
    more = f" ({{}} of {len(groups)})" if len(groups) > 1 else ""
    return [
        _part(table, g, (title or "") + more.format(n) if title or more else None)
        for n, g in enumerate(groups, 1)
    ]


def print_table(console: Console, table: Table) -> None:
    """Print `table` on `console`, never wrapped or cut: in parts of at most the console's
    width where its columns allow (the first column repeated in each part)."""
    for column in table.columns:
        column.no_wrap = True
    for part in _parts(console, table):
        natural = _width(console, part)
        width = console.width
        console.width = max(width, natural)  # print() itself never goes beyond the console's width
        try:
            console.print(part, crop=False)
        finally:
            console.width = width
