"""Imported once by the fork server, so that each grading child starts with it loaded.

What a notebook needs and nothing the learner must not have: numpy, torch, IPython, sympy
(gradcheck and some torch paths import it lazily, ~0.5 s) and the learner package with its
case builders. Not matplotlib (0.35 s): no exercise notebook plots; a learner who does pays
for it in their own child. Never ``grader.reference`` or ``grader.exercises``: a child
is a copy of this process's memory, so whatever is imported here is in every child.

Only imports, never computation: a child forked from a process whose torch has started its
thread pool can hang. One intra-op thread keeps the pool from ever starting here and keeps
each child to one core, so that --workers children share the machine fairly.
"""

import importlib
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ["MPLBACKEND"] = "Agg"

import numpy  # noqa: E402,F401
import torch  # noqa: E402

torch.set_num_threads(1)

import IPython.core.interactiveshell  # noqa: E402,F401
import sympy  # noqa: E402,F401
import torch.fx.experimental.symbolic_shapes  # noqa: E402,F401

import grader.autograde.execution  # noqa: E402,F401

try:
    learner = importlib.import_module("attention_learner")
except ImportError:  # pragma: no cover - a checkout without the learner package
    learner = None
if learner is not None:
    for name in ("attention_learner.checks", "attention_learner.recording", "attention_learner.blocks"):
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    try:
        from attention_learner.cases import all_cases

        all_cases()
    except ImportError:
        pass
