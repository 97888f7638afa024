"""The case of ``sample_next_token(logits, temperature, top_k, generator)`` with a generator the
case seeds (``__limits``: temperature 0, top_k = 1, top_k = V).

p = softmax(z / T) over the top_k largest logits (the others set to -inf), one draw per row
with torch.multinomial(p, 1, generator=generator); T = 0 is the argmax.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from attention_learner.inputs import normal
from attention_learner.spec import Arrays, Inputs
from attention_learner.torch_cases import tensor


def make_sample_inputs(
    rng: np.random.Generator,
    batch: int = 200,
    vocab: int = 6,
    temperature: float = 0.7,
    top_k: int | None = 3,
    logit_scale: float = 1.5,
) -> Inputs:
    """Logits (batch, vocab) and the seed of the torch.Generator the sampler must draw from."""
    return {
        "logits": normal(rng, batch, vocab, scale=logit_scale),  # (B, V)
        "temperature": float(temperature),
        "top_k": top_k,
        "generator_seed": int(rng.integers(2**31 - 1)),
    }


def call_sample(fn: Any, inputs: Inputs) -> dict[str, Any]:  # raw outputs: tensors
    """fn(logits, temperature, top_k, generator) with a seeded generator; the global RNG is
    set to another seed meanwhile (and restored), so a draw from it shows."""
    generator = torch.Generator().manual_seed(inputs["generator_seed"])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(inputs["generator_seed"] + 1)
        try:
            ids = fn(tensor(inputs["logits"]), inputs["temperature"], inputs["top_k"], generator)
        except (RuntimeError, ZeroDivisionError) as exc:
            if inputs["temperature"] != 0 or not (isinstance(exc, ZeroDivisionError) or "nan" in str(exc)):
                raise  # not a division by temperature 0 (inf / inf is NaN where a draw follows)
            raise type(exc)(
                f"{exc}\n(With temperature 0, logits / temperature divides by zero: temperature 0 "
                "means the argmax, logits.argmax(dim=-1), and no draw.)"
            ) from exc
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"sample_next_token should return a tensor of ids, got {type(ids).__name__}")
    return {"ids": ids}


def describe_sample(params: dict[str, Any]) -> str:
    k = "top_k=None (no filtering)" if params["top_k"] is None else f"top_k={params['top_k']}"
    return (
        f"{params['batch']} rows of {params['vocab']} logits of spread {params['logit_scale']:g}, "
        f"temperature={params['temperature']:g}, {k}, a seeded torch.Generator"
    )


def sample_hints(inputs: Inputs, expected: Arrays, got: Arrays) -> list[str]:
    ids = got.get("ids")
    logits = inputs["logits"]
    if ids is None:
        return []
    if ids.shape != (logits.shape[0],):
        if inputs["temperature"] == 0:
            return [
                f"Return one id per row, shape ({logits.shape[0]},): with temperature 0 that is "
                "the argmax over the vocabulary, logits.argmax(dim=-1)."
            ]
        return [
            f"Return one id per row, shape ({logits.shape[0]},): "
            "squeeze the sample axis of torch.multinomial."
        ]
    if not np.array_equal(ids, np.round(ids)) or ids.min() < 0 or ids.max() >= logits.shape[1]:
        return ["The result should hold token ids, integers in [0, V)."]
    rank = (logits > logits[np.arange(len(ids)), ids.astype(int)][:, None]).sum(axis=1)  # (B,) 0 = the argmax
    hints = []
    if inputs["temperature"] == 0 and rank.any():
        hints.append("With temperature 0 every token must be the argmax of its row (no sampling).")
    k = inputs["top_k"]
    if k is not None and inputs["temperature"] != 0 and (rank >= k).any():
        hints.append(
            f"{int((rank >= k).sum())} sampled tokens are not among the top_k = {k} most likely of "
            "their row: set the other logits to -inf BEFORE the softmax and the draw."
        )
    if not hints:
        hints.append(
            "Draw with torch.multinomial(probabilities, 1, generator=generator) on the logits' own "
            "dtype, after dividing the logits by the temperature: another way of drawing, or the "
            "global random generator, gives other samples."
        )
    return hints
