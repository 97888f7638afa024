"""Wrong implementations of chapter 3's exercises, as learners write them."""

from tests.bugzoo import Bug

ASSIGNMENT = "03_scaled_dot_product"

_NUMPY_TEMPLATE = '''
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ np.swapaxes(K, -1, -2) {scale}
    if mask is not None:
        {before}
    scores = scores - scores.max(axis={axis}, keepdims=True)
    weights = np.exp(scores)
    weights = weights / weights.sum(axis={axis}, keepdims=True)
    {after}
    return weights @ V, weights
'''


def _numpy(scale="/ math.sqrt(Q.shape[-1])", before="scores = np.where(mask, scores, -np.inf)",
           after="weights = np.nan_to_num(weights)", axis="-1"):
    return _NUMPY_TEMPLATE.format(scale=scale, before=before, after=after, axis=axis)


BUGS = [
    Bug("scaled_dot_product_attention", "no-scaling", _numpy(scale=""),
        expect="not divided by sqrt(d_k)"),
    Bug("scaled_dot_product_attention", "scaled-by-d_k", _numpy(scale="/ Q.shape[-1]"),
        expect="divided by d_k instead of sqrt(d_k)"),
    Bug("scaled_dot_product_attention", "softmax-over-queries", _numpy(axis="-2"),
        expect="wrong axis"),
    Bug("scaled_dot_product_attention", "inverted-mask",
        _numpy(before="scores = np.where(mask, -np.inf, scores)"),
        expect="the mask is inverted"),
    Bug("scaled_dot_product_attention", "mask-after-softmax",
        _numpy(before="pass", after="weights = weights * mask if mask is not None else weights"),
        expect="applied after the softmax"),
    Bug("scaled_dot_product_attention", "nan-on-fully-masked-rows",
        _numpy(after=""), expect="came out NaN"),
    Bug("scaled_dot_product_attention", "uniform-on-fully-masked-rows",
        _numpy(before="scores = np.where(mask, scores, -1e9)"),
        expect="uniform weights"),
    Bug("scaled_dot_product_attention", "K-not-transposed-2d-only", '''
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ K.T / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = np.nan_to_num(weights / weights.sum(axis=-1, keepdims=True))
    return weights @ V, weights
'''),
    Bug("scaled_dot_product_attention_torch", "no-scaling", '''
def scaled_dot_product_attention_torch(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1))
    return weights @ V, weights
''', expect="not divided by sqrt(d_k)"),
    Bug("scaled_dot_product_attention_torch", "detached-output", '''
def scaled_dot_product_attention_torch(Q, K, V, mask=None):
    import numpy as np
    q, k, v = (t.detach().numpy() for t in (Q, K, V))
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(mask.numpy(), scores, -1e30)
    w = np.exp(scores - scores.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)
    return torch.tensor(w @ v), torch.tensor(w)
''', expect="carries gradients"),
    Bug("scaled_dot_product_attention_torch", "inverted-mask", '''
def scaled_dot_product_attention_torch(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1))
    return weights @ V, weights
''', expect="the mask is inverted"),
    Bug("scaled_dot_product_attention_torch", "nan-on-fully-masked-rows", '''
def scaled_dot_product_attention_torch(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ V, weights
''', expect="came out NaN"),
    Bug("scaled_dot_product_attention_torch", "additive-mask-nan-gradients", '''
def scaled_dot_product_attention_torch(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is None:
        weights = torch.softmax(scores, dim=-1)
        return weights @ V, weights
    bias = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))  # an additive mask
    weights = torch.softmax(scores + bias, dim=-1)
    weights = torch.where(mask.any(dim=-1, keepdim=True), weights, torch.zeros(()))
    return weights @ V, weights  # right forward pass, NaN gradients on fully masked rows
''', expect="the gradient with respect to Q has"),
    Bug("softmax_jacobian", "sign-flipped", '''
def softmax_jacobian(p):
    return np.outer(p, p) - np.diag(p)
''', expect="sign is flipped"),
    Bug("softmax_jacobian", "diagonal-only", '''
def softmax_jacobian(p):
    return np.diag(p * (1 - p))
'''),
    Bug("softmax_jacobian", "missing-diag", '''
def softmax_jacobian(p):
    return -np.outer(p, p)
''', expect="diagonal term diag(p) is missing"),
]
