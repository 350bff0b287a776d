"""Scheme parameters read with their types: `--param K=V` and a topology's `schemes:` section.

A value of the wrong type or out of range, or a name the scheme does not read (a typo that
would otherwise be ignored silently), is a `SchemeInputError` naming the scheme and the
parameter, which the CLI shows as one paragraph with exit code 2. ARO and EINA check their own
parameters in their packages; this module serves the heuristic schemes.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Any

from controller.solvers import SchemeInputError

WHERE = "(from --param or the topology's `schemes:` section)"


class SchemeParams:
    """The parameters one scheme was given, checked against the names it reads."""

    def __init__(self, scheme: str, params: Mapping[str, Any], known: Collection[str]):
        self.scheme, self.params = scheme, params
        unknown = sorted(set(params) - set(known))
        if unknown:
            names = ", ".join(sorted(known)) or "none"
            raise SchemeInputError(
                f"{scheme}: unknown parameter(s) {', '.join(unknown)} {WHERE}; it reads: {names}")

    def _bad(self, name: str, value: Any, wanted: str) -> SchemeInputError:
        return SchemeInputError(f"{self.scheme}: parameter {name}={value!r} {WHERE}: {wanted}")

    def integer(self, name: str, default: int | None, minimum: int = 0,
                maximum: int = 10**9) -> int | None:
        value = self.params.get(name, default)
        if value is None and default is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not (
                minimum <= value <= maximum):
            raise self._bad(name, value, f"must be an integer from {minimum} to {maximum}")
        return value

    def number(self, name: str, default: float, minimum: float, maximum: float) -> float:
        value = self.params.get(name, default)
        if isinstance(value, bool) or not isinstance(value, int | float) or not (
                math.isfinite(value) and minimum <= value <= maximum):
            raise self._bad(name, value, f"must be a number from {minimum:g} to {maximum:g}")
        return float(value)

    def flag(self, name: str, default: bool) -> bool:
        value = self.params.get(name, default)
        if not isinstance(value, bool):
            raise self._bad(name, value, "must be true or false")
        return value

    def choice(self, name: str, default: str, choices: Collection[str]) -> str:
        value = self.params.get(name, default)
        if value not in choices:
            raise self._bad(name, value, f"must be one of {', '.join(sorted(choices))}")
        return value
