"""The reference package: independent implementations of every exercise of the course.

Narrative pages, figures and hidden tests import from here; learners' notebooks never do,
except for locked setup cells that provide earlier chapters' pieces.
"""

from grader.reference.scaled_dot_product import (
    scaled_dot_product_attention,
    scaled_dot_product_attention_torch,
)
from grader.reference.softmax import masked_softmax, softmax, softmax_jacobian

__all__ = [
    "masked_softmax",
    "scaled_dot_product_attention",
    "scaled_dot_product_attention_torch",
    "softmax",
    "softmax_jacobian",
]
