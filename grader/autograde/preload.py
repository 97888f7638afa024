"""Imported once by the fork server, so that each grading child starts with it loaded.

What a notebook needs and nothing the learner must not have: numpy, torch, IPython (with the
modules its shell imports when it is made, ~40 ms a job), sympy
(gradcheck and some torch paths import it lazily, ~0.5 s) and the learner package with its
case builders. Not matplotlib (0.35 s): no exercise notebook plots; a learner who does pays
for it in their own child. Never ``grader.reference`` or ``grader.exercises``: a child
is a copy of this process's memory, so whatever is imported here is in every child.

Only imports, never computation: a child forked from a process whose torch has started its
thread pool can hang. One intra-op thread keeps the pool from ever starting here and keeps
each child to one core, so that --workers children share the machine fairly.
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ["MPLBACKEND"] = "Agg"

import numpy  # noqa: E402,F401
import numpy.random  # noqa: E402,F401  (numpy 2.4 imports it lazily: ~130 ms in every child that draws a case)
import torch  # noqa: E402

torch.set_num_threads(1)

# the shell, and what an InteractiveShell imports when it is made (so no child imports them)
import IPython.core.application  # noqa: E402,F401
import IPython.core.completer  # noqa: E402,F401
import IPython.core.completerlib  # noqa: E402,F401
import IPython.core.crashhandler  # noqa: E402,F401
import IPython.core.interactiveshell  # noqa: E402,F401
import IPython.core.magics  # noqa: E402,F401
import IPython.core.oinspect  # noqa: E402,F401
import sympy  # noqa: E402,F401
import torch.fx.experimental.symbolic_shapes  # noqa: E402,F401

import attention_learner.blocks  # noqa: E402,F401
import attention_learner.checks  # noqa: E402,F401
import attention_learner.recording  # noqa: E402,F401
import grader.autograde.execution  # noqa: E402,F401
from attention_learner.cases import all_cases  # noqa: E402

all_cases()  # every chapter's case module, loaded once here rather than in every child
