"""The chapter 8 notebook's training task: the toy pairs as padded batches, and how long the
notebook's training cells may train for here (:func:`training_budget`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from attention_learner.cases.ch08.language import EOS, PAD, Vocab, make_pairs, source_vocab, target_vocab
from attention_learner.recording import is_recording


@dataclass
class TranslationTask:
    """Training and held-out pairs of the toy language pair, their vocabularies and batches.

    ``batch(pairs)`` -> (src (B, n_src), tgt (B, n_tgt)): English ids, and the French ids
    followed by <eos>, both padded with <pad> = 0 (the decoder's input is shift_right(tgt)).
    """

    source: Vocab
    target: Vocab
    train_pairs: list[tuple[list[str], list[str]]]
    test_pairs: list[tuple[list[str], list[str]]]

    def batch(self, pairs: Sequence[tuple[list[str], list[str]]]) -> tuple[torch.Tensor, torch.Tensor]:
        src = torch.full((len(pairs), max(len(e) for e, _ in pairs)), PAD, dtype=torch.long)
        tgt = torch.full((len(pairs), max(len(f) for _, f in pairs) + 1), PAD, dtype=torch.long)
        for b, (english, french) in enumerate(pairs):
            src[b, : len(english)] = torch.tensor(self.source.encode(english))
            tgt[b, : len(french) + 1] = torch.tensor(self.target.encode(french) + [EOS])
        return src, tgt

    def random_batch(self, size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """``size`` training pairs drawn at random (with replacement)."""
        rows = torch.randint(len(self.train_pairs), (size,), generator=generator).tolist()
        return self.batch([self.train_pairs[r] for r in rows])


def translation_task(n_train: int = 3000, n_test: int = 200, seed: int = 1) -> TranslationTask:
    """Chapter 6's pairs: ``n_train`` training pairs (1 to 3 clauses, seed ``seed``) and
    ``n_test`` held-out ones (seed ``seed + 1``), none of them a training sentence."""
    train = make_pairs(n_train, seed)
    test = make_pairs(n_test, seed + 1, exclude={tuple(e) for e, _ in train})
    return TranslationTask(source_vocab(), target_vocab(), train, test)


#: the environment variable that overrides :func:`training_budget` (seconds; 0 = no training)
BUDGET_VARIABLE = "ATTENTION_TRAINING_SECONDS"


def training_budget(seconds: float) -> float:
    """How many seconds the notebook's training cells may train for, here.

    ``seconds`` in a Jupyter kernel (yours, Colab's, Binder's, ``attention-check``'s); 0 when
    the grader runs the notebook (its checks record: grading never trains) and when no
    Jupyter kernel runs it (the course's own tests execute the cells in-process). The
    environment variable ATTENTION_TRAINING_SECONDS, when set, decides instead (e.g. 0 for
    plain ``nbgrader autograde``, whose cells time out after 30 s).
    """
    if is_recording():
        return 0.0
    if os.environ.get(BUDGET_VARIABLE):
        return float(os.environ[BUDGET_VARIABLE])
    ipython, zmqshell = sys.modules.get("IPython"), sys.modules.get("ipykernel.zmqshell")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None or zmqshell is None or not isinstance(shell, zmqshell.ZMQInteractiveShell):
        return 0.0
    return float(seconds)
