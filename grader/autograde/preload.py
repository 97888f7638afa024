"""Imported once by the fork server, so that each grading child starts with it loaded.

Only imports, never computation: a child forked from a process whose torch has started its
thread pool can hang. One intra-op thread keeps the pool from ever starting here and keeps
each child to one core, so that --workers children share the machine fairly.
"""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ["MPLBACKEND"] = "Agg"

import numpy  # noqa: E402,F401
import torch  # noqa: E402

torch.set_num_threads(1)

# gradcheck and the key-padding paths of nn.Transformer*Layer import these lazily (~0.5 s)
import IPython.core.interactiveshell  # noqa: E402,F401
import matplotlib.pyplot  # noqa: E402,F401
import sympy  # noqa: E402,F401
import torch.fx.experimental.symbolic_shapes  # noqa: E402,F401

import grader.autograde.execution  # noqa: E402,F401
import grader.checks  # noqa: E402,F401
from grader.exercises import all_exercises  # noqa: E402

all_exercises()
