"""Model definitions of the three paper suites, in our own code (no torchvision/timm).

Each module defines a config dataclass with `default()` (the paper-era size) and
`small()` (seconds to capture, for tests and CI) and a `build(config)` returning
`(model, inputs, target, loss_fn)`: the training step computes
`loss_fn(model(*inputs), target)`.
"""
