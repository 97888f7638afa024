"""What each exercise's solution may not reach: one table, read by both delegation checks.

An exercise earns points only for the learner's own implementation, so a solution may not
hand its work to an implementation of the same exercise: torch's own, or a block this package
gives for a later chapter. Each :class:`Implementations` group below says how one family of
such implementations is seen:

- ``objects``: importable functions and classes, traced by identity while a check calls the
  learner's code (:mod:`attention_learner.op_trace`, in the learner's process);
- ``ops``: torch dispatcher operators, traced at the dispatcher in the same call ("*" ends a
  prefix), so that a private spelling (``torch._C._nn...``, ``torch.ops.aten...``) is seen;
- ``names``: every spelling that the grader's static reading of the submitted sources charges
  (``grader/autograde/delegation.py``): dotted paths (a path inside one counts too), prefixes
  ending in "*", and method names starting with "." (any ``<something>.backward``).

:data:`FORBIDDEN` maps each exercise (the function or class a notebook asks for) to its
groups; :func:`objects_of`, :func:`ops_of` and :func:`names_of` are what the two readings
use. The words the notebooks print for each exercise are ``attention_learner.rules.DELEGATES``,
held to this table by ``tests/test_rules_stated.py``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Implementations:
    """One family of implementations, as the run-time trace and the static reading see it."""

    objects: tuple[str, ...]
    names: tuple[str, ...]
    ops: tuple[str, ...] = ()


ATTENTION = Implementations(
    objects=("torch.nn.functional.scaled_dot_product_attention", "attention_learner.blocks.given_attention"),
    names=(
        "torch.nn.functional.scaled_dot_product_attention",
        "attention_learner.blocks.given_attention",
        "torch._C._nn.scaled_dot_product_attention",
        "torch.ops.aten.scaled_dot_product_attention",
        "torch.ops.aten._scaled_dot_product*",
        "torch._scaled_dot_product*",
        "torch._fused_sdp_choice",
    ),
    ops=("aten::scaled_dot_product_attention", "aten::_scaled_dot_product_*", "aten::_fused_sdp_choice"),
)
TORCH_MULTI_HEAD = Implementations(
    objects=("torch.nn.MultiheadAttention", "torch.nn.functional.multi_head_attention_forward"),
    names=(
        "torch.nn.MultiheadAttention",
        "torch.nn.functional.multi_head_attention_forward",
        "torch._native_multi_head_attention",
        "torch.ops.aten._native_multi_head_attention",
    ),
    ops=("aten::_native_multi_head_attention", "aten::native_multi_head_attention"),
)
GIVEN_MULTI_HEAD = Implementations(
    objects=("attention_learner.blocks.GivenMultiHeadAttention",),
    names=("attention_learner.blocks.GivenMultiHeadAttention",),
)
_LAYER_CLASSES = (
    "torch.nn.Transformer",
    "torch.nn.TransformerEncoder",
    "torch.nn.TransformerDecoder",
    "torch.nn.TransformerEncoderLayer",
    "torch.nn.TransformerDecoderLayer",
)
LAYERS = Implementations(objects=_LAYER_CLASSES, names=_LAYER_CLASSES)
SOFTMAX = Implementations(
    objects=("scipy.special.softmax", "scipy.special.log_softmax", "torch.nn.Softmax", "torch.nn.LogSoftmax"),
    names=(
        "torch.softmax",
        "torch.nn.functional.softmax",
        "torch.nn.Softmax",
        "torch.special.softmax",
        "scipy.special.softmax",
        ".softmax",
        "torch.log_softmax",
        "torch.nn.functional.log_softmax",
        "torch.nn.LogSoftmax",
        "torch.special.log_softmax",
        "scipy.special.log_softmax",
        ".log_softmax",
        "torch._softmax",
        "torch._log_softmax",
        "torch._C._nn.log_softmax",
        "torch._C._nn.softmax",
        "torch.ops.aten.softmax",
        "torch.ops.aten._softmax",
        "torch.ops.aten._safe_softmax",
        "torch.ops.aten.log_softmax",
        "torch.ops.aten._log_softmax",
        "torch._safe_softmax",
    ),
    ops=(
        "aten::softmax",
        "aten::_softmax",
        "aten::_safe_softmax",
        "aten::log_softmax",
        "aten::_log_softmax",
        "aten::special_softmax",
        "aten::special_log_softmax",
    ),
)
#: a backward pass by autograd, in any spelling (the engine's operators included)
BACKWARD = Implementations(
    objects=(
        "torch.autograd.grad",
        "torch.autograd.backward",
        "torch.autograd.functional.vjp",
        "torch.func.vjp",
        "torch.func.grad",
    ),
    names=(
        "torch.autograd.functional",
        "torch.func.jacrev",
        "torch.func.jacfwd",
        "torch.func.vjp",
        "torch.func.jvp",
        "torch.func.grad",
        "torch.autograd.grad",
        "torch.autograd.backward",
        ".backward",
        "torch.autograd.forward_ad",
    ),
    ops=("autograd::engine::*", "aten::_make_dual", "aten::_unpack_dual"),
)
#: torch's ready-made Jacobians (and vmap, which batches a vector-Jacobian product into one)
JACOBIANS = Implementations(
    objects=(
        "torch.autograd.functional.jacobian",
        "torch.autograd.functional.jvp",
        "torch.func.jacrev",
        "torch.func.jacfwd",
        "torch.func.vmap",
    ),
    names=("torch.func.vmap",),
)
LOSS = Implementations(
    objects=("torch.nn.CrossEntropyLoss", "torch.nn.NLLLoss"),
    names=(
        "torch.nn.functional.cross_entropy",
        "torch.nn.CrossEntropyLoss",
        "torch.nn.functional.nll_loss",
        "torch.nn.NLLLoss",
    ),
    ops=("aten::cross_entropy_loss", "aten::nll_loss*", "aten::nll_loss2d*"),
)


def _one(path: str) -> Implementations:
    """A group of one object, seen by its one name."""
    return Implementations(objects=(path,), names=(path,))


MULTI_HEAD = (TORCH_MULTI_HEAD, GIVEN_MULTI_HEAD)
ANY_ATTENTION = (ATTENTION, *MULTI_HEAD)

#: exercise -> the implementations its solution may not reach
FORBIDDEN: dict[str, tuple[Implementations, ...]] = {
    "softmax": (SOFTMAX,),
    "attend": ANY_ATTENTION,
    "dot_product_attention": ANY_ATTENTION,
    "scaled_dot_product_attention": ANY_ATTENTION,
    "scaled_dot_product_attention_torch": ANY_ATTENTION,
    "softmax_jacobian": (BACKWARD, JACOBIANS),
    "MultiHeadAttention": (*MULTI_HEAD, LAYERS),
    "causal_mask": (_one("torch.nn.Transformer.generate_square_subsequent_mask"),),
    # chapter 5 builds its layers on the given multi-head block: only torch's is forbidden
    "EncoderLayer": (TORCH_MULTI_HEAD, LAYERS, _one("attention_learner.blocks.GivenEncoderLayer")),
    "DecoderLayer": (TORCH_MULTI_HEAD, LAYERS, _one("attention_learner.blocks.GivenDecoderLayer")),
    "online_softmax_attention": (*ANY_ATTENTION, LAYERS),
    # the cache is the exercise: attention itself (F.scaled_dot_product_attention) is a piece
    "CachedSelfAttention": (*MULTI_HEAD, LAYERS),
    "positional_encoding": (_one("attention_learner.blocks.given_positional_encoding"),),
    # chapter 8 assembles the given layers (or the learner's own): torch's assembly is the answer
    "translation_loss": (LOSS,),
    "TinyTranslator": (LAYERS,),
    "greedy_decode_cached": (LAYERS,),
    # chapter 9: torch's attention answers gqa_attention; autograd through plain attention
    # answers FlashAttention's backward
    "gqa_attention": ANY_ATTENTION,
    "FlashAttention": (*ANY_ATTENTION, BACKWARD),
}

#: exercises traced by Python object only, never at the dispatcher: torch's profiler multiplies
#: the address space a tiled pass maps (GBs for chapter 9's memory case, which runs under a
#: memory limit); the static reading still sees every name
OBJECTS_ONLY = frozenset({"FlashAttention"})


def _joined(parts: tuple[tuple[str, ...], ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(p for part in parts for p in part))


def objects_of(exercise: str) -> tuple[str, ...]:
    """The functions and classes ``exercise``'s solution may not call (traced by identity)."""
    return _joined(tuple(group.objects for group in FORBIDDEN.get(exercise, ())))


def ops_of(exercise: str) -> tuple[str, ...]:
    """The dispatcher operators ``exercise``'s solution may not run ("*" ends a prefix)."""
    if exercise in OBJECTS_ONLY:
        return ()
    return _joined(tuple(group.ops for group in FORBIDDEN.get(exercise, ())))


def names_of(exercise: str) -> tuple[str, ...]:
    """Every spelling the static reading charges ``exercise`` with reaching."""
    return _joined(tuple(group.names for group in FORBIDDEN.get(exercise, ())))
