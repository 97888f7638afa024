"""Chapter 8 cases: the whole Transformer built, trained and decoded, and the notebook's task.

The cases (inputs, call adapters, descriptions, hints; no implementation of an exercise):

- ``shift_right(tgt, bos_id)`` on padded batches of target ids;
- ``translation_loss(logits, targets, pad_id, label_smoothing)`` on padded targets, with
  logits up to +-1000 (``__gradients``: the gradient with respect to the logits as well);
- ``TinyTranslator`` with explicit weights loaded by the contract's parameter names, so that
  the given layers and a learner's own chapter-5 layers are tested alike, on batches padded
  in the source and in the target (``__torch``: against ``nn.Transformer``);
- ``train_step`` on :class:`ToySeq2Seq`, a small stand-in model with explicit weights,
  three steps with an optimizer the case builds; gradients are large enough that clipping
  changes every step;
- ``greedy_decode_cached`` on :class:`DecodingStandIn`, a model with the contract's decoder
  attributes (the given decoder layers, explicit weights) whose encoder is an embedding
  lookup; ``__counts`` wraps the model to count calls of ``encode``, projections of the
  source's keys and values in each layer's cross-attention, and query positions projected
  by each layer's self-attention;
- ``sample_next_token(logits, temperature, top_k, generator)`` with a generator the case
  seeds (``__limits``: temperature 0, top_k = 1, top_k = V).

The notebook's training section uses :func:`translation_task` (chapter 6's toy English ->
French pair, :mod:`attention_learner.cases.ch08.language`, the book's one definition of it) and
:func:`training_budget` (how long the training cells may run here: not at all when the
grader runs the notebook).

One module per job: ``ids`` (padded batches), ``shift_loss``, ``translator``, ``optimizer``
and ``training``, ``decode_counts`` and ``decoding``, ``sampling`` (the cases), ``language``
(the toy language pair) and ``task`` (the notebook's training task). This package lists the
cases in ``CASES`` and re-exports the names the notebook, the grader and the book import.
"""

from __future__ import annotations

from attention_learner.cases.ch08.decode_counts import DecodeCounts, count_calls
from attention_learner.cases.ch08.decoding import (
    DECODE_LABELS,
    STAND_IN_ATTRIBUTES,
    DecodingStandIn,
    cached_decode_hints,
    call_cached_decode,
    call_cached_decode_counts,
    describe_cached_counts,
    describe_cached_decode,
    make_cached_decode_inputs,
    stand_in_model,
)
from attention_learner.cases.ch08.ids import padded_ids
from attention_learner.cases.ch08.language import (
    ADJECTIVES,
    ARTICLES,
    BOS,
    CONJUNCTION,
    EOS,
    NOUNS,
    PAD,
    SPECIAL_TOKENS,
    VERBS,
    Vocab,
    make_pairs,
    random_sentence,
    source_vocab,
    target_vocab,
    token_accuracy,
    translate,
)
from attention_learner.cases.ch08.optimizer import CaseOptimizer, make_optimizer
from attention_learner.cases.ch08.sampling import (
    call_sample,
    describe_sample,
    make_sample_inputs,
    sample_hints,
)
from attention_learner.cases.ch08.shift_loss import (
    LOSS_LABELS,
    call_loss,
    call_loss_gradients,
    call_shift,
    describe_loss,
    describe_shift,
    loss_hints,
    make_loss_inputs,
    make_shift_inputs,
    shift_hints,
)
from attention_learner.cases.ch08.task import (
    BUDGET_VARIABLE,
    TranslationTask,
    training_budget,
    translation_task,
)
from attention_learner.cases.ch08.training import (
    TOY_PARAMETERS,
    TRAIN_LABELS,
    ToySeq2Seq,
    call_train,
    describe_train,
    flat_parameters,
    make_train_inputs,
    toy_model,
    train_hints,
)
from attention_learner.cases.ch08.translator import (
    TRANSLATOR_ATOL,
    TRANSLATOR_CONTRACT,
    TRANSLATOR_RTOL,
    build_translator,
    call_translator,
    describe_translator,
    make_translator_inputs,
    translator_hints,
)
from attention_learner.spec import Case

__all__ = [
    "ADJECTIVES", "ARTICLES", "BOS", "BUDGET_VARIABLE", "CASES", "CONJUNCTION", "EOS", "NOUNS", "PAD",
    "SPECIAL_TOKENS", "STAND_IN_ATTRIBUTES", "TOY_PARAMETERS", "TRANSLATOR_CONTRACT", "VERBS",
    "CaseOptimizer", "DecodeCounts", "DecodingStandIn", "ToySeq2Seq", "TranslationTask", "Vocab",
    "build_translator", "count_calls", "flat_parameters", "make_cached_decode_inputs", "make_optimizer",
    "make_pairs", "make_shift_inputs", "make_train_inputs", "padded_ids", "random_sentence",
    "source_vocab", "stand_in_model", "target_vocab", "token_accuracy", "toy_model", "training_budget",
    "translate", "translation_task",
]  # fmt: skip

CASES = [
    Case(
        name="shift_right",
        make_inputs=make_shift_inputs,
        call=call_shift,
        describe=describe_shift,
        hints=shift_hints,
        labels={
            "tgt_in": "the decoder input",
            "tgt_unchanged": "whether tgt was left as it was (not modified in place)",
        },
        atol=0.0,
        rtol=0.0,
    ),
    Case(
        name="translation_loss",
        make_inputs=make_loss_inputs,
        call=call_loss,
        describe=describe_loss,
        hints=loss_hints,
        labels=LOSS_LABELS,
        atol=1e-9,
        rtol=1e-7,
    ),
    Case(
        name="translation_loss__gradients",
        make_inputs=make_loss_inputs,
        call=call_loss_gradients,
        describe=describe_loss,
        hints=loss_hints,
        labels=LOSS_LABELS,
        atol=1e-9,
        rtol=1e-7,
    ),
    Case(
        name="TinyTranslator",
        make_inputs=make_translator_inputs,
        call=call_translator,
        describe=describe_translator,
        hints=translator_hints,
        labels={
            "logits": "the logits of forward(src, tgt_in)",
            "memory": "encode(src) at the real positions",
        },
        atol=TRANSLATOR_ATOL,
        rtol=TRANSLATOR_RTOL,
    ),
    Case(
        name="TinyTranslator__torch",
        make_inputs=make_translator_inputs,
        call=call_translator,
        describe=lambda p: "against nn.Transformer with the same weights, " + describe_translator(p),
        hints=translator_hints,
        labels={"logits": "the logits of forward(src, tgt_in)"},
        atol=TRANSLATOR_ATOL,
        rtol=TRANSLATOR_RTOL,
    ),
    Case(
        name="train_step",
        make_inputs=make_train_inputs,
        call=call_train,
        describe=describe_train,
        hints=train_hints,
        labels=TRAIN_LABELS,
        atol=1e-8,
        rtol=1e-6,
    ),
    Case(
        name="greedy_decode_cached",
        make_inputs=make_cached_decode_inputs,
        call=call_cached_decode,
        describe=describe_cached_decode,
        hints=cached_decode_hints,
        labels=DECODE_LABELS,
        atol=0.0,
        rtol=0.0,
    ),
    Case(
        name="greedy_decode_cached__counts",
        make_inputs=make_cached_decode_inputs,
        call=call_cached_decode_counts,
        describe=describe_cached_counts,
        hints=cached_decode_hints,
        labels=DECODE_LABELS,
        atol=0.0,
        rtol=0.0,
    ),
    Case(
        name="sample_next_token",
        make_inputs=make_sample_inputs,
        call=call_sample,
        describe=describe_sample,
        hints=sample_hints,
        labels={"ids": "the array of sampled ids"},
        atol=0.0,
        rtol=0.0,
    ),
    Case(
        name="sample_next_token__limits",
        make_inputs=make_sample_inputs,
        call=call_sample,
        describe=lambda p: "a limit of sampling, " + describe_sample(p),
        hints=sample_hints,
        labels={"ids": "the array of sampled ids"},
        atol=0.0,
        rtol=0.0,
    ),
]
