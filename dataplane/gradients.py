"""A gradient as the agents put it on the wire: fixed point, fragments of K elements, fragment
ids, and the split of the fragments into model shards and partial-aggregation segments.

A float32 gradient becomes fixed point with scale 2**16 (FIXED_POINT_SCALE: round(x * 2**16)),
an int32 one passes through. Each piece is a function of its inputs alone, so every worker and
every PS computes the same ids, shards and segments from the same plan.

Fragment ids carry the iteration: `frag_id` = epoch << 24 | index (EPOCH_SHIFT; gradients up to
2**24 fragments, 2 GiB). A partial sum that a lost ACK left in a switch can then never be merged
with the next iteration's contributions (a different fragment id is a collision, not a match),
and the CONTROL naming it makes the worker free it with an ACK: without this, such a leftover
silently corrupted the next iteration's sums (seen with tail drops on every link).
"""

from __future__ import annotations

from itertools import accumulate, pairwise

import numpy as np

from dataplane.frame import K

FIXED_POINT_SCALE = 2**16
EPOCH_SHIFT = 24  # frag_id = epoch << EPOCH_SHIFT | fragment index
EPOCHS = 2 ** (32 - EPOCH_SHIFT)


def synthetic_gradient(seed: int, index: int, elements: int) -> np.ndarray:
    """Worker `index`'s int32 test gradient; small values so any 2**11 workers sum exactly."""
    rng = np.random.default_rng([seed, index])
    return rng.integers(-(2**20), 2**20, elements, dtype=np.int32)


def to_fixed_point(gradient: np.ndarray) -> np.ndarray:
    """int32 passes through; float32 becomes round(x * FIXED_POINT_SCALE)."""
    if gradient.dtype == np.int32:
        return gradient
    return np.round(gradient.astype(np.float64) * FIXED_POINT_SCALE).astype(np.int32)


def fragments(gradient: np.ndarray) -> np.ndarray:
    """The gradient as rows of K big-endian int32, the last row zero-padded."""
    rows = -(-len(gradient) // K)
    padded = np.zeros(rows * K, dtype=">i4")
    padded[: len(gradient)] = gradient
    return padded.reshape(rows, K)


def wire_rows(elements: list[bytes]) -> np.ndarray:
    """Fragments' K elements as the wire carries them (big-endian int32), one row each."""
    return np.frombuffer(b"".join(elements), ">i4").reshape(len(elements), K).astype(np.int32)


def frag_id(epoch: int, index: int) -> int:
    return (epoch % EPOCHS) << EPOCH_SHIFT | index


def split_frag_id(value: int) -> tuple[int, int]:
    """(epoch, fragment index) of a packet's `frag_id`."""
    return value >> EPOCH_SHIFT, value & ((1 << EPOCH_SHIFT) - 1)


def segment_rows(total: int, segments: list[dict]) -> list[tuple[int, int, int]]:
    """(first row, flow id, next node) of each segment (state-file `segments`: `start`,
    `end` fractions of `total` fragments), the start rounded to the nearest fragment index.

    Deterministic in its inputs, so every worker of a task puts each fragment in the same
    segment and the switches count its contributors right."""
    return [(round(s["start"] * total), s["flow_id"], s["next_node"]) for s in segments]


def shard_ranges(total: int, shares: list[float]) -> list[tuple[int, int]]:
    """Split `total` fragments into contiguous ranges, one per share in task order, sized by
    largest remainders (EINA's r_p / Σ r, README "Plan JSON" `model_share`).

    Deterministic in its inputs, so every worker and every PS computes the same split from
    the shares the controller publishes."""
    weight = sum(shares)
    if weight <= 0:
        raise ValueError("model shares must add up to more than 0")
    exact = [total * s / weight for s in shares]
    sizes = [int(x) for x in exact]
    by_remainder = sorted(range(len(shares)), key=lambda i: (sizes[i] - exact[i], i))
    for i in by_remainder[: total - sum(sizes)]:
        sizes[i] += 1
    return list(pairwise([0, *accumulate(sizes)]))
