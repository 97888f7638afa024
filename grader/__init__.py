"""attention-course: the reference package, the exercises' judging and the grader."""

from attention_learner.startup import decline_iri_checker

__version__ = "0.1.0"

__all__ = ["decline_iri_checker"]
