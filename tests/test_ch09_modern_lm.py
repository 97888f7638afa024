"""Chapter 9's book model (grader.reference.modern_lm): what its pages rely on."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from grader.reference import modern_attention as ma
from grader.reference.modern_lm import (
    ModernLM,
    decode_loss,
    english_stream,
    loss_by_position,
    stream_batch,
    stream_entropy,
    train_lm,
    train_seeds,
)

pytestmark = pytest.mark.ch09


def small(positions: str = "rope", kv: int = 2) -> ModernLM:
    return ModernLM(29, d_model=16, num_heads=4, num_kv_heads=kv, d_ff=32, num_layers=2, positions=positions)


@pytest.mark.parametrize("window,sinks", [(None, 0), (5, 0), (5, 2), (1, 1)])
def test_decoding_through_the_caches_equals_the_masked_pass(window, sinks):
    torch.manual_seed(0)
    model = small().eval()
    model.window, model.sinks = window, sinks
    windows = torch.randint(29, (3, 17))  # (B, n + 1)
    assert torch.allclose(decode_loss(model, windows), loss_by_position(model, windows), atol=1e-5)


def test_the_window_changes_the_output_once_a_key_falls_out():
    torch.manual_seed(0)
    model = small().eval()
    ids = torch.randint(29, (2, 12))
    full = model(ids)
    model.window = 4
    windowed = model(ids)
    assert torch.allclose(full[:, :4], windowed[:, :4], atol=1e-6)  # nothing evicted yet
    assert not torch.allclose(full[:, 4:], windowed[:, 4:], atol=1e-3)


def test_rotary_models_see_offsets_only_and_the_other_pairing_changes_them():
    torch.manual_seed(1)
    model = small("rope").eval()
    ids = torch.randint(29, (2, 10))
    logits = model(ids)
    model.set_positions("rope_interleaved")
    assert not torch.allclose(logits, model(ids), atol=1e-3)
    # the same weights with the W_q, W_k rows of each head permuted (halves -> pairs) agree
    d = model.blocks[0].attn.d_head
    order = ma.halves_to_interleaved(torch.arange(d)[None].float())[0].long()  # (d,)
    with torch.no_grad():
        for block in model.blocks:
            attn = block.attn
            for layer, heads in ((attn.W_q, attn.h), (attn.W_k, attn.g)):
                rows = (torch.arange(heads)[:, None] * d + order).flatten()
                layer.weight.copy_(layer.weight[rows])
    assert torch.allclose(logits, model(ids), atol=1e-5)


def test_sinusoidal_model_depends_on_absolute_positions():
    torch.manual_seed(2)
    model = small("sinusoidal", kv=4).eval()
    ids = torch.randint(29, (1, 6))
    caches = model.new_caches()
    late = [model.step(ids[:, t : t + 1], 50 + t, caches) for t in range(6)]
    assert not torch.allclose(model(ids)[:, -1], late[-1], atol=1e-3)


def test_train_seeds_trains_each_seed_as_alone():
    stream = english_stream(200, 0)
    make = lambda: small(kv=1)  # noqa: E731
    models, losses = train_seeds(make, [4, 7], stream, steps=4, batch=4, length=12, lr=1e-2)
    torch.manual_seed(7)
    alone = make()
    alone_losses = train_lm(alone, stream, steps=4, batch=4, length=12, lr=1e-2, seed=7)
    assert losses.shape == (4, 2)
    np.testing.assert_allclose(losses[:, 1].numpy(), alone_losses, atol=1e-5)
    for a, b in zip(models[1].parameters(), alone.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-5)


def test_stream_and_entropy():
    stream = english_stream(50, 3)
    assert stream.dtype == torch.int64 and (stream == 2).sum() >= 50  # every sentence ends with <eos>
    batch = stream_batch(stream, 5, 9, torch.Generator().manual_seed(0))
    assert batch.shape == (5, 10)
    assert 1.0 < stream_entropy(400, 0) < 2.5


def test_peak_tensor_bytes_sees_the_weights_matrix_of_plain_attention_only():
    from grader.reference.modern_lm import peak_tensor_bytes

    q, k, v = (torch.randn(1, 1, 256, 8, requires_grad=True) for _ in range(3))
    d_out = torch.randn(1, 1, 256, 8)
    plain = peak_tensor_bytes(lambda: ma.plain_attention(q, k, v).backward(d_out))
    flash = peak_tensor_bytes(lambda: ma.FlashAttention.apply(q, k, v, 32, False).backward(d_out))
    matrix = 256 * 256 * 4  # one (n, n) float32 matrix
    assert plain >= 2 * matrix > 4 * flash
