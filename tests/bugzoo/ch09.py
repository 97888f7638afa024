"""Wrong implementations of chapter 9's exercises, as learners write them: each is the right
solution with one mistake put in by a replacement that must match (``_variant``)."""

from tests.bugzoo import Bug
from tests.notebook_runner import source_notebook

ASSIGNMENT = "09_modern_attention"


def _solution(name: str) -> str:
    """The source notebook's solution cell ``name``, without its nbgrader markers."""
    cell = next(
        c for c in source_notebook(ASSIGNMENT).cells if c.metadata.get("nbgrader", {}).get("grade_id") == name
    )
    return (
        "\n".join(
            line
            for line in cell.source.split("\n")
            if "### BEGIN SOLUTION" not in line and "### END SOLUTION" not in line
        )
        + "\n"
    )


(
    _APPLY_ROPE,
    _APPLY_ROPE_INTERLEAVED,
    _GQA_ATTENTION,
    _SLIDING_WINDOW_MASK,
    _ROLLINGKVCACHE,
    _FLASHATTENTION,
) = (
    _solution(name)
    for name in (
        "apply_rope",
        "apply_rope_interleaved",
        "gqa_attention",
        "sliding_window_mask",
        "RollingKVCache",
        "FlashAttention",
    )
)


def _variant(code: str, *changes: tuple[str, str]) -> str:
    """``code`` with each (old, new) replaced; an old text that is not there is an error, so
    that no entry silently becomes the right solution."""
    for old, new in changes:
        assert old in code, f"the zoo's replacement does not match: {old!r}"
        code = code.replace(old, new)
    return code


_HALVES = "x1, x2 = x[..., : d // 2], x[..., d // 2 :]"
_ROTATED = "x1 * cos - x2 * sin, x1 * sin + x2 * cos"
_ANGLES = "angles = positions.to(torch.float64)[:, None] * base ** (-2 * i / d)"
_FWD_SKIP = """                if causal and ks > qe - 1 + offset:
                    break"""
_BWD_SKIP = """                if causal and ks > qe - 1 + offset:
                    continue"""

AUTOGRAD_BACKWARD = _variant(
    _FLASHATTENTION,
    (
        """        Q, K, V, O, L = ctx.saved_tensors
""",
        """        Q, K, V, O, L = ctx.saved_tensors
        with torch.enable_grad():
            q, k, v = (t.detach().requires_grad_() for t in (Q, K, V))
            n_q, n_k = q.shape[-2], k.shape[-2]
            s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
            if ctx.causal:
                s = s.masked_fill(~torch.ones(n_q, n_k, dtype=torch.bool).tril(n_k - n_q), -math.inf)
            top = torch.where(torch.isfinite(s.amax(-1, keepdim=True)), s.amax(-1, keepdim=True), 0.0)
            e = torch.exp(s - top.detach())
            total = e.sum(-1, keepdim=True)
            out = e / torch.where(total > 0, total, torch.ones_like(total)) @ v
            return (*torch.autograd.grad(out, (q, k, v), dO), None, None)
""",
    ),
)

BUGS = [
    Bug(
        "apply_rope",
        "interleaved_pairs",
        _variant(
            _APPLY_ROPE,
            (_HALVES, "x1, x2 = x[..., 0::2], x[..., 1::2]"),
            (
                f"return torch.cat([{_ROTATED}], dim=-1)",
                f"return torch.stack([{_ROTATED}], dim=-1).flatten(-2)",
            ),
        ),
        expect="interleaved pairs 2i, 2i + 1 (the RoFormer / GPT-J convention) instead of halves",
    ),
    Bug(
        "apply_rope",
        "angle_sign_flipped",
        _variant(_APPLY_ROPE, (_ROTATED, "x1 * cos + x2 * sin, -x1 * sin + x2 * cos")),
        expect="the rotation angle's sign flipped",
    ),
    Bug(
        "apply_rope",
        "positions_restart_at_0",
        _variant(
            _APPLY_ROPE,
            (
                _ANGLES,
                "angles = torch.arange(x.shape[-2], dtype=torch.float64)[:, None] * base ** (-2 * i / d)",
            ),
        ),
        expect="positions restarting at 0",
    ),
    Bug(
        "apply_rope",
        "frequencies_without_the_2",
        _variant(_APPLY_ROPE, ("base ** (-2 * i / d)", "base ** (-i / d)")),
        expect="frequencies base^(-i/d) instead of base^(-2i/d)",
    ),
    Bug(
        "apply_rope",
        "dtype_not_kept",
        _variant(
            _APPLY_ROPE,
            (
                "cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)",
                "cos, sin = angles.cos(), angles.sin()",
            ),
        ),
        expect="The output's dtype is not the input's",
    ),
    Bug(
        "apply_rope_interleaved",
        "halves_instead",
        _variant(
            _APPLY_ROPE_INTERLEAVED,
            ("x1, x2 = x[..., 0::2], x[..., 1::2]", "x1, x2 = x[..., : d // 2], x[..., d // 2 :]"),
            (
                "out[..., 0::2] = x1 * cos - x2 * sin\n    out[..., 1::2] = x1 * sin + x2 * cos",
                "out[..., : d // 2] = x1 * cos - x2 * sin\n    out[..., d // 2 :] = x1 * sin + x2 * cos",
            ),
        ),
        expect="halves, feature i with feature i + d/2 (the Llama / GPT-NeoX convention)",
    ),
    Bug(
        "apply_rope_interleaved",
        "angle_sign_flipped",
        _variant(
            _APPLY_ROPE_INTERLEAVED,
            ("out[..., 1::2] = x1 * sin + x2 * cos", "out[..., 1::2] = -x1 * sin + x2 * cos"),
            ("out[..., 0::2] = x1 * cos - x2 * sin", "out[..., 0::2] = x1 * cos + x2 * sin"),
        ),
        expect="the rotation angle's sign flipped",
    ),
    Bug(
        "gqa_attention",
        "repeat_not_repeat_interleave",
        _variant(
            _GQA_ATTENTION,
            ("k = k.repeat_interleave(h // g, dim=-3)", "k = k.repeat(1, h // g, 1, 1)"),
            ("v = v.repeat_interleave(h // g, dim=-3)", "v = v.repeat(1, h // g, 1, 1)"),
        ),
        expect="the repeat head mapping",
    ),
    Bug(
        "gqa_attention",
        "not_scaled",
        _variant(_GQA_ATTENTION, (" / math.sqrt(q.shape[-1])", "")),
        expect="not divided by sqrt(d)",
    ),
    Bug(
        "gqa_attention",
        "nan_on_fully_masked_rows",
        _variant(
            _GQA_ATTENTION,
            ("weights = e / torch.where(total > 0, total, torch.ones_like(total))", "weights = e / total"),
            ("top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))", ""),
        ),
        expect="NaN",
    ),
    Bug(
        "gqa_attention",
        "torch_sdpa",
        _variant(
            _GQA_ATTENTION,
            (
                "    return weights @ v, weights",
                "    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask), weights",
            ),
        ),
        expect="hands its work to",
    ),
    Bug(
        "sliding_window_mask",
        "window_off_by_one",
        _variant(_SLIDING_WINDOW_MASK, ("p - j < window", "p - j <= window")),
        expect="a window that is off by one: position - j <= window",
    ),
    Bug(
        "sliding_window_mask",
        "sinks_inside_the_window",
        _variant(_SLIDING_WINDOW_MASK, ("p - j < window", "p - j < window - sinks")),
        expect="sinks counted inside the window",
    ),
    Bug(
        "sliding_window_mask",
        "queries_at_the_start",
        _variant(
            _SLIDING_WINDOW_MASK,
            ("p = torch.arange(n_k - n_q, n_k)[:, None]", "p = torch.arange(n_q)[:, None]"),
        ),
        expect="the queries placed at the first n_q positions",
    ),
    Bug(
        "RollingKVCache",
        "drops_the_sinks",
        _variant(
            _ROLLINGKVCACHE,
            (
                "keep = (positions < self.sinks) | (positions >= self.seen - self.window)",
                "keep = positions >= self.seen - self.window",
            ),
        ),
        expect="a cache that drops the sinks",
    ),
    Bug(
        "RollingKVCache",
        "sinks_inside_the_window",
        _variant(
            _ROLLINGKVCACHE,
            ("(positions >= self.seen - self.window)", "(positions >= self.seen - self.window + self.sinks)"),
        ),
        expect="sinks counted inside the window",
    ),
    Bug(
        "RollingKVCache",
        "positions_restart_at_0",
        _variant(_ROLLINGKVCACHE, ("new = torch.arange(self.seen, self.seen + t)", "new = torch.arange(t)")),
        expect="positions restarting at 0",
    ),
    Bug(
        "RollingKVCache",
        "window_off_by_one",
        _variant(
            _ROLLINGKVCACHE,
            ("(positions >= self.seen - self.window)", "(positions > self.seen - self.window)"),
        ),
        expect="off by one",
    ),
    Bug(
        "FlashAttention",
        "dS_without_D",
        _variant(_FLASHATTENTION, ("dS = p * (dP - D[..., qs:qe, :])", "dS = p * dP")),
        expect="dS without the D term",
    ),
    Bug(
        "FlashAttention",
        "L_before_the_last_rescale",
        _variant(
            _FLASHATTENTION,
            (
                "                m_new = torch.maximum(m, s.amax(-1, keepdim=True))",
                "                L_now = torch.where(l > 0,"
                " m + torch.log(torch.where(l > 0, l, torch.ones_like(l))), -math.inf)\n"
                "                m_new = torch.maximum(m, s.amax(-1, keepdim=True))",
            ),
            (
                "            L[..., qs:qe] = torch.where(seen, m + torch.log(safe_l),"
                " torch.full_like(m, -math.inf))[..., 0]",
                "            L[..., qs:qe] = L_now[..., 0]",
            ),
        ),
        expect="L saved before the last block's rescale",
    ),
    Bug(
        "FlashAttention",
        "causal_blocks_skipped_on_the_wrong_side",
        _variant(
            _FLASHATTENTION,
            (_FWD_SKIP, "                if causal and ke - 1 <= qs + offset:\n                    continue"),
            (_BWD_SKIP, "                if causal and ke - 1 <= qs + offset:\n                    continue"),
        ),
        expect="causal blocks skipped on the wrong side",
    ),
    Bug(
        "FlashAttention",
        "dK_dV_swapped",
        _variant(_FLASHATTENTION, ("return dQ, dK, dV, None, None", "return dQ, dV, dK, None, None")),
        expect="swapped",
    ),
    Bug(
        "FlashAttention",
        "grads_not_scaled",
        _variant(
            _FLASHATTENTION,
            (
                "dQ[..., qs:qe, :] += dS @ K[..., ks:ke, :] * scale",
                "dQ[..., qs:qe, :] += dS @ K[..., ks:ke, :]",
            ),
            (
                "dK[..., ks:ke, :] += dS.transpose(-1, -2) @ Q[..., qs:qe, :] * scale",
                "dK[..., ks:ke, :] += dS.transpose(-1, -2) @ Q[..., qs:qe, :]",
            ),
        ),
        expect="the 1/sqrt(d) forgotten in dQ and dK",
    ),
    Bug("FlashAttention", "autograd_through_plain_attention", AUTOGRAD_BACKWARD, expect="hands its work to"),
    Bug(
        "FlashAttention",
        "whole_score_matrix",
        _variant(
            _FLASHATTENTION,
            (
                "        for qs in range(0, n_q, block_size):\n"
                "            qe = min(qs + block_size, n_q)\n            m = Q",
                "        full = Q @ K.transpose(-1, -2)  # the (n_q, n_k) matrix the exercise avoids\n"
                "        for qs in range(0, n_q, block_size):\n"
                "            qe = min(qs + block_size, n_q)\n            m = Q",
            ),
        ),
        expect="work on (block_size, block_size) tiles only",
    ),
]
