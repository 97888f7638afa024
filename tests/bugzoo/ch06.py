"""Known-wrong implementations of chapter 6's exercises (positional_encoding, greedy_decode), as
learners write them. The notebook's setup cell provides numpy as np and torch."""

from tests.bugzoo import Bug

ASSIGNMENT = "06_tiny_translator"


def _pe(angles: str, fill: str) -> str:
    """A positional encoding whose angles and column filling vary."""
    return f"""
def positional_encoding(n, d_model):
    p = np.arange(n)[:, None]
    i = np.arange(0, d_model, 2)
    angles = {angles}
    pe = np.zeros((n, d_model))
{fill}
    return pe
"""


_INTERLEAVE = """    pe[:, 0::2] = np.sin(angles)
    pe[:, 1::2] = np.cos(angles)[:, : d_model // 2]"""


def _decode(body: str, start: str = "bos_id", result: str = "tgt[:, 1:]") -> str:
    """A greedy decoder whose loop body, first token and return value vary."""
    return f"""
def greedy_decode(model, src, max_len, bos_id, eos_id):
    memory = model.encode(src)
    B = src.shape[0]
    tgt = torch.full((B, 1), {start}, dtype=torch.long)
    finished = torch.zeros(B, dtype=torch.bool)
    for _ in range(max_len):
{body}
    return {result}
"""


_STEP = """        logits = model.decode(tgt, memory)
        next_id = logits[:, -1].argmax(dim=-1)
        next_id = torch.where(finished, torch.full_like(next_id, eos_id), next_id)
        tgt = torch.cat([tgt, next_id[:, None]], dim=1)
        finished = finished | (next_id == eos_id)
        if finished.all():
            break"""

BUGS = [
    # ---------------------------------------------------------------- positional_encoding
    Bug(
        exercise="positional_encoding",
        name="sin_cos_swapped",
        code=_pe(
            "p / 10000 ** (i / d_model)",
            "    pe[:, 0::2] = np.cos(angles)\n    pe[:, 1::2] = np.sin(angles)[:, : d_model // 2]",
        ),
        expect="sin and cos swapped",
    ),
    Bug(
        exercise="positional_encoding",
        name="concatenated",
        code=_pe(
            "p / 10000 ** (i / d_model)",
            "    pe = np.concatenate([np.sin(angles), np.cos(angles)[:, : d_model // 2]], axis=1)",
        ),
        expect="concatenated",
    ),
    Bug(
        exercise="positional_encoding",
        name="exponent_i_instead_of_2i",
        code=_pe("p / 10000 ** ((i // 2) / d_model)", _INTERLEAVE),
        expect="i / d_model instead of 2i / d_model",
    ),
    Bug(
        exercise="positional_encoding",
        name="one_frequency_per_column",
        code="""
def positional_encoding(n, d_model):
    p = np.arange(n)[:, None]
    j = np.arange(d_model)
    angles = p / 10000 ** (j / d_model)
    return np.where(j % 2 == 0, np.sin(angles), np.cos(angles))
""",
        expect="one frequency per column",
    ),
    Bug(
        exercise="positional_encoding",
        name="base_1000",
        code=_pe("p / 1000 ** (i / d_model)", _INTERLEAVE),
        expect="base of 1000",
    ),
    Bug(
        exercise="positional_encoding",
        name="base_e",
        code=_pe("p * np.exp(-i / d_model)", _INTERLEAVE),
        expect="base of e",
    ),
    Bug(
        exercise="positional_encoding",
        name="multiplied_by_the_wavelength",
        code=_pe("p * 10000 ** (i / d_model)", _INTERLEAVE),
        expect="missing minus sign",
    ),
    Bug(
        exercise="positional_encoding",
        name="positions_from_one",
        code=_pe("(p + 1) / 10000 ** (i / d_model)", _INTERLEAVE),
        expect="counted from 1",
    ),
    Bug(
        exercise="positional_encoding",
        name="odd_d_model_not_handled",
        code=_pe(
            "p / 10000 ** (i / d_model)",
            "    pe[:, 0::2] = np.sin(angles)\n    pe[:, 1::2] = np.cos(angles)",
        ),
        expect="",  # raises on an odd d_model (a cosine column too many)
        names="odd d_model",
    ),
    Bug(
        exercise="positional_encoding",
        name="transposed",
        code=_pe("p / 10000 ** (i / d_model)", _INTERLEAVE).replace("    return pe", "    return pe.T"),
        expect="shape",
        names="transpose",
    ),
    # named by the judging half's classic bugs (grader.exercises.ch06_bugs.HINTED_PE_BUGS)
    Bug(
        exercise="positional_encoding",
        name="exponent_4i",
        code=_pe("p / 10000 ** (2 * i / d_model)", _INTERLEAVE),
        expect="an exponent of 4i / d_model",
    ),
    Bug(
        exercise="positional_encoding",
        name="integer_division_in_the_exponent",
        code=_pe("p / 10000 ** (i // d_model)", _INTERLEAVE),
        expect="integer division in the exponent",
    ),
    Bug(
        exercise="positional_encoding",
        name="integer_division_of_the_angles",
        code=_pe("p // 10000 ** (i / d_model)", _INTERLEAVE),
        expect="integer division of the angles",
    ),
    Bug(
        exercise="positional_encoding",
        name="log10_instead_of_ln",
        code=_pe("p * np.exp(-i * np.log10(10000.0) / d_model)", _INTERLEAVE),
        expect="log10(10000) = 4",
    ),
    Bug(
        exercise="positional_encoding",
        name="base_10",
        code=_pe("p / 10 ** (i / d_model)", _INTERLEAVE),
        expect="a base of 10 instead of 10000",
    ),
    Bug(
        exercise="positional_encoding",
        name="positions_by_linspace",
        code=_pe("np.linspace(0, 1, n)[:, None] / 10000 ** (i / d_model)", _INTERLEAVE),
        expect="positions scaled into [0, 1] (p / (n - 1)",
    ),
    Bug(
        exercise="positional_encoding",
        name="positions_divided_by_n",
        code=_pe("p / n / 10000 ** (i / d_model)", _INTERLEAVE),
        expect="positions scaled into [0, 1) (p / n)",
    ),
    Bug(
        exercise="positional_encoding",
        name="odd_last_column_left_at_zero",
        code=_pe(
            "p / 10000 ** (i / d_model)",
            "    half = d_model // 2\n"
            "    pe[:, 0 : 2 * half : 2] = np.sin(angles[:, :half])\n"
            "    pe[:, 1::2] = np.cos(angles[:, :half])",
        ),
        expect="the last column of an odd d_model was left at zero",
    ),
    Bug(
        exercise="positional_encoding",
        name="odd_last_column_a_cosine",
        code=_pe(
            "p / 10000 ** (i / d_model)",
            _INTERLEAVE + "\n    if d_model % 2:\n        pe[:, -1] = np.cos(angles[:, -1])",
        ),
        expect="the last column of an odd d_model holds a cosine",
    ),
    Bug(
        exercise="positional_encoding",
        name="odd_d_model_rounded_up",
        code="""
def positional_encoding(n, d_model):
    d = d_model + d_model % 2  # an even width, cut at the end
    p = np.arange(n)[:, None]
    angles = p / 10000 ** (np.arange(0, d, 2) / d)
    pe = np.zeros((n, d))
    pe[:, 0::2], pe[:, 1::2] = np.sin(angles), np.cos(angles)
    return pe[:, :d_model]
""",
        expect="computed for d_model + 1",
    ),
    Bug(
        exercise="positional_encoding",
        name="odd_d_model_rounded_down",
        code="""
def positional_encoding(n, d_model):
    d = d_model - d_model % 2  # an even width, padded with a zero column
    p = np.arange(n)[:, None]
    angles = p / 10000 ** (np.arange(0, d, 2) / max(d, 1))
    pe = np.zeros((n, d_model))
    pe[:, 0:d:2], pe[:, 1:d:2] = np.sin(angles), np.cos(angles)
    return pe
""",
        expect="computed for d_model - 1",
    ),
    # ---------------------------------------------------------------- greedy_decode
    Bug(
        exercise="greedy_decode",
        name="keeps_going_after_eos",
        code=_decode(
            _STEP.replace(
                "        next_id = torch.where(finished, torch.full_like(next_id, eos_id), next_id)\n", ""
            )
        ),
        expect="keeps going after EOS",
    ),
    Bug(
        exercise="greedy_decode",
        name="no_record_of_finished_sentences",
        code=_decode(
            _STEP.replace(
                "        next_id = torch.where(finished, torch.full_like(next_id, eos_id), next_id)\n", ""
            ).replace("finished = finished | (next_id == eos_id)", "finished = next_id == eos_id")
        ),
        expect="keeps going after EOS",
    ),
    Bug(
        exercise="greedy_decode",
        name="runs_all_max_len_steps",
        code=_decode(_STEP.replace("        if finished.all():\n            break", "")),
        expect="runs all max_len steps",
    ),
    Bug(
        exercise="greedy_decode",
        name="argmax_of_the_first_position",
        code=_decode(_STEP.replace("logits[:, -1]", "logits[:, 0]")),
        expect="argmax of the wrong position",
    ),
    Bug(
        exercise="greedy_decode",
        name="forgets_bos",
        code=_decode(_STEP, start="0"),
        expect="forgets BOS",
    ),
    Bug(
        exercise="greedy_decode",
        name="returns_the_bos_too",
        code=_decode(_STEP, result="tgt"),
        expect="keeps the BOS in front",
    ),
    Bug(
        exercise="greedy_decode",
        name="returns_the_prompt",
        code=_decode(_STEP, result="src"),
        expect="returns the prompt",
    ),
    Bug(
        exercise="greedy_decode",
        name="stops_when_one_sentence_ends",
        code=_decode(_STEP.replace("finished.all()", "finished.any()")),
        expect="treats the batch as one sequence",
    ),
    Bug(
        exercise="greedy_decode",
        name="argmax_over_the_whole_batch",
        code=_decode(
            _STEP.replace(
                "logits[:, -1].argmax(dim=-1)",
                "(logits[:, -1].argmax() % logits.shape[-1]).repeat(B)",
            )
        ),
        expect="treats the batch as one sequence",
    ),
    Bug(
        exercise="greedy_decode",
        name="one_sentence_at_a_time_without_padding",
        code="""
def greedy_decode(model, src, max_len, bos_id, eos_id):
    rows = []
    for b in range(src.shape[0]):
        memory = model.encode(src[b : b + 1])
        tgt = torch.tensor([[bos_id]])
        for _ in range(max_len):
            next_id = model.decode(tgt, memory)[:, -1].argmax(dim=-1)
            tgt = torch.cat([tgt, next_id[:, None]], dim=1)
            if next_id.item() == eos_id:
                break
        rows.append(tgt[0, 1:])
    return torch.nn.utils.rnn.pad_sequence(rows, batch_first=True)
""",
        expect="",  # pads with 0 instead of eos_id
        names="eos_id",
    ),
    # named by the hints' bug models (attention_learner.cases.ch06.decode_models)
    Bug(
        exercise="greedy_decode",
        name="decoder_fed_only_bos",
        code=_decode(_STEP.replace("model.decode(tgt, memory)", "model.decode(tgt[:, :1], memory)")),
        expect="Every step produced the token of the first step again",
    ),
    Bug(
        exercise="greedy_decode",
        name="decoder_fed_only_the_newest_token",
        code=_decode(_STEP.replace("model.decode(tgt, memory)", "model.decode(tgt[:, -1:], memory)")),
        expect="fed only the newest token",
    ),
    Bug(
        exercise="greedy_decode",
        name="drops_the_first_generated_token",
        code=_decode(_STEP, result="tgt[:, 2:]"),
        expect="The first generated token is missing",
    ),
    Bug(
        exercise="greedy_decode",
        name="max_len_counts_the_bos",
        code=_decode(_STEP.replace("if finished.all():", "if finished.all() or tgt.shape[1] == max_len:")),
        expect="max_len counts the generated tokens",
    ),
    Bug(
        exercise="greedy_decode",
        name="stops_one_step_late",
        code=_decode(  # tests finished.all() before adding this step's EOS to finished
            _STEP.replace("        finished = finished | (next_id == eos_id)\n", "").replace(
                "            break", "            break\n        finished = finished | (next_id == eos_id)"
            )
        ),
        expect="stopped one step late",
    ),
]
