"""Wrong implementations of chapter 1's exercises, as a learner might write them."""

from tests.bugzoo import Bug

ASSIGNMENT = "01_rnn_bottlenecks"

BUGS = [
    # ---------------------------------------------------------------- rnn_step
    Bug(
        exercise="rnn_step",
        name="forgot_bias",
        code="""
def rnn_step(x_t, h_prev, W_xh, W_hh, b):
    return np.tanh(x_t @ W_xh + h_prev @ W_hh)
""",
        expect="the bias b was left out",
    ),
    Bug(
        exercise="rnn_step",
        name="no_tanh",
        code="""
def rnn_step(x_t, h_prev, W_xh, W_hh, b):
    return x_t @ W_xh + h_prev @ W_hh + b
""",
        expect="the tanh was left out",
    ),
    Bug(
        exercise="rnn_step",
        name="weights_swapped",
        code="""
def rnn_step(x_t, h_prev, W_xh, W_hh, b):
    return np.tanh(h_prev @ W_xh + x_t @ W_hh + b)
""",
        expect="rnn_step raised ValueError",
        names="W_xh and W_hh",
    ),
    Bug(
        exercise="rnn_step",
        name="relu_instead_of_tanh",
        code="""
def rnn_step(x_t, h_prev, W_xh, W_hh, b):
    return np.maximum(0.0, x_t @ W_xh + h_prev @ W_hh + b)
""",
        expect="a ReLU was used instead of tanh",
    ),
    Bug(
        exercise="rnn_step",
        name="float32_output",
        code="""
def rnn_step(x_t, h_prev, W_xh, W_hh, b):
    a = x_t.astype(np.float32) @ W_xh.astype(np.float32) + h_prev.astype(np.float32) @ W_hh.astype(np.float32)
    return np.tanh(a + b.astype(np.float32))
""",
        expect="An output is not float64",
    ),
    Bug(
        exercise="rnn_step",
        name="updates_h_prev_in_place",
        code="""
def rnn_step(x_t, h_prev, W_xh, W_hh, b):
    h_prev[...] = np.tanh(x_t @ W_xh + h_prev @ W_hh + b)
    return h_prev
""",
        expect="modified one of its input arrays in place",
    ),
    # ---------------------------------------------------------------- rnn_forward
    Bug(
        exercise="rnn_forward",
        name="returns_h0_to_hT_minus_1",
        code="""
def rnn_forward(X, h0, W_xh, W_hh, b):
    h = h0
    states = []
    for x_t in X:
        states.append(h)
        h = rnn_step(x_t, h, W_xh, W_hh, b)
    return np.stack(states)
""",
        expect="h_0 .. h_{T-1} were returned",
    ),
    Bug(
        exercise="rnn_forward",
        name="includes_h0",
        code="""
def rnn_forward(X, h0, W_xh, W_hh, b):
    states = [h0]
    for x_t in X:
        states.append(rnn_step(x_t, states[-1], W_xh, W_hh, b))
    return np.stack(states)
""",
        expect="one row too many",
    ),
    Bug(
        exercise="rnn_forward",
        name="state_not_carried",
        code="""
def rnn_forward(X, h0, W_xh, W_hh, b):
    return np.stack([rnn_step(x_t, h0, W_xh, W_hh, b) for x_t in X])
""",
        expect="every step started from h0",
    ),
    Bug(
        exercise="rnn_forward",
        name="returns_last_state_only",
        code="""
def rnn_forward(X, h0, W_xh, W_hh, b):
    h = h0
    for x_t in X:
        h = rnn_step(x_t, h, W_xh, W_hh, b)
    return h
""",
        expect="Only one state came back",
    ),
    Bug(
        exercise="rnn_forward",
        name="h0_ignored",
        code="""
def rnn_forward(X, h0, W_xh, W_hh, b):
    h = np.zeros(W_hh.shape[0])
    states = []
    for x_t in X:
        h = rnn_step(x_t, h, W_xh, W_hh, b)
        states.append(h)
    return np.stack(states)
""",
        expect="the initial state h0 was ignored",
    ),
    Bug(
        exercise="rnn_forward",
        name="state_aliased",
        code="""
def rnn_forward(X, h0, W_xh, W_hh, b):
    h = h0.copy()
    states = []
    for x_t in X:
        h[...] = rnn_step(x_t, h, W_xh, W_hh, b)
        states.append(h)
    return np.array(states)
""",
        expect="every row of H holds the last state",
    ),
    # ---------------------------------------------------------------- jacobian_norms
    Bug(
        exercise="jacobian_norms",
        name="no_tanh_derivative",
        code="""
def jacobian_norms(H, W_hh):
    T, d_h = H.shape
    norms = [1.0]
    product = np.eye(d_h)
    for k in range(1, T):
        product = product @ W_hh.T
        norms.append(np.linalg.norm(product, 2))
    return np.array(norms)
""",
        expect="diag(1 - h_t^2) was left out",
    ),
    Bug(
        exercise="jacobian_norms",
        name="derivative_one_step_off",
        code="""
def jacobian_norms(H, W_hh):
    T, d_h = H.shape
    norms = [1.0]
    product = np.eye(d_h)
    for k in range(1, T):
        J = np.diag(1 - H[T - k - 1] ** 2) @ W_hh.T
        product = product @ J
        norms.append(np.linalg.norm(product, 2))
    return np.array(norms)
""",
        expect="one step off",
    ),
    Bug(
        exercise="jacobian_norms",
        name="frobenius_norm",
        code="""
def jacobian_norms(H, W_hh):
    T, d_h = H.shape
    norms = [1.0]
    product = np.eye(d_h)
    for k in range(1, T):
        product = product @ (np.diag(1 - H[T - k] ** 2) @ W_hh.T)
        norms.append(np.linalg.norm(product))
    return np.array(norms)
""",
        expect="Frobenius",
    ),
    Bug(
        exercise="jacobian_norms",
        name="starts_at_k_1",
        code="""
def jacobian_norms(H, W_hh):
    T, d_h = H.shape
    norms = []
    product = np.eye(d_h)
    for k in range(1, T):
        product = product @ (np.diag(1 - H[T - k] ** 2) @ W_hh.T)
        norms.append(np.linalg.norm(product, 2))
    return np.array(norms)
""",
        expect="There should be T entries",
    ),
    Bug(
        exercise="jacobian_norms",
        name="wrong_multiplication_order",
        code="""
def jacobian_norms(H, W_hh):
    T, d_h = H.shape
    norms = [1.0]
    product = np.eye(d_h)
    for k in range(1, T):
        product = (np.diag(1 - H[T - k] ** 2) @ W_hh.T) @ product
        norms.append(np.linalg.norm(product, 2))
    return np.array(norms)
""",
        expect="multiplied in the wrong order",
    ),
    Bug(
        exercise="jacobian_norms",
        name="W_hh_not_transposed",
        code="""
def jacobian_norms(H, W_hh):
    T, d_h = H.shape
    norms = [1.0]
    product = np.eye(d_h)
    for k in range(1, T):
        product = product @ (np.diag(1 - H[T - k] ** 2) @ W_hh)
        norms.append(np.linalg.norm(product, 2))
    return np.array(norms)
""",
        expect="built with W_hh instead of its transpose",
    ),
    Bug(
        exercise="jacobian_norms",
        name="derivative_on_the_right",
        code="""
def jacobian_norms(H, W_hh):
    T, d_h = H.shape
    norms = [1.0]
    product = np.eye(d_h)
    for k in range(1, T):
        product = product @ (W_hh.T @ np.diag(1 - H[T - k] ** 2))
        norms.append(np.linalg.norm(product, 2))
    return np.array(norms)
""",
        expect="the tanh derivative multiplied on the wrong side",
    ),
    Bug(
        exercise="jacobian_norms",
        name="spectral_norm_as_max_entry",
        code="""
def jacobian_norms(H, W_hh):
    T, d_h = H.shape
    norms = [1.0]
    product = np.eye(d_h)
    for k in range(1, T):
        product = product @ (np.diag(1 - H[T - k] ** 2) @ W_hh.T)
        norms.append(np.abs(product).max())
    return np.array(norms)
""",
        expect="the spectral norm taken as the largest entry",
    ),
]
