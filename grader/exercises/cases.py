"""The input generators moved to the learner package; this name stays for old imports."""

from attention_learner.inputs import attention_mask, describe_mask, normal

__all__ = ["attention_mask", "describe_mask", "normal"]
