"""A scheme's parameters as it reads them: the values given (`--param K=V` over the topology's
`schemes:` section), else the defaults its catalog entry declares.

`controller.solvers.solve` has checked every given value against the same entry
(`controller.solvers.catalog`) before the scheme runs, so a scheme reads values of the declared
type and range; only limits that depend on the network (ATRO's layers) are left to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controller.solvers.catalog import SCHEMES


class SchemeParams:
    """The parameters one scheme was given, with its declared defaults behind them."""

    def __init__(self, scheme: str, params: Mapping[str, Any]):
        self.entry, self.params = SCHEMES[scheme], params

    def __getitem__(self, name: str) -> Any:
        """The given value, else the declared default (None where the network decides)."""
        return self.params.get(name, self.entry.param(name).default)

    def given(self, name: str) -> bool:
        return name in self.params
