"""The optimizer a train_step case hands the learner's function (SGD, momentum or Adam).

SGD: p <- p - lr g.  Momentum mu: b <- mu b + g (b = g at the first step), p <- p - lr b.
Adam: m <- b1 m + (1 - b1) g, v <- b2 v + (1 - b2) g^2, p <- p - lr m_hat / (sqrt(v_hat) + eps)
with m_hat = m / (1 - b1^t), v_hat = v / (1 - b2^t).
"""

from __future__ import annotations

from typing import Any

import torch


class CaseOptimizer:
    """SGD (with momentum) or Adam, with the interface train_step uses: ``zero_grad()`` and
    ``step()`` (and ``param_groups``), computing what torch.optim.SGD and torch.optim.Adam
    compute with their defaults.

    The cases do not use torch.optim itself: its first ``step`` imports torch._dynamo, a second
    or two that every grading child would pay again.
    """

    def __init__(self, parameters: Any, lr: float, momentum: float = 0.0, adam: bool = False,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:  # fmt: skip
        self.params = [p for p in parameters]
        self.param_groups = [{"params": self.params, "lr": lr}]
        self.lr, self.momentum, self.adam, self.betas, self.eps = lr, momentum, adam, betas, eps
        self.state: dict[int, dict[str, Any]] = {}
        self.steps = 0

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        self.steps += 1
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            state = self.state.setdefault(i, {})
            if self.adam:
                b1, b2 = self.betas
                m = state["m"] = b1 * state.get("m", torch.zeros_like(p)) + (1 - b1) * p.grad
                v = state["v"] = b2 * state.get("v", torch.zeros_like(p)) + (1 - b2) * p.grad**2
                m_hat, v_hat = m / (1 - b1**self.steps), v / (1 - b2**self.steps)
                p -= self.lr * m_hat / (v_hat.sqrt() + self.eps)
            elif self.momentum:
                buffer = state["buffer"] = (p.grad.clone() if "buffer" not in state
                                            else self.momentum * state["buffer"] + p.grad)  # fmt: skip
                p -= self.lr * buffer
            else:
                p -= self.lr * p.grad


def make_optimizer(kind: str, parameters: Any, lr: float) -> CaseOptimizer:
    """The optimizer of a train_step case: "sgd", "momentum" (SGD, momentum 0.9) or "adam"."""
    if kind not in ("sgd", "momentum", "adam"):
        raise ValueError(f"unknown optimizer {kind!r}")
    return CaseOptimizer(parameters, lr, momentum=0.9 if kind == "momentum" else 0.0, adam=kind == "adam")
