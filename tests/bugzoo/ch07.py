"""Wrong implementations of chapter 7's exercises, as learners write them."""

from tests.bugzoo import Bug

ASSIGNMENT = "07_attention_at_scale"

_ONLINE_TEMPLATE = """
def online_softmax_attention(Q, K, V, block_size, mask=None):
    n_q, d_k = Q.shape[-2:]
    n_k, d_v = V.shape[-2:]
    batch = np.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2], np.shape(mask)[:-2])
    m = np.full((*batch, n_q, 1), -np.inf)
    total = np.zeros((*batch, n_q, 1))
    acc = np.zeros((*batch, n_q, d_v))
    if mask is not None:
        mask = np.broadcast_to(mask, (*np.shape(mask)[:-1], n_k))
    for start in range({stop_range}):
        stop = min(start + block_size, n_k)
        s = Q @ np.swapaxes(K[..., start:stop, :], -1, -2) {scale}
        if mask is not None:
            s = np.where(mask[..., start:stop], s, -np.inf)
        m_new = {m_new}
        shift = np.where(np.isfinite(m_new), m_new, 0.0)
        p = np.exp(s - shift)
        correction = np.exp(np.where(np.isfinite(m), m - shift, 0.0))
        total = {total}
        acc = {acc}
        m = m_new
    return {result}
"""

_RIGHT = {
    "stop_range": "0, n_k, block_size",
    "scale": "/ math.sqrt(d_k)",
    "m_new": "np.maximum(m, s.max(axis=-1, keepdims=True))",
    "total": "correction * total + p.sum(axis=-1, keepdims=True)",
    "acc": "correction * acc + p @ V[..., start:stop, :]",
    "result": "np.divide(acc, total, out=np.zeros_like(acc), where=total > 0)",
}


def _online(**changes: str) -> str:
    return _ONLINE_TEMPLATE.format(**{**_RIGHT, **changes})


# the blocks merged by their log-sum-exp; a block with no visible key has top = 0 and l_b = 0,
# so its weight exp(top - new) must be guarded: it overflows when the scores so far are about
# -1000, and inf * 0 = NaN (without the guard it passed every notebook seed, and lost the
# extreme test cell on about 1 fresh draw in 20 before that cell had a case made for it;
# tests/test_fair_grading.py grades the guarded one as a correct style)
BLOCK_MERGE = """
def _block(Q, K_b, V_b, mask_b):
    s = Q @ np.swapaxes(K_b, -1, -2) / np.sqrt(Q.shape[-1])  # (..., n_q, b)
    if mask_b is not None:
        s = np.where(mask_b, s, -np.inf)
    top = s.max(axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    e = np.exp(s - top)
    return top, e.sum(axis=-1, keepdims=True), e @ V_b  # shift, sum, weighted values

def online_softmax_attention(Q, K, V, block_size, mask=None):
    if mask is not None:  # a last axis of 1 answers for every key
        mask = np.broadcast_to(mask, mask.shape[:-1] + K.shape[-2:-1])
    log_total, acc = None, None
    for a in range(0, K.shape[-2], block_size):
        b = a + block_size
        top, l_b, a_b = _block(Q, K[..., a:b, :], V[..., a:b, :], None if mask is None else mask[..., a:b])
        with np.errstate(divide="ignore"):
            log_b = top + np.log(l_b)  # log of this block's sum of exp(scores)
        if log_total is None:
            log_total, acc = log_b, np.where(l_b > 0, a_b / np.where(l_b > 0, l_b, 1.0), 0.0)
            continue
        new = np.logaddexp(log_total, log_b)
        keep = np.where(np.isfinite(new), np.exp(log_total - np.where(np.isfinite(new), new, 0.0)), 0.0)
        take = np.where(np.isfinite(new){GUARD}, np.exp(top - np.where(np.isfinite(new), new, 0.0)), 0.0)
        acc, log_total = keep * acc + take * a_b, new
    return acc
"""

_KV_TEMPLATE = """
class KVCache:
    def __init__(self):
        self.k = None
        self.v = None

    def __len__(self):
        return 0 if self.k is None else self.k.shape[-2]

    def append(self, k_new, v_new):
        if self.k is None:
            self.k, self.v = k_new, v_new
        else:
            self.k = {join_k}
            self.v = {join_v}
        return self.k, self.v
"""


def _cache(join: str) -> str:
    return _KV_TEMPLATE.format(
        join_k=join.format(old="self.k", new="k_new"), join_v=join.format(old="self.v", new="v_new")
    )


_CACHED_TEMPLATE = """
class CachedSelfAttention(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.d_head = d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)
        self.W_v = nn.Linear(d_model, d_model)
        self.W_o = nn.Linear(d_model, d_model)
        self.cache = KVCache()

    def reset(self):
        self.cache = KVCache()

    def forward(self, x_new):
        B, t_new, d_model = x_new.shape
        start = len(self.cache)

        def heads(x):
            return x.reshape(B, t_new, self.num_heads, self.d_head).transpose(1, 2)

        q = heads(self.W_q(x_new))
        k, v = {attend_to}
        positions = torch.arange(k.shape[-2])
        mask = {mask}
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.W_o(out.transpose(1, 2).reshape(B, t_new, d_model))
"""

_CACHED_RIGHT = {
    "attend_to": "self.cache.append(heads(self.W_k(x_new)), heads(self.W_v(x_new)))",
    "mask": "positions[None, :] <= positions[start:, None]",
}


def _cached(**changes: str) -> str:
    return _CACHED_TEMPLATE.format(**{**_CACHED_RIGHT, **changes})


WRONG_AXIS = "along an axis other than the sequence axis"
_APPEND = "self.cache.append(heads(self.W_k(x_new)), heads(self.W_v(x_new)))"
_REORDER = """self.cache.append(heads(self.W_k(x_new)), heads(self.W_v(x_new)))
        self.cache.k = torch.cat([self.cache.k[:, :, start:], self.cache.k[:, :, :start]], dim=-2)
        self.cache.v = torch.cat([self.cache.v[:, :, start:], self.cache.v[:, :, :start]], dim=-2)
        k, v = self.cache.k, self.cache.v"""

BUGS = [
    # ---------------------------------------------------------------- online softmax
    Bug(
        "online_softmax_attention",
        "no-accumulator-rescale",
        _online(acc="acc + p @ V[..., start:stop, :]"),
        expect="the accumulator was not rescaled",
    ),
    Bug(
        "online_softmax_attention",
        "no-sum-rescale",
        _online(total="total + p.sum(axis=-1, keepdims=True)"),
        expect="the running sum was not rescaled",
    ),
    Bug(
        "online_softmax_attention",
        "block-max",
        _online(m_new="s.max(axis=-1, keepdims=True)"),
        expect="shifted by its own max",
    ),
    Bug(
        "online_softmax_attention",
        "drops-last-partial-block",
        _online(stop_range="0, n_k - block_size + 1, block_size"),
        expect="dropped the last, partial block",
    ),
    Bug("online_softmax_attention", "no-scaling", _online(scale=""), expect="not divided by sqrt(d_k)"),
    Bug(
        "online_softmax_attention",
        "nan-on-fully-masked-rows",
        _online(result="acc / total"),
        expect="all masked must get an all-zero output",
    ),
    Bug(
        "online_softmax_attention",
        "no-max-at-all",
        _online(m_new="np.zeros_like(m)"),
        expect="no max subtracted",
    ),
    Bug(
        "online_softmax_attention",
        "whole-score-matrix",
        """
def online_softmax_attention(Q, K, V, block_size, mask=None):
    s = Q @ np.swapaxes(K, -1, -2) / math.sqrt(Q.shape[-1])
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    m = s.max(axis=-1, keepdims=True)
    p = np.exp(s - np.where(np.isfinite(m), m, 0.0))
    total = p.sum(axis=-1, keepdims=True)
    return np.divide(p @ V, total, out=np.zeros(p.shape[:-1] + V.shape[-1:]), where=total > 0)
""",
        expect="quarter of the",
    ),
    # named by the judging half's classic bugs too (grader.exercises.ch07.ONLINE_BUGS)
    Bug(
        "online_softmax_attention",
        "never-rescaled",
        _online(total="total + p.sum(axis=-1, keepdims=True)", acc="acc + p @ V[..., start:stop, :]"),
        expect="a rescale forgotten altogether",
    ),
    Bug(
        "online_softmax_attention",
        "rescaled-upwards",
        _online().replace("m - shift, 0.0", "shift - m, 0.0"),
        expect="a correction the wrong way round",
    ),
    Bug(
        "online_softmax_attention",
        "returns-inside-the-loop",
        _online().replace("        m = m_new\n", f"        m = m_new\n        return {_RIGHT['result']}\n"),
        expect="only the first block of keys counts",
    ),
    Bug(
        "online_softmax_attention",
        "overwrites-the-sums",
        _online(total="p.sum(axis=-1, keepdims=True)", acc="p @ V[..., start:stop, :]"),
        expect="only the last block of keys counts",
    ),
    Bug(
        "online_softmax_attention",
        "unguarded-hidden-block",
        BLOCK_MERGE.replace("{GUARD}", ""),
        expect="sees no key in some block after seeing one",
    ),
    # ---------------------------------------------------------------- KV cache
    Bug("KVCache", "prepends", _cache("torch.cat([{new}, {old}], dim=-2)"), expect="the cache prepends"),
    Bug("KVCache", "head-axis", _cache("torch.cat([{old}, {new}], dim=1)"), expect=WRONG_AXIS),
    Bug("KVCache", "feature-axis", _cache("torch.cat([{old}, {new}], dim=-1)"), expect=WRONG_AXIS),
    Bug("KVCache", "keeps-only-newest", _cache("{new}"), expect="keeps only the newest chunk"),
    Bug(
        "KVCache",
        "no-len",
        """
class KVCache:
    def __init__(self):
        self.k = None
        self.v = None

    def append(self, k_new, v_new):
        self.k = k_new if self.k is None else torch.cat([self.k, k_new], dim=-2)
        self.v = v_new if self.v is None else torch.cat([self.v, v_new], dim=-2)
        return self.k, self.v
""",
        expect="should define __len__",
    ),
    # named by the judging half's classic bugs too (grader.exercises.ch07.CACHE_BUGS)
    Bug(
        "KVCache",
        "not-stored",
        _KV_TEMPLATE.replace(
            "            self.k = {join_k}\n            self.v = {join_v}\n",
            "            return torch.cat([self.k, k_new], dim=-2), torch.cat([self.v, v_new], dim=-2)\n",
        ),
        expect="the cache was not updated",
    ),
    Bug(
        "KVCache",
        "first-chunk-twice",
        _KV_TEMPLATE.replace("        else:\n", "").replace(
            "            self.k = {join_k}\n            self.v = {join_v}\n",
            "        self.k = torch.cat([self.k, k_new], dim=-2)\n"
            "        self.v = torch.cat([self.v, v_new], dim=-2)\n",
        ),
        expect="the first chunk is in it twice",
    ),
    # ---------------------------------------------------------------- cached self-attention
    Bug(
        "CachedSelfAttention",
        "no-causal-limit-in-chunk",
        _cached(mask="None"),
        expect="no causal limit within the chunk",
    ),
    Bug(
        "CachedSelfAttention",
        "caches-queries",
        _cached(attend_to="self.cache.append(q, heads(self.W_v(x_new)))"),
        expect="stores the projected queries",
    ),
    Bug("CachedSelfAttention", "prepends", _cached(attend_to=_REORDER), expect="the cache prepends"),
    Bug(
        "CachedSelfAttention",
        "loop-over-heads-skips-head-0",
        _cached().replace(
            "        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)\n",
            "        out = torch.zeros_like(q)\n"
            "        for i in range(1, self.num_heads):  # off by one: head 0 is never computed\n"
            "            out[:, i] = F.scaled_dot_product_attention(\n"
            "                q[:, i], k[:, i], v[:, i], attn_mask=mask)\n",
        ),
        expect="head 0 of that chunk is wrong and heads 1-2 right",
    ),
    Bug(
        "CachedSelfAttention",
        "ignores-the-cache",
        _cached(
            attend_to="heads(self.W_k(x_new)), heads(self.W_v(x_new))",
            mask="positions[None, :] <= positions[:, None]",
        ),
        expect="the cached keys and values of earlier chunks were not used",
    ),
    Bug(
        "CachedSelfAttention",
        "mask-off-by-the-cache-length",
        _cached(mask="positions[None, :] <= positions[:t_new, None]"),
        expect="positions restart at 0",
    ),
    # named by the judging half's classic bugs too (grader.exercises.ch07.CACHED_BUGS)
    Bug(
        "CachedSelfAttention",
        "keys-and-values-swapped",
        _cached(attend_to="self.cache.append(heads(self.W_v(x_new)), heads(self.W_k(x_new)))"),
        expect="the keys and values are swapped",
    ),
    Bug(
        "CachedSelfAttention",
        "no-output-projection",
        _cached().replace(
            "return self.W_o(out.transpose(1, 2).reshape(B, t_new, d_model))",
            "return out.transpose(1, 2).reshape(B, t_new, d_model)",
        ),
        expect="the output projection W_o is missing",
    ),
    Bug(
        "CachedSelfAttention",
        "merge-without-transpose",
        _cached().replace("out.transpose(1, 2).reshape", "out.reshape"),
        expect="merged without the transpose",
    ),
    Bug(
        "CachedSelfAttention",
        "scaled-by-sqrt-d_model",
        _cached().replace("attn_mask=mask)", "attn_mask=mask, scale=1 / math.sqrt(d_model))"),
        expect="divided by sqrt(d_model)",
    ),
    Bug(
        "CachedSelfAttention",
        "appends-twice",
        _cached(
            attend_to=_APPEND + "\n        k, v = " + _APPEND,
            mask="positions[None, :] <= positions[-t_new:, None]",
        ),
        expect="appended to the cache twice",
    ),
]
