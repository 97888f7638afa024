"""Known-wrong implementations of chapter 5's exercises (causal_mask, padding_mask,
EncoderLayer, DecoderLayer), as learners write them. The notebook's setup cell provides
torch, nn and the reference MultiHeadAttention."""

from tests.bugzoo import Bug

ASSIGNMENT = "05_transformer_attention"

_ENCODER_INIT = """
class EncoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
"""

_DECODER_INIT = """
class DecoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.cross_attn = MultiHeadAttention(d_model, num_heads)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
"""


def _decoder(self_mask: str, cross: str = "y, memory, memory", memory_mask: str = "mem") -> str:
    """A post-norm decoder layer whose self-attention mask and cross-attention call vary."""
    return (
        _DECODER_INIT
        + f"""
    def forward(self, y, memory, tgt_pad_mask=None, memory_pad_mask=None):
        n = y.shape[1]
        self_mask = {self_mask}
        if tgt_pad_mask is not None:
            self_mask = self_mask & tgt_pad_mask[:, None, None, :]
        mem = None if memory_pad_mask is None else memory_pad_mask[:, None, None, :]
        y = self.norm1(y + self.self_attn(y, y, y, self_mask)[0])
        attended, cross_weights = self.cross_attn({cross}, {memory_mask})
        y = self.norm2(y + attended)
        return self.norm3(y + self.ff(y)), cross_weights
"""
    )


BUGS = [
    # ---------------------------------------------------------------- causal_mask
    Bug(
        exercise="causal_mask",
        name="upper_triangle",
        code="""
def causal_mask(n):
    return torch.triu(torch.ones(n, n, dtype=torch.bool))
""",
        expect="upper triangle",
    ),
    Bug(
        exercise="causal_mask",
        name="sees_the_next_position",
        code="""
def causal_mask(n):
    return torch.tril(torch.ones(n, n, dtype=torch.bool), diagonal=1)
""",
        expect="lets position i see position i + 1",
    ),
    Bug(
        exercise="causal_mask",
        name="diagonal_left_out",
        code="""
def causal_mask(n):
    return torch.tril(torch.ones(n, n, dtype=torch.bool), diagonal=-1)
""",
        expect="leaves out the diagonal",
    ),
    Bug(
        exercise="causal_mask",
        name="future_mask_as_in_nn_transformer",
        code="""
def causal_mask(n):
    return torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)
""",
        expect="inverted",
    ),
    Bug(
        exercise="causal_mask",
        name="float_mask",
        code="""
def causal_mask(n):
    return torch.tril(torch.ones(n, n))
""",
        expect="bool",
    ),
    # ---------------------------------------------------------------- padding_mask
    Bug(
        exercise="padding_mask",
        name="inverted",
        code="""
def padding_mask(lengths, max_len):
    return torch.arange(max_len)[None, :] >= lengths[:, None]
""",
        expect="inverted",
    ),
    Bug(
        exercise="padding_mask",
        name="off_by_one",
        code="""
def padding_mask(lengths, max_len):
    return torch.arange(max_len)[None, :] <= lengths[:, None]
""",
        expect="off by one",
    ),
    Bug(
        exercise="padding_mask",
        name="float_mask",
        code="""
def padding_mask(lengths, max_len):
    return (torch.arange(max_len)[None, :] < lengths[:, None]).float()
""",
        expect="bool",
    ),
    Bug(
        exercise="padding_mask",
        name="transposed",
        code="""
def padding_mask(lengths, max_len):
    return torch.arange(max_len)[:, None] < lengths[None, :]
""",
        expect="one row per sequence",
    ),
    # ---------------------------------------------------------------- EncoderLayer
    Bug(
        exercise="EncoderLayer",
        name="pre_norm",
        code=_ENCODER_INIT
        + """
    def forward(self, x, pad_mask=None):
        mask = None if pad_mask is None else pad_mask[:, None, None, :]
        h = self.norm1(x)
        x = x + self.self_attn(h, h, h, mask)[0]
        return x + self.ff(self.norm2(x))
""",
        expect="pre-norm",
    ),
    Bug(
        exercise="EncoderLayer",
        name="attention_residual_missing",
        code=_ENCODER_INIT
        + """
    def forward(self, x, pad_mask=None):
        mask = None if pad_mask is None else pad_mask[:, None, None, :]
        x = self.norm1(self.self_attn(x, x, x, mask)[0])
        return self.norm2(x + self.ff(x))
""",
        expect="residual",
    ),
    Bug(
        exercise="EncoderLayer",
        name="feed_forward_residual_missing",
        code=_ENCODER_INIT
        + """
    def forward(self, x, pad_mask=None):
        mask = None if pad_mask is None else pad_mask[:, None, None, :]
        x = self.norm1(x + self.self_attn(x, x, x, mask)[0])
        return self.norm2(self.ff(x))
""",
        expect="the residual connection around the feed-forward network is missing",
    ),
    Bug(
        exercise="EncoderLayer",
        name="padding_mask_inverted",
        code=_ENCODER_INIT
        + """
    def forward(self, x, pad_mask=None):
        mask = None if pad_mask is None else ~pad_mask[:, None, None, :]
        x = self.norm1(x + self.self_attn(x, x, x, mask)[0])
        return self.norm2(x + self.ff(x))
""",
        expect="the padding mask is inverted",
    ),
    Bug(
        exercise="EncoderLayer",
        name="padding_mask_ignored",
        code=_ENCODER_INIT
        + """
    def forward(self, x, pad_mask=None):
        x = self.norm1(x + self.self_attn(x, x, x)[0])
        return self.norm2(x + self.ff(x))
""",
        expect="padding",
    ),
    Bug(
        exercise="EncoderLayer",
        name="additive_float_mask",
        code=_ENCODER_INIT
        + """
    def forward(self, x, pad_mask=None):
        mask = None
        if pad_mask is not None:  # the additive convention of other libraries: 0 or -inf
            mask = torch.zeros(pad_mask.shape).masked_fill(~pad_mask, float("-inf"))
            mask = mask[:, None, None, :]
        x = self.norm1(x + self.self_attn(x, x, x, mask)[0])
        return self.norm2(x + self.ff(x))
""",
        expect="inverted",
    ),
    Bug(
        exercise="EncoderLayer",
        name="padding_masks_queries",
        code=_ENCODER_INIT
        + """
    def forward(self, x, pad_mask=None):
        mask = None if pad_mask is None else pad_mask[:, None, :, None]
        x = self.norm1(x + self.self_attn(x, x, x, mask)[0])
        return self.norm2(x + self.ff(x))
""",
        expect="padded queries",
    ),
    # ---------------------------------------------------------------- DecoderLayer
    Bug(
        exercise="DecoderLayer",
        name="no_causal_mask",
        code=_decoder("torch.ones(n, n, dtype=torch.bool)"),
        expect="no causal mask",
    ),
    Bug(
        exercise="DecoderLayer",
        name="causal_mask_hides_diagonal",
        code=_decoder("torch.tril(torch.ones(n, n, dtype=torch.bool), diagonal=-1)"),
        expect="hides the diagonal",
    ),
    Bug(
        exercise="DecoderLayer",
        name="future_mask_convention",
        code=_decoder("torch.triu(torch.ones(n, n, dtype=torch.bool), diagonal=1)"),
        expect="looked into the future",
    ),
    Bug(
        exercise="DecoderLayer",
        name="cross_attention_keys_from_y",
        code=_decoder("torch.ones(n, n, dtype=torch.bool).tril()", cross="y, y, y"),
        expect="keys and values from y",
    ),
    Bug(
        exercise="DecoderLayer",
        name="memory_padding_ignored",
        code=_decoder("torch.ones(n, n, dtype=torch.bool).tril()", memory_mask="None"),
        expect="memory",
    ),
    Bug(
        exercise="DecoderLayer",
        name="pre_norm",
        code=_DECODER_INIT
        + """
    def forward(self, y, memory, tgt_pad_mask=None, memory_pad_mask=None):
        n = y.shape[1]
        self_mask = torch.ones(n, n, dtype=torch.bool).tril()
        if tgt_pad_mask is not None:
            self_mask = self_mask & tgt_pad_mask[:, None, None, :]
        mem = None if memory_pad_mask is None else memory_pad_mask[:, None, None, :]
        h = self.norm1(y)
        y = y + self.self_attn(h, h, h, self_mask)[0]
        attended, cross_weights = self.cross_attn(self.norm2(y), memory, memory, mem)
        y = y + attended
        return y + self.ff(self.norm3(y)), cross_weights
""",
        expect="pre-norm",
    ),
]
