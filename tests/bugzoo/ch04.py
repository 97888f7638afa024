"""Known-wrong implementations of chapter 4's exercises (split_heads, merge_heads,
MultiHeadAttention), as learners write them. The notebook's setup cell provides torch, math,
nn and scaled_dot_product_attention_torch."""

from tests.bugzoo import Bug

ASSIGNMENT = "04_multi_head"

_MHA_INIT = """
    def __init__(self, d_model, num_heads, bias=True):
        super().__init__()
        self.num_heads = num_heads
        self.d_head = d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)
"""


def _mha(forward: str, init: str = _MHA_INIT) -> str:
    """A MultiHeadAttention class with the given constructor and forward bodies."""
    return "class MultiHeadAttention(nn.Module):" + init + forward


BUGS = [
    # ---------------------------------------------------------------- split_heads
    Bug(
        exercise="split_heads",
        name="view_without_transpose",
        code="""
def split_heads(X, num_heads):
    B, n, d_model = X.shape
    return X.view(B, num_heads, n, d_model // num_heads)
""",
        expect="without moving the head axis",
    ),
    Bug(
        exercise="split_heads",
        name="transpose_forgotten",
        code="""
def split_heads(X, num_heads):
    B, n, d_model = X.shape
    return X.view(B, n, num_heads, d_model // num_heads)
""",
        expect="transpose(1, 2) is missing",
    ),
    Bug(
        exercise="split_heads",
        name="interleaved_features",
        code="""
def split_heads(X, num_heads):
    B, n, d_model = X.shape
    return X.reshape(B, n, d_model // num_heads, num_heads).permute(0, 3, 1, 2)
""",
        expect="one by one",
    ),
    # ---------------------------------------------------------------- merge_heads
    Bug(
        exercise="merge_heads",
        name="reshape_without_transpose",
        code="""
def merge_heads(X):
    B, h, n, d_head = X.shape
    return X.reshape(B, n, h * d_head)
""",
        expect="without moving the head axis back",
    ),
    Bug(
        exercise="merge_heads",
        name="view_after_transpose",
        code="""
def merge_heads(X):
    B, h, n, d_head = X.shape
    return X.transpose(1, 2).view(B, n, h * d_head)
""",
        expect="reshape",
    ),
    Bug(
        exercise="merge_heads",
        name="flatten_last_two_axes",
        code="""
def merge_heads(X):
    return X.flatten(-2)
""",
        expect="Only the last two axes",
    ),
    # ---------------------------------------------------------------- MultiHeadAttention
    Bug(
        exercise="MultiHeadAttention",
        name="heads_view_without_transpose",
        code=_mha("""
    def forward(self, query, key, value, mask=None):
        B, n_q, d_model = query.shape
        n_k = key.shape[1]
        h = self.num_heads
        q = self.W_q(query).view(B, h, n_q, self.d_head)
        k = self.W_k(key).view(B, h, n_k, self.d_head)
        v = self.W_v(value).view(B, h, n_k, self.d_head)
        heads, weights = scaled_dot_product_attention_torch(q, k, v, mask)
        return self.W_o(heads.reshape(B, n_q, d_model)), weights
"""),
        expect="without moving the head axis",
    ),
    Bug(
        exercise="MultiHeadAttention",
        name="scaled_by_d_model",
        code=_mha("""
    def forward(self, query, key, value, mask=None):
        B, n_q, d_model = query.shape
        q = split_heads(self.W_q(query), self.num_heads)
        k = split_heads(self.W_k(key), self.num_heads)
        v = split_heads(self.W_v(value), self.num_heads)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d_model)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return self.W_o(merge_heads(weights @ v)), weights
"""),
        expect="sqrt(d_model) instead of 1/sqrt(d_head)",
    ),
    Bug(
        exercise="MultiHeadAttention",
        name="output_projection_not_applied",
        code=_mha("""
    def forward(self, query, key, value, mask=None):
        q = split_heads(self.W_q(query), self.num_heads)
        k = split_heads(self.W_k(key), self.num_heads)
        v = split_heads(self.W_v(value), self.num_heads)
        heads, weights = scaled_dot_product_attention_torch(q, k, v, mask)
        return merge_heads(heads), weights
"""),
        expect="no output projection",
    ),
    Bug(
        exercise="MultiHeadAttention",
        name="no_W_o_at_all",
        code=_mha(
            """
    def forward(self, query, key, value, mask=None):
        q = split_heads(self.W_q(query), self.num_heads)
        k = split_heads(self.W_k(key), self.num_heads)
        v = split_heads(self.W_v(value), self.num_heads)
        heads, weights = scaled_dot_product_attention_torch(q, k, v, mask)
        return merge_heads(heads), weights
""",
            init="""
    def __init__(self, d_model, num_heads, bias=True):
        super().__init__()
        self.num_heads = num_heads
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
""",
        ),
        expect="the output projection",
    ),
    Bug(
        exercise="MultiHeadAttention",
        name="keys_and_values_from_query",
        code=_mha("""
    def forward(self, query, key, value, mask=None):
        q = split_heads(self.W_q(query), self.num_heads)
        k = split_heads(self.W_k(query), self.num_heads)
        v = split_heads(self.W_v(query), self.num_heads)
        heads, weights = scaled_dot_product_attention_torch(q, k, v, mask)
        return self.W_o(merge_heads(heads)), weights
"""),
        expect="computed from the query",
    ),
    Bug(
        # keys from the query, values from the value, attention written out: where n_q != n_k,
        # weights (n_q, n_q) @ v (n_k, d_head) raises. (The given attention, torch's CPU
        # scaled_dot_product_attention, checks no K/V length: it reads past V's end, and its
        # backward crashed the process natively, munmap_chunk.)
        exercise="MultiHeadAttention",
        name="keys_from_query",
        code=_mha("""
    def forward(self, query, key, value, mask=None):
        q = split_heads(self.W_q(query), self.num_heads)
        k = split_heads(self.W_k(query), self.num_heads)
        v = split_heads(self.W_v(value), self.num_heads)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return self.W_o(merge_heads(weights @ v)), weights
"""),
        # the visible cases have n_q != n_k, so it raises there, and the shape hint names it
        expect="keys or values were computed from the query",
    ),
    Bug(
        exercise="MultiHeadAttention",
        name="mask_inverted",
        code=_mha("""
    def forward(self, query, key, value, mask=None):
        q = split_heads(self.W_q(query), self.num_heads)
        k = split_heads(self.W_k(key), self.num_heads)
        v = split_heads(self.W_v(value), self.num_heads)
        if mask is not None:
            mask = ~mask  # "True means masked out", as in nn.MultiheadAttention
        heads, weights = scaled_dot_product_attention_torch(q, k, v, mask)
        return self.W_o(merge_heads(heads)), weights
"""),
        expect="mask is inverted",
    ),
    Bug(
        exercise="MultiHeadAttention",
        name="weights_averaged_over_heads",
        code=_mha("""
    def forward(self, query, key, value, mask=None):
        q = split_heads(self.W_q(query), self.num_heads)
        k = split_heads(self.W_k(key), self.num_heads)
        v = split_heads(self.W_v(value), self.num_heads)
        heads, weights = scaled_dot_product_attention_torch(q, k, v, mask)
        return self.W_o(merge_heads(heads)), weights.mean(dim=1)
"""),
        expect="not their mean",
    ),
    Bug(
        exercise="MultiHeadAttention",
        name="bias_argument_ignored",
        code=_mha(
            """
    def forward(self, query, key, value, mask=None):
        q = split_heads(self.W_q(query), self.num_heads)
        k = split_heads(self.W_k(key), self.num_heads)
        v = split_heads(self.W_v(value), self.num_heads)
        heads, weights = scaled_dot_product_attention_torch(q, k, v, mask)
        return self.W_o(merge_heads(heads)), weights
""",
            init=_MHA_INIT.replace("bias=bias", "bias=True"),
        ),
        expect="the number of bias vectors among W_q, W_k, W_v, W_o",
    ),
    Bug(
        exercise="MultiHeadAttention",
        name="bias_only_on_input_projections",
        code=_mha(
            """
    def forward(self, query, key, value, mask=None):
        q = split_heads(self.W_q(query), self.num_heads)
        k = split_heads(self.W_k(key), self.num_heads)
        v = split_heads(self.W_v(value), self.num_heads)
        heads, weights = scaled_dot_product_attention_torch(q, k, v, mask)
        return self.W_o(merge_heads(heads)), weights
""",
            init=_MHA_INIT.replace(
                "self.W_o = nn.Linear(d_model, d_model, bias=bias)", "self.W_o = nn.Linear(d_model, d_model)"
            ),
        ),
        expect="bias=False must build",
    ),
    Bug(
        exercise="MultiHeadAttention",
        name="scores_not_scaled",
        code=_mha("""
    def forward(self, query, key, value, mask=None):
        q = split_heads(self.W_q(query), self.num_heads)
        k = split_heads(self.W_k(key), self.num_heads)
        v = split_heads(self.W_v(value), self.num_heads)
        scores = q @ k.transpose(-2, -1)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return self.W_o(merge_heads(weights @ v)), weights
"""),
        expect="the scores were not divided by sqrt(d_head)",
    ),
    Bug(
        exercise="MultiHeadAttention",
        name="values_from_key",
        code=_mha("""
    def forward(self, query, key, value, mask=None):
        q = split_heads(self.W_q(query), self.num_heads)
        k = split_heads(self.W_k(key), self.num_heads)
        v = split_heads(self.W_v(key), self.num_heads)
        heads, weights = scaled_dot_product_attention_torch(q, k, v, mask)
        return self.W_o(merge_heads(heads)), weights
"""),
        expect="the values were computed from the key tensor",
    ),
    Bug(
        exercise="MultiHeadAttention",
        name="merge_does_not_undo_split",
        code=_mha("""
    def forward(self, query, key, value, mask=None):
        B, n_q, d_model = query.shape
        q = split_heads(self.W_q(query), self.num_heads)
        k = split_heads(self.W_k(key), self.num_heads)
        v = split_heads(self.W_v(value), self.num_heads)
        heads, weights = scaled_dot_product_attention_torch(q, k, v, mask)
        merged = heads.permute(0, 2, 3, 1).reshape(B, n_q, d_model)
        return self.W_o(merged), weights
"""),
        expect="the heads merged in another order than they were split",
    ),
]
