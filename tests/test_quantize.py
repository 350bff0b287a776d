"""The all-reduce quantization (dataplane/quantize.py): sums of N workers' float32 arrays
through int32, against the float64 sum, for any arrays hypothesis finds; no partial sum of any
subset of workers leaves int32."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from dataplane.quantize import (
    INT32_MAX,
    NotFinite,
    Scales,
    block_bounds,
    blocks,
    check_finite,
    exponent_vector,
    reduce_locally,
    sizes_agree,
    top_exponent,
)


def reduce(inputs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, Scales | None]:
    """`reduce_locally` (which refuses any int32 overflow), and the scales it used."""
    result, bound = reduce_locally(inputs)
    n = len(inputs)
    top = top_exponent(sum(exponent_vector(a, n) for a in inputs))
    if top is None:
        return result, bound, None
    bounds = sum(block_bounds(blocks(a), top, n).astype(np.int64) for a in inputs)
    return result, bound, Scales.from_bounds(bounds, top, n)


floats = st.one_of(
    st.floats(width=32, allow_nan=False, allow_infinity=False),  # huge, tiny, denormal
    st.floats(-1.0, 1.0, width=32),
    st.just(0.0),
    st.floats(-(2.0**-100), 2.0**-100, width=32, allow_subnormal=True),
)


@settings(max_examples=300, deadline=None)
@given(
    st.tuples(st.integers(1, 64), st.integers(0, 100)).flatmap(
        lambda shape: st.lists(
            arrays(np.float32, shape[1], elements=floats), min_size=shape[0], max_size=shape[0]
        )
    )
)
def test_the_sum_through_int32_is_within_the_bound_of_the_float64_sum(inputs):
    result, bound, scales = reduce(inputs)
    exact = sum(a.astype(np.float64) for a in inputs)
    assert np.all(np.abs(result - exact) <= bound)
    if scales is not None:
        # and the bound is worth having: about N 2**-31 of the block's summed maxima
        n, top = len(inputs), top_exponent(sum(exponent_vector(a, len(inputs)) for a in inputs))
        maxima = sum(np.abs(blocks(a)).max(axis=1) for a in inputs)
        floor = n * 2.0 ** (top - (30 - int(np.ceil(np.log2(n)))))
        assert np.all(scales.bound() <= n * (maxima + floor) / (INT32_MAX - n))


@settings(max_examples=100, deadline=None)
@given(st.integers(2, 64), st.integers(-140, 120), st.integers(1, 300))
def test_equal_workers_at_any_magnitude_keep_about_24_bits(workers, exponent, size):
    rng = np.random.default_rng(size)
    base = (rng.standard_normal(size) * 2.0**exponent).astype(np.float32)
    result, bound, _ = reduce([base] * workers)
    exact = workers * base.astype(np.float64)
    assert np.all(np.abs(result - exact) <= bound)
    peak = np.abs(exact).max()
    if peak > 2.0**-120:  # far from float32's denormals
        assert np.abs(result - exact).max() <= peak * 2.0**-24


def test_a_nan_or_infinity_is_refused_naming_its_index():
    grad = np.zeros((3, 4), np.float32)
    check_finite(grad)
    grad[1, 2], grad[2, 0] = np.inf, np.nan
    with pytest.raises(NotFinite, match=r"element \(1, 2\) is inf"):
        check_finite(grad)


def test_workers_whose_arrays_differ_in_size_see_it():
    summed = exponent_vector(np.ones(10, np.float32), 2) + exponent_vector(
        np.ones(12, np.float32), 2
    )
    assert not sizes_agree(summed, 12, 2)
    assert not sizes_agree(summed, 10, 2)
