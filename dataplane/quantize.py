"""Float gradients as int32 the switches can sum without overflow (docs/allreduce.md).

The switches only add int32. Every step agrees on its scales first, with sums alone:

1. Exponent round: each worker sends a one-hot over the float32 exponents (the bucket of its
   largest |x|, `frexp`: |x| < 2**e) plus its element count; the summed histogram's highest
   non-empty bucket is G, above every |x| of every worker.
2. Bound round: per block of K elements (one fragment), each worker sends
   u = ceil(max|x| * 2**(R - G)) <= 2**R, with R = 30 - ceil(log2 N) so that N of them sum to
   at most 2**30. The sum U bounds the sum of the workers' block maxima: Σ max|x_i| <= U 2**(G-R).
3. Payload round: block b is sent as q = rint(x * 2**k) with k = k' + R - G, k' the largest
   integer with U << k' <= 2**31 - 1 - N. Any partial sum of any subset of workers is then at
   most Σ (max|x_i| 2**k + 1/2) <= 2**31 - 1 - N/2: no switch ever overflows.

Error per element of a block: |Σ q 2**-k - Σ x| <= N 2**-(k+1) (each worker rounds by at most
half a unit), then the float32 rounding of the result (half an ulp). Unlike one global scale,
a block scaled to its own maxima keeps ~31 - log2(N) significant bits of its sum whatever the
magnitude elsewhere in the array, down to an absolute floor near N**2 2**(G-R-31) for blocks
far below the largest value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dataplane.frame import K

EXP_MIN, EXP_MAX = -148, 128  # frexp exponents of float32's smallest denormal and its max
BUCKETS = EXP_MAX - EXP_MIN + 1
INT32_MAX = 2**31 - 1


class NotFinite(ValueError):
    """A NaN or an infinity in a gradient: no scale can carry it."""


def check_finite(array: np.ndarray) -> None:
    """ValueError naming the first NaN or infinity (its index in the array's shape)."""
    bad = ~np.isfinite(array)
    if bad.any():
        first = np.unravel_index(int(np.flatnonzero(bad.reshape(-1))[0]), array.shape)
        index = tuple(int(i) for i in first)
        value = array[index]
        raise NotFinite(f"gradient element {index} is {value}: NaN and infinity cannot be summed")


def reference_bits(workers: int) -> int:
    """R: a block bound is at most 2**R, so N of them sum to at most 2**30."""
    if not 1 <= workers <= 2**29:
        raise ValueError(f"workers must be 1 .. 2**29, not {workers}")
    return 30 - math.ceil(math.log2(workers))


def blocks(flat: np.ndarray) -> np.ndarray:
    """The array as rows of K float64 (the last zero-padded): one block per fragment."""
    rows = -(-len(flat) // K)
    padded = np.zeros(rows * K, dtype=np.float64)
    padded[: len(flat)] = flat
    return padded.reshape(rows, K)


def exponent_vector(flat: np.ndarray, workers: int) -> np.ndarray:
    """This worker's exponent-round contribution: one-hot of its max exponent (all zero for
    an all-zero array), then its element count mod 2**R (N of them fit in int32)."""
    vector = np.zeros(BUCKETS + 1, dtype=np.int32)
    top = float(np.max(np.abs(flat), initial=0.0))
    if top > 0:
        vector[math.frexp(top)[1] - EXP_MIN] = 1
    vector[BUCKETS] = len(flat) % 2 ** reference_bits(workers)
    return vector


def top_exponent(summed: np.ndarray) -> int | None:
    """G from the summed exponent vector: every |x| of every worker is below 2**G; None when
    every worker's array is all zeros."""
    found = np.flatnonzero(summed[:BUCKETS])
    return None if len(found) == 0 else int(found[-1]) + EXP_MIN


def sizes_agree(summed: np.ndarray, elements: int, workers: int) -> bool:
    """Whether the summed element counts are N times this worker's: when the sizes differ,
    at least the worker with the largest array sees that they do not."""
    return int(summed[BUCKETS]) == workers * (elements % 2 ** reference_bits(workers))


def block_bounds(rows: np.ndarray, top: int, workers: int) -> np.ndarray:
    """This worker's bound-round contribution: ceil(max|x| 2**(R-G)) per block (exact in
    float64: a float32 times a power of two)."""
    scaled = np.ldexp(np.max(np.abs(rows), axis=1), reference_bits(workers) - top)
    return np.ceil(scaled).astype(np.int32)


@dataclass(frozen=True)
class Scales:
    """The scale exponent k of every block (payload q = rint(x 2**k)); the same in every
    worker, derived from the summed bounds alone."""

    k: np.ndarray  # int64 per block
    workers: int

    @classmethod
    def from_bounds(cls, summed: np.ndarray, top: int, workers: int) -> Scales:
        limit = INT32_MAX - workers
        u = np.maximum(summed.astype(np.int64), 1)
        # largest k' with u << k' <= limit: start from the bit lengths, step down if over
        shift = np.array([limit.bit_length() - int(v).bit_length() for v in u], dtype=np.int64)
        shift -= (u << shift) > limit
        return cls(shift + reference_bits(workers) - top, workers)

    def quantize(self, rows: np.ndarray) -> np.ndarray:
        """rint(x 2**k) per block, as int32 rows."""
        return np.rint(np.ldexp(rows, self.k[:, None])).astype(np.int32)

    def dequantize(self, summed: np.ndarray) -> np.ndarray:
        """The summed int32 rows back to float64 values (exact: an int times 2**-k)."""
        return np.ldexp(summed.astype(np.float64), -self.k[:, None])

    def bound(self) -> np.ndarray:
        """Per block, the most |Σ q 2**-k - Σ x| can be: N 2**-(k+1)."""
        return np.ldexp(float(self.workers), -(self.k + 1))


def to_float32(values: np.ndarray, shape: tuple[int, ...], op: str) -> np.ndarray:
    """The dequantized sum (float64, flat) as float32 of `shape`; a sum beyond float32's
    range is an OverflowError naming its first element (a mean never is)."""
    big = np.abs(values) > np.finfo(np.float32).max
    if big.any():
        first = np.unravel_index(int(np.flatnonzero(big)[0]), shape)
        raise OverflowError(
            f"the {op} at {tuple(int(i) for i in first)} is {values[big][0]:.6g}, beyond "
            "float32's range; use op='mean' or scale the gradients down"
        )
    return values.astype(np.float32).reshape(shape)


def _int32_sum(parts: list[np.ndarray]) -> np.ndarray:
    """The sum as a switch makes it; OverflowError if any subset's sum could leave int32
    (the sum of absolute values bounds them all)."""
    wide = np.stack([p.astype(np.int64) for p in parts])
    if np.abs(wide).sum(axis=0).max(initial=0) > INT32_MAX:
        raise OverflowError("a partial sum leaves int32")
    return wide.sum(axis=0).astype(np.int32)


def reduce_locally(inputs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """What the three rounds compute from the workers' flat float32 `inputs`, in one process:
    (the float64 sum of the dequantized payload, its per-element bound). A reference for
    tests, and the exact result the network returns."""
    n, size = len(inputs), len(inputs[0])
    summed = _int32_sum([exponent_vector(a, n) for a in inputs])
    top = top_exponent(summed)
    if top is None or size == 0:
        return np.zeros(size), np.zeros(size)
    rows = [blocks(a) for a in inputs]
    scales = Scales.from_bounds(_int32_sum([block_bounds(r, top, n) for r in rows]), top, n)
    payload = _int32_sum([scales.quantize(r) for r in rows])
    result = scales.dequantize(payload).reshape(-1)[:size]
    return result, np.repeat(scales.bound(), K)[:size]
