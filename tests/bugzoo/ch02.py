"""Wrong implementations of chapter 2's exercises, as a learner might write them."""

from tests.bugzoo import Bug

ASSIGNMENT = "02_queries_keys_values"

BUGS = [
    # ---------------------------------------------------------------- dot_scores
    Bug(
        exercise="dot_scores",
        name="scaled_scores",
        code="""
def dot_scores(q, K):
    return K @ q / np.sqrt(len(q))
""",
        expect="divided by sqrt(d)",
    ),
    Bug(
        exercise="dot_scores",
        name="query_times_keys_untransposed",
        code="""
def dot_scores(q, K):
    return q @ K
""",
        expect="dot_scores raised ValueError",
        names="transpose",
    ),
    Bug(
        exercise="dot_scores",
        name="row_matrix_instead_of_vector",
        code="""
def dot_scores(q, K):
    return q[None, :] @ K.T
""",
        expect="flat vector of n scores",
    ),
    # ---------------------------------------------------------------- softmax
    Bug(
        exercise="softmax",
        name="no_max_subtraction",
        code="""
def softmax(z, axis=-1):
    e = np.exp(z)
    return e / np.sum(e, axis=axis, keepdims=True)
""",
        expect="the maximum was not subtracted",
    ),
    Bug(
        exercise="softmax",
        name="ignores_axis",
        code="""
def softmax(z, axis=-1):
    e = np.exp(z - np.max(z, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)
""",
        expect="over the last axis whatever `axis` says",
    ),
    Bug(
        exercise="softmax",
        name="normalised_over_whole_array",
        code="""
def softmax(z, axis=-1):
    e = np.exp(z - np.max(z))
    return e / np.sum(e)
""",
        expect="over the whole array",
    ),
    Bug(
        exercise="softmax",
        name="no_keepdims",
        code="""
def softmax(z, axis=-1):
    e = np.exp(z - np.max(z, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis)
""",
        expect="softmax raised ValueError",
        names="keepdims",
    ),
    Bug(
        exercise="softmax",
        name="no_axis_argument",
        code="""
def softmax(z):
    e = np.exp(z - np.max(z, axis=-1, keepdims=True))
    return e / np.sum(e, axis=-1, keepdims=True)
""",
        expect="unexpected keyword argument 'axis'",
    ),
    # ---------------------------------------------------------------- attend
    Bug(
        exercise="attend",
        name="scaled_scores",
        code="""
def attend(q, K, V):
    weights = softmax(dot_scores(q, K) / np.sqrt(K.shape[1]))
    return weights @ V, weights
""",
        expect="this chapter's attention is unscaled",
    ),
    Bug(
        exercise="attend",
        name="weights_not_normalised",
        code="""
def attend(q, K, V):
    weights = np.exp(dot_scores(q, K))
    return weights @ V, weights
""",
        expect="the weights were not normalised",
    ),
    Bug(
        exercise="attend",
        name="hard_argmax",
        code="""
def attend(q, K, V):
    scores = dot_scores(q, K)
    return V[np.argmax(scores)], softmax(scores)
""",
        expect="only the best-matching value was returned",
    ),
    Bug(
        exercise="attend",
        name="averages_keys",
        code="""
def attend(q, K, V):
    weights = softmax(dot_scores(q, K))
    return weights @ K, weights
""",
        expect="size of a key",
    ),
    # ---------------------------------------------------------------- project_qkv
    Bug(
        exercise="project_qkv",
        name="nn_linear_transpose",
        code="""
def project_qkv(X, W_q, W_k, W_v):
    return X @ W_q.T, X @ W_k.T, X @ W_v.T
""",
        expect="project_qkv raised ValueError",
        names="W.T",
    ),
    Bug(
        exercise="project_qkv",
        name="queries_and_keys_swapped",
        code="""
def project_qkv(X, W_q, W_k, W_v):
    return X @ W_k, X @ W_q, X @ W_v
""",
        expect="queries and keys were swapped",
    ),
    Bug(
        exercise="project_qkv",
        name="column_vector_convention",
        code="""
def project_qkv(X, W_q, W_k, W_v):
    return W_q.T @ X.T, W_k.T @ X.T, W_v.T @ X.T
""",
        expect="the last two axes look swapped",
    ),
    # ---------------------------------------------------------------- dot_product_attention
    Bug(
        exercise="dot_product_attention",
        name="scaled_scores",
        code="""
def dot_product_attention(Q, K, V):
    weights = softmax(Q @ K.T / np.sqrt(Q.shape[-1]), axis=-1)
    return weights @ V, weights
""",
        expect="this chapter's attention is unscaled",
    ),
    Bug(
        exercise="dot_product_attention",
        name="softmax_over_queries",
        code="""
def dot_product_attention(Q, K, V):
    weights = softmax(Q @ K.T, axis=0)
    return weights @ V, weights
""",
        expect="over the queries (axis 0)",
    ),
    Bug(
        exercise="dot_product_attention",
        name="naive_softmax_inline",
        code="""
def dot_product_attention(Q, K, V):
    e = np.exp(Q @ K.T)
    weights = e / e.sum(axis=-1, keepdims=True)
    return weights @ V, weights
""",
        expect="the maximum was not subtracted",
    ),
    Bug(
        exercise="dot_product_attention",
        name="weights_transposed",
        code="""
def dot_product_attention(Q, K, V):
    weights = softmax(Q @ K.T, axis=-1)
    return weights @ V, weights.T
""",
        expect="the last two axes look swapped",
    ),
    Bug(
        exercise="softmax",
        name="max_subtracted_in_place",
        code="""
def softmax(z, axis=-1):
    z -= np.max(z, axis=axis, keepdims=True)
    np.exp(z, out=z)
    return z / z.sum(axis=axis, keepdims=True)
""",
        expect="modified one of its input arrays in place",
    ),
    Bug(
        exercise="dot_scores",
        name="float32_scores",
        code="""
def dot_scores(q, K):
    return (K @ q).astype(np.float32)
""",
        expect="An output is not float64",
    ),
    Bug(
        exercise="softmax",
        name="one_max_for_the_whole_array",
        code="""
def softmax(z, axis=-1):
    e = np.exp(z - np.max(z))
    return e / e.sum(axis=axis, keepdims=True)
""",
        expect="one maximum was subtracted for the whole array",
    ),
]
