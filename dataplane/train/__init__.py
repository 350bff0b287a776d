"""Data-parallel training of a small NumPy model whose gradients the switches sum.

`model` is the network and its gradient, `data` the fixed digits split and the batches,
`loop` one training run for any all-reduce (the float64 reference is the same loop with the
exact full-batch gradient), `worker` the per-host process `ina train` starts on Mininet hosts.
Imports nothing from controller/: the worker process runs on a host.
"""
