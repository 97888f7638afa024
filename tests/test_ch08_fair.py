"""Chapter 8 grades correct work in any reasonable style: the learner's own chapter-5 layers
instead of the given ones, the positional encoding computed on the fly, a cache kept in
lists or in chapter 7's KVCache, attention written out by hand. Every visible and hidden test
cell of the exercise must pass."""

from __future__ import annotations

import pytest

from tests.notebook_runner import FRESH_SALTS, exercise_of, fresh_draw_failures, run_cells, source_notebook

pytestmark = pytest.mark.ch08

ASSIGNMENT = "08_build_train_decode"

OWN_LAYERS = '''
class MultiHeadAttention(nn.Module):
    """Chapter 4's, as a learner wrote it: one attention per head, written out."""

    def __init__(self, d_model, num_heads, bias=True):
        super().__init__()
        self.num_heads, self.d_head = num_heads, d_model // num_heads
        self.W_q, self.W_k = nn.Linear(d_model, d_model, bias=bias), nn.Linear(d_model, d_model, bias=bias)
        self.W_v, self.W_o = nn.Linear(d_model, d_model, bias=bias), nn.Linear(d_model, d_model, bias=bias)

    def forward(self, query, key, value, mask=None):
        B, n_q, d = query.shape
        split = lambda x: x.view(B, x.shape[1], self.num_heads, self.d_head).transpose(1, 2)
        q, k, v = split(self.W_q(query)), split(self.W_k(key)), split(self.W_v(value))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.nan_to_num(torch.softmax(scores, dim=-1))
        return self.W_o((weights @ v).transpose(1, 2).reshape(B, n_q, d)), weights


class EncoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, x, pad_mask=None):
        mask = None if pad_mask is None else pad_mask[:, None, None, :]
        x = self.norm1(x + self.self_attn(x, x, x, mask)[0])
        return self.norm2(x + self.ff(x))


class DecoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.cross_attn = MultiHeadAttention(d_model, num_heads)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))

    def forward(self, y, memory, tgt_pad_mask=None, memory_pad_mask=None):
        n = y.shape[1]
        mask = torch.tril(torch.ones(n, n, dtype=torch.bool))
        if tgt_pad_mask is not None:
            mask = mask & tgt_pad_mask[:, None, None, :]
        y = self.norm1(y + self.self_attn(y, y, y, mask)[0])
        source = None if memory_pad_mask is None else memory_pad_mask[:, None, None, :]
        attended, weights = self.cross_attn(y, memory, memory, source)
        y = self.norm2(y + attended)
        return self.norm3(y + self.ff(y)), weights
'''

TRANSLATOR_ON_THE_FLY = (
    OWN_LAYERS
    + '''

class TinyTranslator(nn.Module):
    """The encoding computed at every call, no embed helper, no stored weights."""

    def __init__(self, src_vocab, tgt_vocab, d_model, num_heads, d_ff, num_layers, pad_id):
        super().__init__()
        self.d_model, self.num_heads, self.pad_id = d_model, num_heads, pad_id
        self.src_embed, self.tgt_embed = nn.Embedding(src_vocab, d_model), nn.Embedding(tgt_vocab, d_model)
        self.encoder_layers = nn.ModuleList(EncoderLayer(d_model, num_heads, d_ff) for _ in range(num_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(d_model, num_heads, d_ff) for _ in range(num_layers))
        self.output_proj = nn.Linear(d_model, tgt_vocab)

    def _positions(self, x):
        return torch.from_numpy(positional_encoding(x.shape[1], self.d_model)).to(x.dtype)

    def encode(self, src):
        x = self.src_embed(src) * self.d_model ** 0.5
        x = x + self._positions(x)
        for layer in self.encoder_layers:
            x = layer(x, src != self.pad_id)
        return x

    def decode(self, tgt_in, memory, src_pad):
        y = self.tgt_embed(tgt_in) * self.d_model ** 0.5
        y = y + self._positions(y)
        for layer in self.decoder_layers:
            y = layer(y, memory, tgt_in != self.pad_id, src_pad)[0]
        return self.output_proj(y)

    def forward(self, src, tgt_in):
        return self.decode(tgt_in, self.encode(src), src != self.pad_id)
'''
)

DECODE_WITH_LISTS = '''
class KVCache:
    """Chapter 7's cache."""

    def __init__(self):
        self.k = self.v = None

    def __len__(self):
        return 0 if self.k is None else self.k.shape[-2]

    def append(self, k_new, v_new):
        self.k = k_new if self.k is None else torch.cat([self.k, k_new], dim=-2)
        self.v = v_new if self.v is None else torch.cat([self.v, v_new], dim=-2)
        return self.k, self.v


def attend(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def greedy_decode_cached(model, src, max_len, bos_id, eos_id):
    with torch.no_grad():
        memory = model.encode(src)
        keep = (src != model.pad_id)[:, None, None, :]
        h = model.num_heads
        split = lambda x: x.unflatten(-1, (h, -1)).transpose(1, 2)
        join = lambda x: x.transpose(1, 2).flatten(2)
        layers = model.decoder_layers
        kv_src = [(split(l.cross_attn.W_k(memory)), split(l.cross_attn.W_v(memory))) for l in layers]
        caches = [KVCache() for _ in layers]
        positions = torch.tensor(positional_encoding(max_len, model.d_model))
        ids, done = [], torch.zeros(len(src), dtype=torch.bool)
        last = torch.full((len(src), 1), bos_id)
        for t in range(max_len):
            y = model.tgt_embed(last) * math.sqrt(model.d_model) + positions[t]
            for l, cache, (k_s, v_s) in zip(layers, caches, kv_src):
                k, v = cache.append(split(l.self_attn.W_k(y)), split(l.self_attn.W_v(y)))
                y = l.norm1(y + l.self_attn.W_o(join(attend(split(l.self_attn.W_q(y)), k, v))))
                y = l.norm2(y + l.cross_attn.W_o(join(attend(split(l.cross_attn.W_q(y)), k_s, v_s, keep))))
                y = l.norm3(y + l.ff(y))
            nxt = model.output_proj(y[:, 0]).argmax(-1)
            nxt[done] = eos_id
            ids.append(nxt)
            done = done | (nxt == eos_id)
            last = nxt[:, None]
            if bool(done.all()):
                break
        return torch.stack(ids, 1)
'''

SAMPLE_BY_HAND = """
def sample_next_token(logits, temperature=1.0, top_k=None, generator=None):
    if not temperature:
        return torch.argmax(logits, dim=1)
    z = logits / temperature
    if top_k:
        k = min(top_k, z.shape[1])
        threshold = z.sort(dim=-1, descending=True).values[:, k - 1 : k]
        z = torch.where(z >= threshold, z, torch.full_like(z, -float("inf")))
    p = torch.exp(z - z.max(dim=-1, keepdim=True).values)
    return torch.multinomial(p / p.sum(dim=-1, keepdim=True), num_samples=1, generator=generator)[:, 0]
"""

TRAIN_WITH_ITS_OWN_LOSS_CALL = """
def train_step(model, optimizer, src, tgt, pad_id, bos_id):
    model.zero_grad(set_to_none=True)
    tgt_in = torch.cat([torch.full((tgt.shape[0], 1), bos_id, dtype=tgt.dtype), tgt[:, :-1]], dim=1)
    loss = translation_loss(model(src, tgt_in), tgt, pad_id)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(list(model.parameters()), max_norm=1.0)
    optimizer.step()
    return float(loss)
"""

TRAIN_WITH_TORCH_OPTIM_SIGNATURE = """
def train_step(model, optimizer, src, tgt, pad_id, bos_id):
    optimizer.zero_grad(set_to_none=True)
    loss = translation_loss(model(src, shift_right(tgt, bos_id)), tgt, pad_id)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss.item()
"""

TRAIN_WITH_CLIPPING_BY_HAND = """
def train_step(model, optimizer, src, tgt, pad_id, bos_id):
    optimizer.zero_grad()
    loss = translation_loss(model(src, shift_right(tgt, bos_id)), tgt, pad_id)
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = math.sqrt(sum(float((g * g).sum()) for g in grads))  # the global norm, in Python floats
    if norm > 1.0:
        for g in grads:
            g.mul_(1.0 / (norm + 1e-6))
    optimizer.step()
    return loss.item()
"""

CORRECT = [
    ("TinyTranslator", "own-layers-and-positions-on-the-fly", TRANSLATOR_ON_THE_FLY),
    ("greedy_decode_cached", "chapter-7-cache-and-attention-by-hand", DECODE_WITH_LISTS),
    ("sample_next_token", "sorted-threshold-and-exp-by-hand", SAMPLE_BY_HAND),
    ("train_step", "module-zero-grad-and-float", TRAIN_WITH_ITS_OWN_LOSS_CALL),
    ("train_step", "optimizer-zero-grad-set-to-none", TRAIN_WITH_TORCH_OPTIM_SIGNATURE),
    ("train_step", "clipping-by-hand", TRAIN_WITH_CLIPPING_BY_HAND),
]


@pytest.mark.parametrize("exercise,style,code", CORRECT, ids=[f"{c[0]}-{c[1]}" for c in CORRECT])
def test_correct_style_keeps_every_point(exercise, style, code):
    outcome = run_cells(source_notebook(ASSIGNMENT), replace={exercise: code})
    mine = {k: v for k, v in outcome.items() if exercise_of(k) == exercise}
    assert mine and all(v == "" for v in mine.values()), mine


@pytest.mark.slow
@pytest.mark.parametrize("exercise,style,code", CORRECT, ids=[f"{c[0]}-{c[1]}" for c in CORRECT])
def test_correct_style_keeps_every_point_on_fresh_draws(exercise, style, code):
    """As the grader grades it: every check on inputs drawn afresh from a salt."""
    nb = source_notebook(ASSIGNMENT)
    failures = [f for salt in FRESH_SALTS for f in fresh_draw_failures(nb, {exercise: code}, salt)]
    assert not failures, "\n---\n".join(failures)
