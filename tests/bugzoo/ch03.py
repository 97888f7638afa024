"""Wrong implementations of chapter 3's exercises, as learners write them."""

from tests.bugzoo import Bug

ASSIGNMENT = "03_scaled_dot_product"

_NUMPY_TEMPLATE = """
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ np.swapaxes(K, -1, -2) {scale}
    if mask is not None:
        {before}
    scores = scores - scores.max(axis={axis}, keepdims=True)
    weights = np.exp(scores)
    weights = weights / weights.sum(axis={axis}, keepdims=True)
    {after}
    return weights @ V, weights
"""


def _numpy(
    scale="/ math.sqrt(Q.shape[-1])",
    before="scores = np.where(mask, scores, -np.inf)",
    after="weights = np.nan_to_num(weights)",
    axis="-1",
):
    return _NUMPY_TEMPLATE.format(scale=scale, before=before, after=after, axis=axis)


BUGS = [
    Bug("scaled_dot_product_attention", "no-scaling", _numpy(scale=""), expect="not divided by sqrt(d_k)"),
    Bug(
        "scaled_dot_product_attention",
        "scaled-by-d_k",
        _numpy(scale="/ Q.shape[-1]"),
        expect="divided by d_k instead of sqrt(d_k)",
    ),
    Bug("scaled_dot_product_attention", "softmax-over-queries", _numpy(axis="-2"), expect="wrong axis"),
    Bug(
        "scaled_dot_product_attention",
        "inverted-mask",
        _numpy(before="scores = np.where(mask, -np.inf, scores)"),
        expect="the mask is inverted",
    ),
    Bug(
        "scaled_dot_product_attention",
        "mask-after-softmax",
        _numpy(before="pass", after="weights = weights * mask if mask is not None else weights"),
        expect="applied after the softmax",
    ),
    Bug("scaled_dot_product_attention", "nan-on-fully-masked-rows", _numpy(after=""), expect="came out NaN"),
    Bug(
        "scaled_dot_product_attention",
        "uniform-on-fully-masked-rows",
        _numpy(before="scores = np.where(mask, scores, -1e9)"),
        expect="uniform weights",
    ),
    Bug(
        "scaled_dot_product_attention",
        "max-before-masking",
        """
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(Q.shape[-1])
    scores = scores - scores.max(axis=-1, keepdims=True)  # stable ... before the mask
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    weights = np.exp(scores)
    weights = np.nan_to_num(weights / weights.sum(axis=-1, keepdims=True))
    return weights @ V, weights
""",
        expect="subtracted before masking",
    ),
    Bug(
        "scaled_dot_product_attention",
        "one-max-for-the-batch",
        _numpy(after="weights = np.nan_to_num(weights)").replace(
            "scores.max(axis=-1, keepdims=True)", "scores[np.isfinite(scores)].max()"
        ),
        expect="one maximum was subtracted for the whole array",
    ),
    Bug(
        "scaled_dot_product_attention",
        "finite-fill-rows-zeroed",
        _numpy(
            before="scores = np.where(mask, scores, -1e9)",
            after="weights = weights * mask.any(axis=-1, keepdims=True) if mask is not None else weights",
        ),
        expect="real scores below the fill",
    ),
    Bug(
        "scaled_dot_product_attention",
        "squeezes-a-batch-of-one",
        _numpy(after="weights = np.nan_to_num(weights).squeeze()"),
        expect="has shape",
        names="squeeze",
    ),
    Bug(
        "scaled_dot_product_attention",
        "K-not-transposed-2d-only",
        """
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.T / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = np.nan_to_num(weights / weights.sum(axis=-1, keepdims=True))
    return weights @ V, weights
""",
        names="K.T",
    ),
    Bug(
        "scaled_dot_product_attention_torch",
        "no-scaling",
        """
def scaled_dot_product_attention_torch(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1))
    return weights @ V, weights
""",
        expect="not divided by sqrt(d_k)",
    ),
    Bug(
        "scaled_dot_product_attention_torch",
        "finite-fill-rows-zeroed",
        """
def scaled_dot_product_attention_torch(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is None:
        weights = torch.softmax(scores, dim=-1)
    else:
        weights = torch.softmax(scores.masked_fill(~mask, -1e9), dim=-1) * mask.any(-1, keepdim=True)
    return weights @ V, weights
""",
        expect="real scores below the fill",
    ),
    Bug(
        "scaled_dot_product_attention_torch",
        "max-before-masking",
        """
def scaled_dot_product_attention_torch(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    e = torch.exp(scores - scores.max(dim=-1, keepdim=True).values)
    if mask is not None:
        e = e * mask
    weights = e / e.sum(dim=-1, keepdim=True).clamp_min(1e-300)  # fully masked rows: 0
    return weights @ V, weights
""",
        expect="subtracted before masking",
    ),
    Bug(
        "scaled_dot_product_attention_torch",
        "detached-output",
        """
def scaled_dot_product_attention_torch(Q, K, V, mask=None):
    import numpy as np
    q, k, v = (t.detach().numpy() for t in (Q, K, V))
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(mask.numpy(), scores, -1e30)
    w = np.exp(scores - scores.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)
    return torch.tensor(w @ v), torch.tensor(w)
""",
        expect="carries gradients",
    ),
    Bug(
        "scaled_dot_product_attention_torch",
        "inverted-mask",
        """
def scaled_dot_product_attention_torch(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1))
    return weights @ V, weights
""",
        expect="the mask is inverted",
    ),
    Bug(
        "scaled_dot_product_attention_torch",
        "nan-on-fully-masked-rows",
        """
def scaled_dot_product_attention_torch(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ V, weights
""",
        expect="came out NaN",
    ),
    Bug(
        "scaled_dot_product_attention_torch",
        "additive-mask-nan-gradients",
        """
def scaled_dot_product_attention_torch(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is None:
        weights = torch.softmax(scores, dim=-1)
        return weights @ V, weights
    bias = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))  # an additive mask
    weights = torch.softmax(scores + bias, dim=-1)
    weights = torch.where(mask.any(dim=-1, keepdim=True), weights, torch.zeros(()))
    return weights @ V, weights  # right forward pass, NaN gradients on fully masked rows
""",
        expect="the gradient with respect to Q has",
        names="additive mask",
    ),
    Bug(
        "softmax_jacobian",
        "sign-flipped",
        """
def softmax_jacobian(p):
    return np.outer(p, p) - np.diag(p)
""",
        expect="sign is flipped",
    ),
    Bug(
        "softmax_jacobian",
        "diagonal-only",
        """
def softmax_jacobian(p):
    return np.diag(p * (1 - p))
""",
        names="off-diagonal",
    ),
    Bug(
        "softmax_jacobian",
        "missing-diag",
        """
def softmax_jacobian(p):
    return -np.outer(p, p)
""",
        expect="diagonal term diag(p) is missing",
    ),
]
