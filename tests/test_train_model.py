"""The training model's gradient against finite differences, and data parallelism: the mean
of equal shards' gradients is the full batch's, so N workers train the reference's run."""

import numpy as np
import pytest

from dataplane.train import data as digits
from dataplane.train import loop
from dataplane.train.model import Mlp


def finite_difference(model: Mlp, params, x, y, h=1e-6):
    grad = np.zeros_like(params)
    for i in range(len(params)):
        up, down = params.copy(), params.copy()
        up[i] += h
        down[i] -= h
        grad[i] = (model.loss(up, x, y) - model.loss(down, x, y)) / (2 * h)
    return grad


def test_backprop_matches_finite_differences_on_a_tiny_net():
    model = Mlp((5, 4, 3, 3))
    rng = np.random.default_rng(1)
    params = model.init(2) + rng.normal(0, 0.1, model.n_params)  # nonzero biases too
    x, y = rng.normal(size=(7, 5)), rng.integers(0, 3, 7)
    analytic = model.gradient(params, x, y)
    numeric = finite_difference(model, params, x, y)
    assert analytic.shape == (model.n_params,)
    np.testing.assert_allclose(analytic, numeric, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize("workers", [2, 4, 8])
def test_mean_of_shard_gradients_is_the_full_batch_gradient(workers):
    config = loop.Config()
    d = digits.load()
    model = config.model
    params = model.init(3)
    (batch, *_) = digits.batches(len(d.y_train), config.batch, 0, 1)
    shards = [digits.shard(batch, i, workers) for i in range(workers)]
    assert sorted(np.concatenate(shards)) == sorted(batch)
    mean = np.mean([model.gradient(params, d.x_train[s], d.y_train[s]) for s in shards], axis=0)
    full = model.gradient(params, d.x_train[batch], d.y_train[batch])
    np.testing.assert_allclose(mean, full, rtol=1e-12, atol=1e-15)


def test_workers_in_lockstep_train_the_reference_run():
    """N workers, each with its shard, all-reduced in process (float32, as on the wire):
    the same accuracy per epoch as the float64 reference."""
    config, d, workers = loop.Config(epochs=3), digits.load(), 4
    _, ref = loop.run(config, d, loop.reference(config, d))
    model = config.model

    def combined(params, batch, step):
        grads = [
            model.gradient(params, d.x_train[s], d.y_train[s]).astype(np.float32)
            for s in (digits.shard(batch, i, workers) for i in range(workers))
        ]
        return np.mean(grads, axis=0, dtype=np.float64)

    _, dp = loop.run(config, d, combined)
    assert ref[-1].accuracy > 0.9
    for r, p in zip(ref, dp, strict=True):
        assert abs(r.accuracy - p.accuracy) <= 0.005
        assert r.steps == p.steps == len(d.y_train) // config.batch


def test_worker_refuses_a_batch_that_does_not_split_evenly():
    with pytest.raises(ValueError, match="equal shards"):
        loop.worker(loop.Config(batch=64), digits.load(), 0, 3, lambda a, op: a)
