"""attention-learner: what the exercise notebooks of "Attention, built by hand" import.

- :mod:`attention_learner.checks`: ``check`` and ``check_close``, the test cells' helpers;
- :mod:`attention_learner.cases`: every exercise's test cases (inputs, how the learner's code
  is called, descriptions and hints), without any implementation of an exercise, one module
  per chapter, listed in :mod:`attention_learner.registry`;
- what several chapters' cases share: :mod:`attention_learner.spec` (the ``Case`` record),
  :mod:`attention_learner.inputs` (random inputs and masks), :mod:`attention_learner.conventions`
  (the NumPy conventions checked on every NumPy exercise), :mod:`attention_learner.torch_cases`
  (tensors, gradients and modules of the torch exercises), :mod:`attention_learner.attention_hints`;
- :mod:`attention_learner.expected` and :mod:`attention_learner.recording`: the shipped
  expected values, and what a check records when the grader runs it;
- :mod:`attention_learner.blocks`: the building blocks later chapters give ready-made;
- :mod:`attention_learner.notebook_check` (``attention-check NOTEBOOK``, ``python -m
  attention_learner check NOTEBOOK``): a whole notebook checked, with
  :mod:`attention_learner.cell_rules`, the pass/fail rules the grader uses too;
- ``data/``: the expected values of the visible test cases.

``ALLOWED_IMPORTS`` lists, per assignment, the modules a notebook's given cells may import
(chapter 8's training cell draws its loss curve with matplotlib when it is there, and prints
it otherwise); a notebook never reaches the instructor's ``grader`` package or its reference.
"""

from importlib.metadata import PackageNotFoundError, version

try:  # the one version is learner/pyproject.toml's; an installed package knows it
    __version__ = version("attention-learner")
except PackageNotFoundError:  # imported from a folder that was never installed
    __version__ = "unknown"

_BASE = ("math", "numpy", "attention_learner", "attention_learner.checks")
_TORCH = ("torch", "torch.nn", "torch.nn.functional")

ALLOWED_IMPORTS: dict[str, tuple[str, ...]] = {
    "01_rnn_bottlenecks": _BASE,
    "02_queries_keys_values": _BASE,
    "03_scaled_dot_product": _BASE + _TORCH,
    "04_multi_head": _BASE + _TORCH + ("attention_learner.blocks",),
    "05_transformer_attention": _BASE + _TORCH + ("attention_learner.blocks",),
    "06_tiny_translator": _BASE + _TORCH,
    "07_attention_at_scale": _BASE + _TORCH + ("tracemalloc",),
    "08_build_train_decode": _BASE
    + _TORCH
    + ("time", "attention_learner.blocks", "attention_learner.cases.ch08", "matplotlib.pyplot"),
    "09_modern_attention": _BASE + _TORCH + ("torch.utils._python_dispatch", "torch.utils._pytree"),
}
