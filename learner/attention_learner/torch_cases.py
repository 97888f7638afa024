"""What the PyTorch cases share: float64 tensors of a case's arrays, gradients on a fixed
upstream gradient, modules built with explicit weights, and notes on torch's size errors.

Modules are run with explicit weights: a case draws its own parameters, loads them into the
learner's module by the contract's parameter names and runs it in float64, so that nothing
depends on a seed, on the order of initialisation or on dropout.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, overload

import numpy as np
import torch
from torch import nn

from attention_learner.inputs import normal

State = dict[str, np.ndarray]

# ---------------------------------------------------------------- tensors and gradients


@overload
def tensor(array: np.ndarray, grad: bool = False) -> torch.Tensor: ...
@overload
def tensor(array: None, grad: bool = False) -> None: ...
@overload
def tensor(array: np.ndarray | None, grad: bool = False) -> torch.Tensor | None: ...
def tensor(array: np.ndarray | None, grad: bool = False) -> torch.Tensor | None:
    """A float64 (or bool) tensor of a case's array; None stays None."""
    if array is None:
        return None
    if array.dtype == bool:
        return torch.from_numpy(array.copy())
    return torch.tensor(array, dtype=torch.float64, requires_grad=grad)


def backward(
    out: Any, upstream: np.ndarray, inputs: dict[str, torch.Tensor], what: str
) -> dict[str, torch.Tensor]:
    """Gradients ``d<name>`` of sum(out * upstream) with respect to each tensor of ``inputs``.

    {} when ``out`` does not have the shape of ``upstream`` (the comparison of the output's
    shape then says what is wrong); a TypeError when ``out`` carries no gradient.
    """
    if not isinstance(out, torch.Tensor) or not out.requires_grad:
        raise TypeError(f"{what} should return a tensor that carries gradients back to {', '.join(inputs)}")
    if tuple(out.shape) != upstream.shape:
        return {}
    (out * torch.from_numpy(upstream)).sum().backward()  # type: ignore[no-untyped-call]  # torch: unannotated
    return {  # an input the output does not depend on has a zero gradient
        f"d{name}": torch.zeros_like(t) if t.grad is None else t.grad for name, t in inputs.items()
    }


def size_mismatch_note(exc: RuntimeError, lengths: str, cause: str) -> RuntimeError:
    """torch's size error, with the classic cause of it in this exercise."""
    return RuntimeError(f"{exc}\n({lengths}: if the sizes above mix these up, it may be {cause}.)")


# ---------------------------------------------------------------- explicit weights


def linear_state(rng: np.random.Generator, name: str, d_in: int, d_out: int) -> State:
    """Weights of an ``nn.Linear(d_in, d_out)`` called ``name``, in its layout (weight = W.T).

    Entries are N(0, 1/d_in), so that activations stay of order one.
    """
    return {
        f"{name}.weight": normal(rng, d_out, d_in, scale=1.0 / math.sqrt(d_in)),  # (d_out, d_in)
        f"{name}.bias": normal(rng, d_out, scale=0.1),  # (d_out,)
    }


def mha_state(rng: np.random.Generator, d_model: int, prefix: str = "", bias: bool = True) -> State:
    """Explicit weights for a MultiHeadAttention whose parameters are named ``prefix + W_q ...``
    (without the biases when ``bias`` is False)."""
    state: State = {}
    for name in ("W_q", "W_k", "W_v", "W_o"):
        linear = linear_state(rng, prefix + name, d_model, d_model)
        state.update({k: v for k, v in linear.items() if bias or not k.endswith(".bias")})
    return state


def load_weights(module: nn.Module, state: State, contract: str) -> None:
    """Copy ``state`` into ``module``'s parameters by name, explaining what is missing."""
    what = type(module).__name__
    params = dict(module.named_parameters())
    for name, value in state.items():
        if name not in params:
            raise AttributeError(
                shared_layer_message(module, name)
                or f"{what} has no parameter {name!r}. The contract names its submodules {contract}."
            )
        if tuple(params[name].shape) != value.shape:
            raise ValueError(
                f"{what}'s parameter {name} has shape {tuple(params[name].shape)}, expected {value.shape}"
            )
        with torch.no_grad():
            params[name].copy_(torch.from_numpy(value))


def shared_layer_message(module: nn.Module, name: str) -> str:
    """Why ``module`` lacks the parameter ``name`` when a list of layers holds one layer
    object several times (``[layer] * num_layers``: named_parameters lists a shared parameter
    once, under the first index), else ""."""
    parts = name.split(".")
    for i, part in enumerate(parts[:-1]):
        if not part.isdigit() or i == 0:
            continue
        try:
            container = module.get_submodule(".".join(parts[:i]))
        except AttributeError:
            return ""
        # iterating a ModuleList gives every entry; children() would list a shared one once
        layers = list(container) if isinstance(container, nn.ModuleList | nn.Sequential) else []
        if len(layers) > 1 and len({id(layer) for layer in layers}) < len(layers):
            where = ".".join(parts[:i])
            return (
                f"{type(module).__name__}.{where} holds one shared layer: the same layer object "
                f"appears more than once among its {len(layers)} layers ([layer] * num_layers "
                "repeats one layer, so they all use one set of weights). Build a new layer for "
                "each: nn.ModuleList([... for _ in range(num_layers)])."
            )
    return ""


def build_module(cls: Any, args: Sequence[int], state: State, contract: str, **kwargs: Any) -> nn.Module:
    """``cls(*args, **kwargs)`` in float64 with the explicit weights ``state`` loaded."""
    module = cls(*args, **kwargs)
    if not isinstance(module, nn.Module):
        raise TypeError(f"{cls!r} should be an nn.Module class, it built a {type(module).__name__}")
    module = module.double()
    load_weights(module, state, contract)
    return module
