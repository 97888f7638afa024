"""Chapter 8 exercises, the judging half: references and classic bugs of shift_right,
translation_loss, TinyTranslator, train_step, greedy_decode_cached and sample_next_token.

The cases (inputs, the stand-in models, how the learner's code is called, descriptions,
hints) are in ``attention_learner.cases.ch08``. References come from
``grader.reference.seq2seq``; ``TinyTranslator__torch`` is judged against ``nn.Transformer``
with the same weights, and greedy_decode_cached against the UNCACHED greedy loop (the
definition of the ids it must return), on the case's stand-in model.

The models both use are in ``ch08_models``; the classic bugs in ``ch08_training_bugs``
(shift_right, translation_loss, TinyTranslator, train_step) and ``ch08_decoding_bugs``
(greedy_decode_cached, sample_next_token).
"""

from __future__ import annotations

import numpy as np
import torch

from attention_learner.torch_cases import tensor
from grader.exercises.ch08_decoding_bugs import COUNT_BUGS, DECODE_BUGS, SAMPLE_BUGS, TOP_K_MINUS_ONE
from grader.exercises.ch08_models import (
    Outputs,
    decode_counts,
    draw,
    id_tensor,
    reference_translator,
    run_steps,
    uncached_ids,
)
from grader.exercises.ch08_training_bugs import (
    DETACHED_LSE,
    LOSS_BUGS,
    SHIFT_BUGS,
    TORCH_TRANSLATOR_BUGS,
    TRAIN_BUGS,
    TRANSLATOR_BUGS,
    value_only,
)
from grader.exercises.spec import Inputs, exercise
from grader.reference.seq2seq import (
    shift_right,
    torch_transformer_logits,
    train_step,
    translation_loss,
)


def _loss_reference(inputs: Inputs) -> Outputs:
    loss = translation_loss(tensor(inputs["logits"]), id_tensor(inputs, "targets"), inputs["pad_id"],
                            inputs["label_smoothing"])  # fmt: skip
    return {"loss": loss.reshape(1)}


def _loss_gradient_reference(inputs: Inputs) -> Outputs:
    logits = tensor(inputs["logits"], grad=True)
    loss = translation_loss(logits, id_tensor(inputs, "targets"), inputs["pad_id"], inputs["label_smoothing"])
    loss.backward()
    return {"loss": loss.reshape(1), "dlogits": logits.grad}


def _translator_reference(inputs: Inputs) -> Outputs:
    model = reference_translator(inputs)
    src, tgt_in = id_tensor(inputs, "src"), id_tensor(inputs, "tgt_in")
    with torch.no_grad():
        logits = model(src, tgt_in)
        memory = model.encode(src) * (src != inputs["pad_id"])[..., None]
    return {"logits": logits, "decoded": logits, "memory": memory}


def _translator_torch_reference(inputs: Inputs) -> Outputs:
    model = reference_translator(inputs)
    with torch.no_grad():
        src, tgt_in = id_tensor(inputs, "src"), id_tensor(inputs, "tgt_in")
        return {"logits": torch_transformer_logits(model, src, tgt_in)}


def _train_reference(inputs: Inputs) -> Outputs:
    return run_steps(inputs, lambda m, o, s, t, i: train_step(m, o, s, t, i["pad_id"], i["bos_id"]))


def _decode_reference(inputs: Inputs) -> Outputs:
    return {"ids": uncached_ids(inputs)}


def _counts_reference(inputs: Inputs) -> Outputs:
    return decode_counts(inputs, uncached_ids(inputs))


def _sample_reference(inputs: Inputs) -> Outputs:
    return draw(inputs)


EXERCISES = [
    exercise(
        "shift_right",
        lambda i: {"tgt_in": shift_right(id_tensor(i, "tgt"), i["bos_id"]), "tgt_unchanged": np.array(True)},
        SHIFT_BUGS,
    ),
    exercise(
        "translation_loss",
        _loss_reference,
        {k: value_only(b) for k, b in LOSS_BUGS.items() if k != DETACHED_LSE},
    ),  # its value is right
    exercise("translation_loss__gradients", _loss_gradient_reference, LOSS_BUGS),
    exercise("TinyTranslator", _translator_reference, TRANSLATOR_BUGS),
    exercise("TinyTranslator__torch", _translator_torch_reference, TORCH_TRANSLATOR_BUGS),
    exercise("train_step", _train_reference, TRAIN_BUGS),
    exercise("greedy_decode_cached", _decode_reference, DECODE_BUGS),
    exercise("greedy_decode_cached__counts", _counts_reference, COUNT_BUGS),
    exercise("sample_next_token", _sample_reference, SAMPLE_BUGS),
    exercise(
        "sample_next_token__limits",
        _sample_reference,
        {k: b for k, b in SAMPLE_BUGS.items() if k != TOP_K_MINUS_ONE},
    ),
]
