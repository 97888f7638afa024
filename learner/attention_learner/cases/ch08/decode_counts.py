"""Counting what a decode does to the model: calls of ``encode``; per decoder layer, the
projections of the source's keys and values in cross-attention, and the query positions
self-attention projects (a cached decode of T steps projects T, one per step; an uncached one
1 + 2 + ... + T = T (T + 1) / 2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass
class DecodeCounts:
    """What a decode did to the model: calls of encode; per decoder layer, how many times the
    source's keys and values went through cross-attention's projections, and how many query
    positions self-attention projected."""

    encode_calls: int
    cross_keys: list[int]
    cross_values: list[int]
    query_rows: list[int]


def count_calls(model: Any) -> DecodeCounts:
    """Wrap ``model`` (a ``DecodingStandIn``; Any, as its encode is replaced) so that it
    counts, in the returned record, as it is used.

    A call of a whole attention module counts as one projection of its keys and values and
    as its queries' positions; the projections inside that call are not counted again.
    """
    layers: nn.ModuleList = model.decoder_layers
    counts = DecodeCounts(0, [0] * len(layers), [0] * len(layers), [0] * len(layers))
    encode = model.encode

    def counted_encode(src: torch.Tensor) -> torch.Tensor:
        counts.encode_calls += 1
        memory: torch.Tensor = encode(src)
        return memory

    model.encode = counted_encode
    for i, layer in enumerate(layers):
        _count_module(layer.cross_attn, i, counts, whole=("cross_keys", "cross_values"),
                      parts={"W_k": "cross_keys", "W_v": "cross_values"})  # fmt: skip
        _count_module(layer.self_attn, i, counts, whole=(), parts={"W_q": "query_rows"}, rows=True)
    return counts


def _count_module(attn: Any, layer: int, counts: DecodeCounts, whole: tuple[str, ...],
                  parts: dict[str, str], rows: bool = False) -> None:  # fmt: skip
    inside = [False]

    def before(module: nn.Module, args: tuple[Any, ...]) -> None:
        inside[0] = True
        for name in whole:
            getattr(counts, name)[layer] += 1
        if rows and args:
            counts.query_rows[layer] += int(args[0].shape[-2])

    def after(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        inside[0] = False

    attn.register_forward_pre_hook(before)
    attn.register_forward_hook(after)
    for part, name in parts.items():

        def projected(module: nn.Module, args: tuple[Any, ...], output: Any, name: str = name) -> None:
            if not inside[0]:
                getattr(counts, name)[layer] += int(args[0].shape[-2]) if rows else 1

        getattr(attn, part).register_forward_hook(projected)
