"""Wrong implementations of chapter 8's exercises, as learners write them."""

from tests.bugzoo import Bug

ASSIGNMENT = "08_build_train_decode"

# ---------------------------------------------------------------- shift_right

_SHIFT = """
def shift_right(tgt, bos_id):
    bos = torch.full_like(tgt[:, :1], bos_id)
    return {result}
"""


def _shift(result: str) -> str:
    return _SHIFT.format(result=result)


# ---------------------------------------------------------------- translation_loss

_LOSS = """
def translation_loss(logits, targets, pad_id, label_smoothing=0.0):
    log_p = {log_p}
    nll = -log_p.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    smooth = {smooth}
    per_token = (1 - label_smoothing) * nll + label_smoothing * smooth
    real = ({real}).to(per_token.dtype)
    return {result}
"""
_LOSS_RIGHT = {
    "log_p": "logits - logits.logsumexp(dim=-1, keepdim=True)",
    "smooth": "-log_p.mean(dim=-1)",
    "real": "targets != pad_id",
    "result": "(per_token * real).sum() / real.sum()",
}


def _loss(**changes: str) -> str:
    return _LOSS.format(**{**_LOSS_RIGHT, **changes})


# ---------------------------------------------------------------- TinyTranslator

_TRANSLATOR = """
class TinyTranslator(nn.Module):
    def __init__(self, src_vocab, tgt_vocab, d_model, num_heads, d_ff, num_layers, pad_id, max_len=256):
        super().__init__()
        self.d_model, self.num_heads, self.pad_id = d_model, num_heads, pad_id
        self.src_embed = nn.Embedding(src_vocab, d_model)
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model)
        {pe}
        self.encoder_layers = nn.ModuleList(EncoderLayer(d_model, num_heads, d_ff) for _ in range(num_layers))
        self.decoder_layers = nn.ModuleList([{decoder}(d_model, num_heads, d_ff) for _ in range(num_layers)])
        self.output_proj = nn.Linear(d_model, tgt_vocab)

    def embed(self, embedding, ids):
        return {embed}

    def encode(self, src):
        x = self.embed(self.src_embed, src)
        for layer in self.encoder_layers:
            x = layer(x, {encoder_mask})
        return x

    def decode(self, tgt_in, memory, src_pad):
        y = self.embed({target_embedding}, tgt_in)
        for layer in self.decoder_layers:
            y, _ = layer(y, memory, {target_mask}, {cross_mask})
        return self.output_proj(y)

    def forward(self, src, tgt_in):
        return self.decode(tgt_in, self.encode(src), {forward_mask})
"""
_TRANSLATOR_RIGHT = {
    "pe": 'self.register_buffer("pe", torch.tensor(positional_encoding(max_len, d_model)), persistent=False)',
    "decoder": "DecoderLayer",
    "embed": "embedding(ids) * math.sqrt(self.d_model) + self.pe[: ids.shape[1]]",
    "encoder_mask": "src != self.pad_id",
    "target_embedding": "self.tgt_embed",
    "target_mask": "tgt_in != self.pad_id",
    "cross_mask": "src_pad",
    "forward_mask": "src != self.pad_id",
}


def _translator(**changes: str) -> str:
    return _TRANSLATOR.format(**{**_TRANSLATOR_RIGHT, **changes})


_NO_CAUSAL_LAYER = '''
class OwnDecoderLayer(nn.Module):
    """A pasted chapter-5 decoder layer whose self-attention forgot the causal mask."""

    def __init__(self, d_model, num_heads, d_ff):
        super().__init__()
        self.self_attn = DecoderLayer(d_model, num_heads, d_ff).self_attn
        self.cross_attn = DecoderLayer(d_model, num_heads, d_ff).cross_attn
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))

    def forward(self, y, memory, tgt_pad_mask=None, memory_pad_mask=None):
        y = self.norm1(y + self.self_attn(y, y, y, tgt_pad_mask[:, None, None, :])[0])
        attended, weights = self.cross_attn(y, memory, memory, memory_pad_mask[:, None, None, :])
        y = self.norm2(y + attended)
        return self.norm3(y + self.ff(y)), weights
'''

# ---------------------------------------------------------------- train_step

_TRAIN = """
def train_step(model, optimizer, src, tgt, pad_id, bos_id):
    {zero}
    logits = model(src, {decoder_input})
    loss = translation_loss(logits, {loss_target}, pad_id)
    loss.backward()
    {clip}
    {late_zero}
    optimizer.step()
    {after}
    return loss.item()
"""
_TRAIN_RIGHT = {
    "zero": "optimizer.zero_grad()",
    "decoder_input": "shift_right(tgt, bos_id)",
    "loss_target": "tgt",
    "clip": "nn.utils.clip_grad_norm_(model.parameters(), 1.0)",
    "late_zero": "",
    "after": "",
}


def _train(**changes: str) -> str:
    return _TRAIN.format(**{**_TRAIN_RIGHT, **changes})


# ---------------------------------------------------------------- greedy_decode_cached

_DECODE = """
@torch.no_grad()
def greedy_decode_cached(model, src, max_len, bos_id, eos_id):
    memory = model.encode(src)
    src_keys = {src_keys}
    B, h, d_model = src.shape[0], model.num_heads, model.d_model

    def heads(x):
        return x.reshape(B, x.shape[1], h, d_model // h).transpose(1, 2)

    def merge(x):
        return x.transpose(1, 2).reshape(B, x.shape[2], d_model)

    layers = list(model.decoder_layers)
    source_kv = [(heads(l.cross_attn.W_k(memory)), heads(l.cross_attn.W_v(memory))) for l in layers]
    caches = {caches}
    pe = torch.tensor(positional_encoding(max_len + 1, d_model), dtype=memory.dtype)
    token = torch.full((B, 1), bos_id, dtype=torch.long)
    finished = torch.zeros(B, dtype=torch.bool)
    generated = []
    for t in range(max_len):
        {per_step}
        y = model.tgt_embed(token) * math.sqrt(d_model) + pe[{position}]
        for layer, cache, (k_src, v_src) in zip(layers, caches, source_kv):
            attn = layer.self_attn
            k_new, v_new = heads(attn.W_k(y)), heads(attn.W_v(y))
            {append}
            out = F.scaled_dot_product_attention(heads(attn.W_q(y)), cache["k"], cache["v"])
            y = layer.norm1(y + attn.W_o(merge(out)))
            q = heads(layer.cross_attn.W_q(y))
            out = F.scaled_dot_product_attention(q, k_src, v_src, attn_mask=src_keys)
            y = layer.norm2(y + layer.cross_attn.W_o(merge(out)))
            y = layer.norm3(y + layer.ff(y))
        next_id = model.output_proj(y[:, -1]).argmax(dim=-1)
        {after_eos}
        generated.append(next_id)
        finished |= next_id == eos_id
        token = next_id[:, None]
        if finished.all():
            break
    return torch.stack(generated, dim=1)
"""
_DECODE_RIGHT = {
    "src_keys": "(src != model.pad_id)[:, None, None, :]",
    "caches": '[{"k": None, "v": None} for _ in layers]',
    "per_step": "",
    "position": "t",
    "append": """cache["k"] = k_new if cache["k"] is None else torch.cat([cache["k"], k_new], dim=-2)
            cache["v"] = v_new if cache["v"] is None else torch.cat([cache["v"], v_new], dim=-2)""",
    "after_eos": "next_id = torch.where(finished, torch.full_like(next_id, eos_id), next_id)",
}


def _decode(**changes: str) -> str:
    return _DECODE.format(**{**_DECODE_RIGHT, **changes})


_APPEND_ON = """cache["k"] = k_new if cache["k"] is None else torch.cat([cache["k"], k_new], dim={axis})
            cache["v"] = v_new if cache["v"] is None else torch.cat([cache["v"], v_new], dim={axis})"""
_CROSS_EVERY_STEP = """source_kv = [(heads(layer.cross_attn.W_k(memory)), heads(layer.cross_attn.W_v(memory)))
                     for layer in layers]"""
_ENCODE_EVERY_STEP = "memory = model.encode(src)"

_UNCACHED = '''
@torch.no_grad()
def greedy_decode_cached(model, src, max_len, bos_id, eos_id):
    """Runs every decoder layer over the whole prefix at each step: right ids, no cache."""
    memory = model.encode(src)
    src_pad = src != model.pad_id
    pe = torch.tensor(positional_encoding(max_len, model.d_model), dtype=memory.dtype)
    tgt = torch.full((src.shape[0], 1), bos_id, dtype=torch.long)
    finished = torch.zeros(src.shape[0], dtype=torch.bool)
    for _ in range(max_len):
        y = model.tgt_embed(tgt) * math.sqrt(model.d_model) + pe[: tgt.shape[1]]
        for layer in model.decoder_layers:
            y, _ = layer(y, memory, tgt != model.pad_id, src_pad)
        next_id = model.output_proj(y[:, -1]).argmax(dim=-1)
        next_id = torch.where(finished, torch.full_like(next_id, eos_id), next_id)
        tgt = torch.cat([tgt, next_id[:, None]], dim=1)
        finished |= next_id == eos_id
        if finished.all():
            break
    return tgt[:, 1:]
'''

_NEXT_ID = "next_id = model.output_proj(y[:, -1]).argmax(dim=-1)"
_SELF_ATTENTION = 'out = F.scaled_dot_product_attention(heads(attn.W_q(y)), cache["k"], cache["v"])'

_ONE_SENTENCE_AT_A_TIME = '''

@torch.no_grad()
def greedy_decode_cached(model, src, max_len, bos_id, eos_id):
    """Each sentence decoded alone (a batch of one), then the rows padded with eos_id."""
    rows = [decode_one(model, src[b : b + 1], max_len, bos_id, eos_id)[0] for b in range(src.shape[0])]
    T = max(len(row) for row in rows)
    return torch.stack([torch.cat([row, torch.full((T - len(row),), eos_id)]) for row in rows])
'''


def _pre_norm(code: str) -> str:
    """The decode with each sublayer written pre-norm: y + sublayer(norm(y))."""
    for old, new in (
        (
            "attn = layer.self_attn\n",
            "attn = layer.self_attn\n            x = y\n            y = layer.norm1(y)\n",
        ),
        ("y = layer.norm1(y + attn.W_o(merge(out)))", "y = x + attn.W_o(merge(out))"),
        ("q = heads(layer.cross_attn.W_q(y))", "q = heads(layer.cross_attn.W_q(layer.norm2(y)))"),
        ("y = layer.norm2(y + layer.cross_attn.W_o(merge(out)))", "y = y + layer.cross_attn.W_o(merge(out))"),
        ("y = layer.norm3(y + layer.ff(y))", "y = y + layer.ff(layer.norm3(y))"),
    ):
        assert old in code, old
        code = code.replace(old, new)
    return code


# ---------------------------------------------------------------- sample_next_token

_SAMPLE = """
def sample_next_token(logits, temperature=1.0, top_k=None, generator=None):
    if temperature == 0:
        return logits.argmax(dim=-1)
    z = {scaled}
    if top_k is not None and top_k < z.shape[-1]:
        kth = torch.topk(z, top_k, dim=-1{largest}).values[:, -1:]
        z = z.masked_fill(z {compare} kth, float("-inf"))
    probabilities = torch.softmax(z, dim={axis})
    return {draw}
"""
_SAMPLE_RIGHT = {
    "scaled": "logits / temperature",
    "largest": "",
    "compare": "<",
    "axis": "-1",
    "draw": "torch.multinomial(probabilities, 1, generator=generator).squeeze(-1)",
}


def _sample(**changes: str) -> str:
    return _SAMPLE.format(**{**_SAMPLE_RIGHT, **changes})


_TOP_K_AFTER_THE_DRAW = """
def sample_next_token(logits, temperature=1.0, top_k=None, generator=None):
    if temperature == 0:
        return logits.argmax(dim=-1)
    probabilities = torch.softmax(logits / temperature, dim=-1)
    ids = torch.multinomial(probabilities, 1, generator=generator).squeeze(-1)
    if top_k is not None:  # too late: the draw has already happened
        kth = torch.topk(probabilities, top_k, dim=-1).values[:, -1:]
        probabilities = probabilities.masked_fill(probabilities < kth, 0.0)
    return ids
"""

BUGS = [
    # ---------------------------------------------------------------- shift_right
    Bug(
        "shift_right",
        "shifts-tgt-in-place",
        """
def shift_right(tgt, bos_id):
    tgt[:, 1:] = tgt[:, :-1].clone()
    tgt[:, 0] = bos_id
    return tgt
""",
        expect="shift_right changed tgt in place",
    ),
    Bug(
        "shift_right",
        "drops-the-last-token",
        _shift("tgt[:, :-1]"),
        expect="drops the last token instead of prepending BOS",
    ),
    Bug(
        "shift_right",
        "bos-in-front-of-everything",
        _shift("torch.cat([bos, tgt], dim=1)"),
        expect="BOS put in front of the whole target",
    ),
    Bug(
        "shift_right",
        "shifted-left",
        _shift("torch.cat([tgt[:, 1:], torch.zeros_like(bos)], dim=1)"),
        expect="a shift to the left",
    ),
    Bug(
        "shift_right",
        "roll-without-bos",
        _shift("torch.roll(tgt, 1, dims=1)"),
        expect="Column 0 must be bos_id",
    ),
    # ---------------------------------------------------------------- translation_loss
    Bug(
        "translation_loss",
        "padding-counted",
        _loss(result="per_token.mean()"),
        expect="padding counted in the loss",
    ),
    Bug(
        "translation_loss",
        "mean-per-sentence",
        _loss(result="((per_token * real).sum(1) / real.sum(1)).mean()"),
        expect="a mean per sentence",
    ),
    Bug(
        "translation_loss",
        "sum-not-mean",
        _loss(result="(per_token * real).sum()"),
        expect="the sum of the real tokens' losses",
    ),
    Bug("translation_loss", "smoothing-ignored", _loss(smooth="nll"), expect="label smoothing ignored"),
    Bug(
        "translation_loss",
        "smoothing-over-the-other-tokens",
        _loss(smooth="(-log_p.sum(dim=-1) - nll) / (log_p.shape[-1] - 1)"),
        expect="spread over the V - 1 wrong tokens",
    ),
    Bug(
        "translation_loss",
        "log-of-softmax",
        _loss(log_p="torch.log(torch.softmax(logits, dim=-1))"),
        expect="The loss is not finite",
        names="log_softmax",
    ),
    Bug(
        "translation_loss",
        "log-sum-exp-detached",
        _loss(log_p="logits - logits.logsumexp(dim=-1, keepdim=True).detach()"),
        expect="the log-sum-exp detached from the graph",
    ),
    Bug("translation_loss", "pad-id-taken-as-zero", _loss(real="targets != 0"), names="pad_id"),
    # ---------------------------------------------------------------- TinyTranslator
    Bug(
        "TinyTranslator",
        "embeddings-not-scaled",
        _translator(embed="embedding(ids) + self.pe[: ids.shape[1]]"),
        expect="embeddings not scaled by sqrt(d_model)",
    ),
    Bug(
        "TinyTranslator",
        "no-positions",
        _translator(embed="embedding(ids) * math.sqrt(self.d_model)"),
        expect="no positional encoding added",
    ),
    Bug(
        "TinyTranslator",
        "source-masks-missing",
        _translator(encoder_mask="None", cross_mask="None", forward_mask="None"),
        expect="source padding masks missing everywhere",
    ),
    Bug(
        "TinyTranslator",
        "source-masks-inverted",
        _translator(encoder_mask="src == self.pad_id", forward_mask="src == self.pad_id"),
        expect="source padding masks inverted",
    ),
    Bug(
        "TinyTranslator",
        "target-padding-missing",
        _translator(target_mask="None"),
        expect="the target padding mask missing",
    ),
    Bug(
        "TinyTranslator",
        "own-decoder-layer-without-causal-mask",
        _NO_CAUSAL_LAYER + _translator(decoder="OwnDecoderLayer"),
        expect="the causal mask missing in the decoder",
    ),
    Bug(
        "TinyTranslator",
        "target-read-with-the-source-embedding",
        _translator(target_embedding="self.src_embed"),
        expect="embedded with the source embedding",
    ),
    Bug(
        "TinyTranslator",
        "positions-as-a-trained-parameter",
        _translator(pe="self.pe = nn.Parameter(torch.tensor(positional_encoding(max_len, d_model)))"),
        expect="parameters the contract does not name",
    ),
    Bug(
        "TinyTranslator",
        "pad-id-taken-as-zero",
        _translator(encoder_mask="src != 0", target_mask="tgt_in != 0", forward_mask="src != 0"),
        expect="masks built with pad_id 0",
    ),
    Bug(
        "TinyTranslator",
        "float32-positional-table",
        _translator(
            pe='self.register_buffer("pe", torch.tensor(positional_encoding(max_len, d_model), '
            "dtype=torch.float32), persistent=False)"
        ),
        expect="the positional table kept in float32",
    ),
    Bug(
        "TinyTranslator",
        "one-layer-repeated",
        _translator().replace(
            "nn.ModuleList(EncoderLayer(d_model, num_heads, d_ff) for _ in range(num_layers))",
            "nn.ModuleList([EncoderLayer(d_model, num_heads, d_ff)] * num_layers)",
        ),
        expect="encoder_layers holds one shared layer",
    ),
    # ---------------------------------------------------------------- train_step
    Bug("train_step", "no-clipping", _train(clip=""), expect="no gradient clipping before the update"),
    Bug(
        "train_step",
        "clipping-after-the-step",
        _train(clip="", after="nn.utils.clip_grad_norm_(model.parameters(), 1.0)"),
        expect="no gradient clipping before the update",
    ),
    Bug(
        "train_step",
        "clip-by-value",
        _train(clip="nn.utils.clip_grad_value_(model.parameters(), 1.0)"),
        expect="clip_grad_value_",
    ),
    Bug("train_step", "no-zero-grad", _train(zero=""), expect="no optimizer.zero_grad()"),
    Bug(
        "train_step",
        "zero-grad-before-the-step",
        _train(zero="", late_zero="optimizer.zero_grad()"),
        expect="between backward and step",
    ),
    Bug("train_step", "unshifted-decoder-input", _train(decoder_input="tgt"), expect="read tgt itself"),
    Bug(
        "train_step",
        "loss-against-the-input",
        _train(loss_target="shift_right(tgt, bos_id)"),
        expect="compared the logits with the decoder's input",
    ),
    # ---------------------------------------------------------------- greedy_decode_cached
    Bug(
        "greedy_decode_cached",
        "cache-not-used",
        _decode(append='cache["k"], cache["v"] = k_new, v_new'),
        expect="a KV cache that is not used",
    ),
    Bug(
        "greedy_decode_cached",
        "cache-appended-on-the-head-axis",
        _decode(append=_APPEND_ON.format(axis=1)),
        expect="along an axis other than the sequence axis",
    ),
    Bug(
        "greedy_decode_cached",
        "cache-appended-on-the-feature-axis",
        _decode(append=_APPEND_ON.format(axis=-1)),
        expect="along an axis other than the sequence axis",
    ),
    Bug(
        "greedy_decode_cached",
        "one-cache-for-all-layers",
        _decode(caches='[{"k": None, "v": None}] * len(layers)'),
        expect="one KV cache shared by all the decoder layers",
    ),
    Bug("greedy_decode_cached", "no-cache-at-all", _UNCACHED, expect="decoding without a KV cache"),
    Bug(
        "greedy_decode_cached",
        "cross-attention-recomputed-every-step",
        _decode(per_step=_CROSS_EVERY_STEP),
        expect="Cross-attention projected the source's keys 8 times",
    ),
    Bug(
        "greedy_decode_cached",
        "encoder-every-step",
        _decode(per_step=_ENCODE_EVERY_STEP),
        expect="model.encode ran 8 times",
    ),
    Bug(
        "greedy_decode_cached",
        "every-token-at-position-0",
        _decode(position="0"),
        expect="every new token embedded at position 0",
    ),
    Bug(
        "greedy_decode_cached",
        "positions-off-by-one",
        _decode(position="t + 1"),
        expect="positions off by one",
    ),
    Bug(
        "greedy_decode_cached",
        "source-padding-ignored",
        _decode(src_keys="None"),
        expect="the source padding ignored in cross-attention",
    ),
    Bug("greedy_decode_cached", "keeps-going-after-eos", _decode(after_eos=""), names="after EOS"),
    Bug(
        "greedy_decode_cached",
        "newest-position-attended-twice",
        _decode().replace(
            'F.scaled_dot_product_attention(heads(attn.W_q(y)), cache["k"], cache["v"])',
            'F.scaled_dot_product_attention(heads(attn.W_q(y)), torch.cat([cache["k"], k_new], dim=-2), '
            'torch.cat([cache["v"], v_new], dim=-2))',
        ),
        expect="the newest token attended twice",
    ),
    Bug(
        "greedy_decode_cached",
        "pad-after-eos",
        _decode(after_eos="next_id = torch.where(finished, torch.full_like(next_id, model.pad_id), next_id)"),
        expect="padded with pad_id after its EOS",
    ),
    Bug(
        "greedy_decode_cached",
        "argmax-over-the-batch",
        _decode().replace(_NEXT_ID, _NEXT_ID.replace("dim=-1", "dim=0")),
        expect="the argmax taken over the batch axis",
    ),
    Bug(
        "greedy_decode_cached",
        "stops-at-the-first-eos",
        _decode().replace("if finished.all():", "if finished.any():"),
        expect="stopped before every sentence had emitted EOS",
    ),
    Bug(
        "greedy_decode_cached",
        "stops-when-the-first-sentence-ends",
        _decode().replace("if finished.all():", "if next_id[0] == eos_id:"),
        expect="stopped before every sentence had emitted EOS",
    ),
    Bug(
        "greedy_decode_cached",
        "one-sentence-at-a-time",
        _decode().replace("def greedy_decode_cached(", "def decode_one(") + _ONE_SENTENCE_AT_A_TIME,
        expect="the sentences decoded one at a time",
    ),
    Bug(
        "greedy_decode_cached",
        "self-attention-softmax-over-the-queries",
        _decode().replace(
            _SELF_ATTENTION,
            'scores = heads(attn.W_q(y)) @ cache["k"].transpose(-2, -1) / math.sqrt(d_model // h)\n'
            '            out = torch.softmax(scores, dim=-2) @ cache["v"]',
        ),
        expect="softmax taken over the query axis",
    ),
    Bug(
        "greedy_decode_cached",
        "self-attention-not-scaled",
        _decode().replace(
            _SELF_ATTENTION,
            'out = torch.softmax(heads(attn.W_q(y)) @ cache["k"].transpose(-2, -1), dim=-1) @ cache["v"]',
        ),
        expect="self-attention's scores not divided by sqrt(d_head)",
    ),
    Bug("greedy_decode_cached", "pre-norm", _pre_norm(_decode()), expect="pre-norm sublayers"),
    # ---------------------------------------------------------------- sample_next_token
    Bug(
        "sample_next_token",
        "temperature-multiplied",
        _sample(scaled="logits * temperature"),
        expect="the temperature multiplied the logits",
    ),
    Bug("sample_next_token", "top-k-after-the-draw", _TOP_K_AFTER_THE_DRAW, expect="not among the top_k"),
    Bug(
        "sample_next_token",
        "top-k-keeps-the-smallest",
        _sample(largest=", largest=False", compare=">"),
        expect="kept the k smallest logits",
    ),
    Bug(
        "sample_next_token",
        "global-random-generator",
        _sample(draw="torch.multinomial(probabilities, 1).squeeze(-1)"),
        expect="global random generator",
    ),
    Bug(
        "sample_next_token",
        "always-the-argmax",
        _sample(draw="probabilities.argmax(dim=-1)"),
        expect="the argmax instead of a draw",
    ),
    Bug(
        "sample_next_token",
        "softmax-over-the-batch",
        _sample(axis="0"),
        expect="the softmax taken over the batch axis",
    ),
    Bug(
        "sample_next_token",
        "top-k-keeps-one-more",
        _sample().replace("torch.topk(z, top_k, dim=-1)", "torch.topk(z, top_k + 1, dim=-1)"),
        expect="k + 1 tokens kept",
    ),
    Bug(
        "sample_next_token",
        "argmax-over-the-batch-at-temperature-0",
        _sample().replace("return logits.argmax(dim=-1)", "return logits.argmax(dim=0)"),
        expect="with temperature 0 that is the argmax over the vocabulary",
    ),
    Bug(
        "sample_next_token",
        "no-case-for-temperature-0",
        """
def sample_next_token(logits, temperature=1.0, top_k=None, generator=None):
    z = logits / temperature
    if top_k is not None and top_k < z.shape[-1]:
        z = z.masked_fill(z < torch.topk(z, top_k, dim=-1).values[:, -1:], float("-inf"))
    return torch.multinomial(torch.softmax(z, dim=-1), 1, generator=generator).squeeze(-1)
""",
        names="temperature 0",
    ),
]
