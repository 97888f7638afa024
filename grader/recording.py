"""Moved to the learner package: :mod:`attention_learner.recording` (same interface)."""

from attention_learner.recording import *  # noqa: F401,F403
from attention_learner.recording import __all__  # noqa: F401
