"""Seeded weight initialisation that never touches torch's global random state.

``torch.manual_seed`` (even inside :func:`torch.random.fork_rng`) reseeds the one
process-wide generator: two fits started from two app job threads at once would
interleave their draws and get different weights for the same seed. Here a
network is built on the ``meta`` device (no memory, no random draws), moved to
empty CPU storage and initialised from an explicit :class:`torch.Generator`:

* :func:`seeded_generator` — a CPU generator seeded with ``seed``;
* :func:`reset_parameters` — PyTorch's default initialisation of every
  :class:`~torch.nn.Linear`, convolution and :class:`~torch.nn.Embedding`, in
  registration order, drawn from the generator;
* :func:`build_seeded` — both steps for a module factory.

The default initialisations are those of ``reset_parameters`` in torch 2.x:
weights ``kaiming_uniform_(a = sqrt(5))`` (i.e. ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``),
biases ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``, embeddings ``N(0, 1)``. Drawn in
registration order from a generator seeded with ``s``, they equal the weights that
``torch.manual_seed(s)`` followed by the module's construction gives (a test checks
it), so results computed before this module existed are reproduced bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar

import torch
from torch import nn

from geoviz.errors import GeovizError

__all__ = ["build_seeded", "reset_parameters", "seeded_generator"]

ModuleT = TypeVar("ModuleT", bound=nn.Module)


def seeded_generator(seed: int) -> torch.Generator:
    """A new CPU :class:`torch.Generator` seeded with ``seed`` (the global one is left alone)."""
    return torch.Generator().manual_seed(int(seed))


def _default_uniform(
    layer: nn.Linear | nn.modules.conv._ConvNd, generator: torch.Generator
) -> None:
    """``nn.Linear`` / ``_ConvNd.reset_parameters`` with the draws taken from ``generator``."""
    weight = layer.weight
    target = (
        weight
        if weight.is_contiguous()
        else torch.empty_like(weight, memory_format=torch.contiguous_format)
    )
    nn.init.kaiming_uniform_(target, a=math.sqrt(5), generator=generator)
    if target is not weight:
        weight.copy_(target)
    if layer.bias is not None:
        fan_in, _ = nn.init._calculate_fan_in_and_fan_out(weight)
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0.0
        nn.init.uniform_(layer.bias, -bound, bound, generator=generator)


def reset_parameters(module: ModuleT, generator: torch.Generator) -> ModuleT:
    """Re-draw every parameter of ``module`` (in place) from ``generator``; returns ``module``.

    Parameters
    ----------
    module
        A network made of :class:`~torch.nn.Linear`, convolution and
        :class:`~torch.nn.Embedding` layers (others may have no parameters
        of their own), on the CPU.
    generator
        A CPU generator, e.g. :func:`seeded_generator`; advanced by the draws.

    Raises
    ------
    GeovizError
        A layer holds parameters whose default initialisation is not known here
        (it would otherwise keep whatever its construction drew).
    """
    with torch.no_grad():
        for name, layer in module.named_modules():
            if isinstance(layer, (nn.Linear, nn.modules.conv._ConvNd)):
                _default_uniform(layer, generator)
            elif isinstance(layer, nn.Embedding):
                nn.init.normal_(layer.weight, generator=generator)
                if layer.padding_idx is not None:
                    layer.weight[layer.padding_idx].fill_(0.0)
            elif any(True for _ in layer.parameters(recurse=False)):
                raise GeovizError(
                    f"cannot initialise layer {name or type(module).__name__!r} "
                    f"({type(layer).__name__}) from a generator: only Linear, convolution "
                    "and Embedding layers have a known default initialisation"
                )
    return module


def build_seeded(factory: Callable[[], ModuleT], generator: torch.Generator) -> ModuleT:
    """``factory()`` built without random draws, then initialised from ``generator``.

    The module is constructed on the ``meta`` device (:class:`torch.device` as a
    context manager applies to the calling thread only), given empty CPU
    storage and passed to :func:`reset_parameters`. Layers that a constructor
    sets to constants (a zero-initialised output layer) must be set again by
    the caller afterwards.

    Returns
    -------
    torch.nn.Module
        On the CPU, in training mode.
    """
    with torch.device("meta"):
        module = factory()
    return reset_parameters(module.to_empty(device="cpu"), generator)
