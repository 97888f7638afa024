"""Queries, keys and values: attention in three steps, for one query and for all (chapter 2).

For one query q (d,) over n tokens with keys K (n, d) and values V (n, d_v):

    scores   s = K q                  (n,)     s_i = q . k_i
    weights  a = softmax(s)           (n,)     a_i >= 0, sum_i a_i = 1
    context  c = a V = sum_i a_i v_i  (d_v,)

Queries, keys and values are three learned projections of the same tokens X (n, d_model):
Q = X W_q, K = X W_k, V = X W_v (row vectors). Stacking every query as a row of Q gives the
matrix form softmax(Q K^T) V. This chapter's attention is unscaled; chapter 3 divides the
scores by sqrt(d_k) and explains why.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from grader.reference.scaled_dot_product import scaled_dot_product_attention
from grader.reference.softmax import softmax


def dot_scores(q: np.ndarray, K: np.ndarray) -> np.ndarray:
    """How well each key matches the query: s_i = q . k_i for q (d,), K (n, d); returns (n,)."""
    return np.asarray(K, dtype=np.float64) @ np.asarray(q, dtype=np.float64)  # (n,)


def attend(q: np.ndarray, K: np.ndarray, V: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One query's attention, unscaled: returns (context (d_v,), weights (n,)).

    weights = softmax(K q) and context = weights V, the average of the values v_i weighted by
    how well their keys k_i match q.
    """
    weights = softmax(dot_scores(q, K))  # (n,)
    return weights @ np.asarray(V, dtype=np.float64), weights  # (d_v,), (n,)


def project_qkv(
    X: np.ndarray, W_q: np.ndarray, W_k: np.ndarray, W_v: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Queries, keys and values of the tokens X (n, d_model): (X W_q, X W_k, X W_v).

    W_q (d_model, d_k), W_k (d_model, d_k), W_v (d_model, d_v); returns Q (n, d_k),
    K (n, d_k), V (n, d_v).
    """
    X = np.asarray(X, dtype=np.float64)
    return X @ W_q, X @ W_k, X @ W_v  # (n, d_k), (n, d_k), (n, d_v)


def dot_product_attention(Q: np.ndarray, K: np.ndarray, V: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every query at once, unscaled: (softmax(Q K^T) V (n_q, d_v), softmax(Q K^T) (n_q, n_k)).

    Row i is :func:`attend` for the query Q[i]. This is chapter 3's scaled dot-product
    attention with the scale set to 1.
    """
    return scaled_dot_product_attention(Q, K, V, scale=1.0)


# ---------------------------------------------------------------- the pronoun example

PRONOUN_SENTENCE = "The tired cat did not cross the street because it was too wide".split()

TOKEN_FEATURES = ("thing", "animate", "extended", "pronoun", "says tired", "says wide")
"""The meaning of each embedding coordinate of the toy example.

thing: a noun phrase something can refer back to; animate: can be tired; extended: has a
width; pronoun: refers back to something; says tired / says wide: the property a predicate
attributes ("was too tired", "was too wide").
"""

KEY_FEATURES = ("thing", "animate", "extended")

_EMBEDDINGS = {
    "cat": {"thing": 1.0, "animate": 1.0},
    "street": {"thing": 1.0, "extended": 1.0},
    "it": {"pronoun": 1.0},
    "tired": {"says tired": 1.0},
    "wide": {"says wide": 1.0},
}


@dataclass(frozen=True)
class ToySentence:
    """Hand-built token vectors and projections for one sentence.

    X (n, d_model) has one row per token, one column per name in ``features``;
    W_q (d_model, d_k), W_k (d_model, d_k) and W_v (d_model, d_v) project them.
    """

    tokens: list[str]
    features: tuple[str, ...]
    key_features: tuple[str, ...]
    X: np.ndarray
    W_q: np.ndarray
    W_k: np.ndarray
    W_v: np.ndarray

    def index(self, token: str) -> int:
        return self.tokens.index(token)


def pronoun_example(adjective: str = "wide", strength: float = 2.0) -> ToySentence:
    """The sentence "The tired cat ... because it was too <adjective>", embedded by hand.

    Every token is a vector over :data:`TOKEN_FEATURES`; words that matter for the example
    (cat, street, it, tired, wide) have a 1 in their coordinates, the others are all zero.
    The row of "it" also carries the predicate's property ("it was too wide" says wide): a
    trained Transformer's earlier layers would have moved that information into "it"; here it
    is written in by hand.

    W_k exposes thing, animate and extended as the key. W_q turns "pronoun" into a query for
    a thing, "says tired" into a query for something animate and "says wide" into a query for
    something extended, each with weight ``strength``. W_v is the identity: a token's value
    is its own vector, so the context of "it" shows which features it borrowed.
    """
    if adjective not in ("wide", "tired"):
        raise ValueError(f"the toy embeddings know 'wide' and 'tired', not {adjective!r}")
    tokens = [adjective if t == "wide" else t for t in PRONOUN_SENTENCE]
    f = {name: i for i, name in enumerate(TOKEN_FEATURES)}
    X = np.zeros((len(tokens), len(TOKEN_FEATURES)))  # (n, d_model)
    for i, token in enumerate(tokens):
        for name, value in _EMBEDDINGS.get(token, {}).items():
            X[i, f[name]] = value
    it = tokens.index("it")
    X[it, f["says " + adjective]] = 1.0  # the predicate's property, moved into "it"
    W_k = np.zeros((len(TOKEN_FEATURES), len(KEY_FEATURES)))  # (d_model, d_k)
    W_q = np.zeros_like(W_k)  # (d_model, d_k)
    for j, name in enumerate(KEY_FEATURES):
        W_k[f[name], j] = 1.0
    W_q[f["pronoun"], KEY_FEATURES.index("thing")] = strength
    W_q[f["says tired"], KEY_FEATURES.index("animate")] = strength
    W_q[f["says wide"], KEY_FEATURES.index("extended")] = strength
    W_v = np.eye(len(TOKEN_FEATURES))  # (d_model, d_v)
    return ToySentence(tokens, TOKEN_FEATURES, KEY_FEATURES, X, W_q, W_k, W_v)
