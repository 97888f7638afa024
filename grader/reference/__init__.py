"""The reference package: independent implementations of every exercise of the course.

Narrative pages, figures and hidden tests import from here; learners' notebooks never do,
except for locked setup cells that provide earlier chapters' pieces.
"""

from grader.reference.at_scale import (
    CachedSelfAttention,
    KVCache,
    online_softmax_attention,
)
from grader.reference.modern_attention import (
    FlashAttention,
    RollingKVCache,
    apply_rope,
    gqa_attention,
    sliding_window_mask,
)
from grader.reference.multi_head import MultiHeadAttention, merge_heads, split_heads
from grader.reference.qkv import attend, dot_product_attention, dot_scores, project_qkv
from grader.reference.rnn import jacobian_norms, rnn_forward, rnn_step
from grader.reference.scaled_dot_product import (
    scaled_dot_product_attention,
    scaled_dot_product_attention_torch,
)
from grader.reference.softmax import masked_softmax, softmax, softmax_jacobian
from grader.reference.transformer import DecoderLayer, EncoderLayer, causal_mask, padding_mask
from grader.reference.translator import greedy_decode, positional_encoding

__all__ = [
    "attend",
    "CachedSelfAttention",
    "KVCache",
    "online_softmax_attention",
    "dot_product_attention",
    "dot_scores",
    "greedy_decode",
    "jacobian_norms",
    "project_qkv",
    "rnn_forward",
    "rnn_step",
    "DecoderLayer",
    "EncoderLayer",
    "MultiHeadAttention",
    "causal_mask",
    "merge_heads",
    "padding_mask",
    "positional_encoding",
    "split_heads",
    "masked_softmax",
    "scaled_dot_product_attention",
    "scaled_dot_product_attention_torch",
    "softmax",
    "softmax_jacobian",
    "apply_rope",
    "gqa_attention",
    "sliding_window_mask",
    "RollingKVCache",
    "FlashAttention",
]
