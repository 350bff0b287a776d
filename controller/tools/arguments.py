"""What the command line accepts: argparse types for numbers, counts and seeds, `--param
KEY=VALUE` pairs and `NAME[:KEY=VALUE,...]` scheme specs, and `UserError`, the one-paragraph
answer to bad input (exit 2). Shared by `ina` and the benchmarks that take the same options.
"""

from __future__ import annotations

import argparse
import json
import math


class UserError(Exception):
    """An error caused by input; the message is shown as it is."""


def param_values(pairs: list[tuple[str, str]]) -> dict[str, object]:
    """`--param quantization=100` arrives as text; JSON numbers and booleans become values
    (NaN and Infinity are not numbers here), anything else stays text. Each key once."""
    out: dict[str, object] = {}
    for key, text in pairs:
        if key in out:
            raise UserError(f"--param {key}: given twice ({out[key]!r} and {text!r})")
        try:
            value = json.loads(text, parse_constant=lambda name: name)
        except (json.JSONDecodeError, RecursionError):
            value = text
        if isinstance(value, float) and not math.isfinite(value):
            raise UserError(f"--param {key}={text}: not a finite number")
        out[key] = value if isinstance(value, (bool, int, float)) else text
    return out


def scheme_spec(text: str) -> tuple[str, dict[str, object]]:
    """`ina mininet --scheme NAME[:KEY=VALUE,...]`: a scheme with its own parameters, so one
    run compares a scheme with itself under other settings (atp and atp:partial=true)."""
    name, _, rest = text.partition(":")
    try:
        return name, param_values([param_pair(pair) for pair in rest.split(",")] if rest else [])
    except argparse.ArgumentTypeError as exc:
        raise UserError(f"--scheme {text}: {exc}") from None


def param_pair(text: str) -> tuple[str, str]:
    """argparse type of --param: KEY=VALUE with both sides non-empty."""
    key, eq, value = text.partition("=")
    if not eq:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE (e.g. quantization=100)")
    if not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} has no key before '='")
    if not value.strip():
        raise argparse.ArgumentTypeError(f"{text!r} has no value after '='")
    return key.strip(), value.strip()


def positive(text: str) -> float:
    """argparse type of durations and sizes: a finite number above zero."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a finite number above 0")
    return value


def count(text: str) -> int:
    """argparse type of counts: a positive integer."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give an integer of at least 1")
    return value


def mark_depth(text: str) -> int:
    """argparse type of --mark-depth: packets queued ahead, 0 up to bmv2's 19-bit queue depth."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= value < 1 << 19:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of packets from 0 to 524287")
    return value


def solver_seed(text: str) -> int:
    """argparse type of --seed: an integer CP-SAT accepts as its random seed (32 bits)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= value < 2**31:
        raise argparse.ArgumentTypeError(f"{text!r}: give an integer from 0 to {2**31 - 1}")
    return value
