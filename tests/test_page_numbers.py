"""A number a page states in words comes from the page's own computation, or is on a list.

The book says it makes no claim it does not measure. A sentence that states a measured value
(a count, a percentage, a crossing point, a ratio, a best or a worst) must take it from the
computation: a myst-nb glue role (``{glue:text}`key:.2f```, filled in by the build; also in
alt texts, see ``_ext/book_pages.py``), or text the cell prints. Typed by hand, such a number
goes stale as soon as the code changes, and nobody notices.

So every digit in the narrative of an executed page of the book (one listed in ``_toc.yml``;
its Markdown, its figure captions and
alt texts; ``tests/page_numbers.py`` says exactly what counts as narrative) must be glued,
printed, or allowed here for a stated reason:

- ``GLOBAL``: patterns that are never measurements (chapter numbers, citation years, type
  names such as float64, indices such as "head 0", 0 / 1 / 2 inside formulas);
- ``ALLOWED[page]``: phrases of one page, each with its kind:

  - ``CODE``: a size the page itself sets in code ("$T = 60$"); checked: every number of the
    phrase is a literal in the page's code cells, so that the prose cannot drift from it;
  - ``PAPER``: a constant of a cited paper or model ("$d_k = 64$ per head is typical");
  - ``DEFINITION``: true by definition or by arithmetic on the page's own sizes
    ("$\\log 16 \\approx 2.77$", "each row has norm 4");
  - ``EXAMPLE``: a number inside a hypothetical or an explanation, not a result ("no hardware
    can start step 100 before step 99 has finished").

Every phrase must still be on its page (no stale entries). The audit of what each page claims
is ``docs/claims.md``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import toc_files
from tests.page_numbers import MATH, code_literals, narrative, stated_numbers
from tests.test_pages import ROOT, narrative_pages


def built_pages() -> list:
    """The executed pages the book builds: the narrative pages listed in _toc.yml."""
    listed = set(toc_files())
    return [p for p in narrative_pages() if str(p.values[0].relative_to(ROOT).with_suffix("")) in listed]


CODE = "set in code"
PAPER = "a constant of a cited paper or model"
DEFINITION = "true by definition, or arithmetic on the page's sizes"
EXAMPLE = "an example or a hypothetical, not a result"

GLOBAL: list[tuple[str, str]] = [
    (r"[Cc]hapters? \d+(?:(?:,| and| to| or) \d+)*|chapter-\d+|[Cc]hapter \d+'s", "a chapter number"),
    (r"\b(?:19[5-9]\d|20[0-2]\d)(?=[);,])", "the year of a citation"),
    (r"\b(?:float|int)(?:16|32|64)\b|\b(?:16|32|64)-bit\b", "the name of a number type"),
    (r"\bStep \d\b", "the number of a step of the page's own procedure"),
    (
        r"(?i:\b(?:heads?|rows?|columns?|positions?|tokens?|query|queries|keys?|entry|entries|"
        r"features?|sequences?|sentences?|blocks?|steps?|layers?|panels?) \d+"
        r"(?:(?:,| and| to| or|\.\.) ?\d+)*\b)",
        "an index into the page's own example (head 0, positions 0 to 7)",
    ),
    (r"\bsum(?:s|ming)? to 1\b|\bbetween 0 and 1\b|\bfrom 0 to 1\b|\bsum of 1\b", "a softmax sums to 1"),
    (r"\bone-hot\b|\bone\b", "not a digit"),
]

# The numbers 1 to 3 that book_figures.draw_transformer gives the three attention types.
DIAGRAM_LABELS = [
    ("numbered: 1, encoder self-attention", DEFINITION),
    ("; 2, masked decoder self-attention", DEFINITION),
    ("; 3, cross-attention", DEFINITION),
    ("marked 1", DEFINITION),
    ("marked 2", DEFINITION),
    ("marked 3", DEFINITION),
]

ALLOWED: dict[str, list[tuple[str, str]]] = {
    "intro.md": [
        *DIAGRAM_LABELS,
        ("(Python 3.10 or newer", DEFINITION),  # the learner package's requires-python
    ],
    "chapters/01_rnn_bottlenecks/beyond_sequential_processing.md": [
        ("A heatmap with 12 columns", CODE),
        ("and 16 rows", CODE),
        ("from blue (-1) to red (+1)", CODE),
        ("a gate close to 1", DEFINITION),
        ("$T = 60$ random tokens with $d = 64$", CODE),
        ("the distance k from 0 to 59", DEFINITION),  # T = 60 steps
        ("at k = 10", CODE),
        ("at k = 59", CODE),
        ("$d = 64$-dimensional tokens", CODE),
        ("one CPU thread, $d = 64$", CODE),
        ("T from 16 to 2048", CODE),
        ("lengths 1 to 20", CODE),
        ("with a 32-dimensional state", CODE),
        ("600 steps of 64 sequences", CODE),
        ("uniformly from 1 to 20", CODE),
        ("sequence length from 1 to 20", CODE),
        ("It is 1 up to length", DEFINITION),  # every token right
        ("the same 32 numbers", CODE),
    ],
    "chapters/02_queries_keys_values/queries_keys_values.md": [
        ("(black = 1, white = 0)", CODE),
        ("a score higher by 1 means a weight $e \\approx 2.7$ times larger", DEFINITION),
        ("$e \\approx 8 \\times 10$ is still representable", DEFINITION),  # e^709, IEEE float64
        ("underflows to 0", DEFINITION),
        ("at most 0 (no overflow)", DEFINITION),
        ("at least 1 and never underflows to 0", DEFINITION),
        ("divides 0 by 0", DEFINITION),
        ("softmax of 10 random float64 scores", CODE),
        ("(2000 score vectors per spread)", CODE),
        ("as written is 0 for small spreads", DEFINITION),  # below the glued first spread
    ],
    "chapters/03_scaled_dot_product/scaled_dot_product_attention.md": [
        ("A 3 by 5 heatmap", CODE),
    ],
    "chapters/03_scaled_dot_product/why_sqrt_dk.md": [
        ("$d = 64$ per head is typical", PAPER),  # Vaswani et al. (2017): d_model 512, 8 heads
        ("with mean 0 and a variance of 1", DEFINITION),
        ("brings it back to 1", DEFINITION),
        ("on the dashed theory line at 1", DEFINITION),
        ("draws 5 000 independent pairs", CODE),
        ("(5 000 pairs per width", CODE),
        ("At $d = 64$ the raw scores", CODE),
        ("$e \\approx 22\\,000$ times the other", DEFINITION),  # e^10
        ("for uniform weights and 0 for a one-hot vector", DEFINITION),
        ("is 1 when $i = j$ and 0 otherwise", DEFINITION),
        ("has a factor that is 0", DEFINITION),
        ("400 queries, each with its own 16 random keys", CODE),
        ("the median over the 400 queries", CODE),
        ("400 random queries over 16 keys each", CODE),
        ("falls below 0.1 nats", CODE),
        ("$\\log 16 \\approx$", CODE),
        ("a single query at $d = 256$", CODE),
        ("one query over 16 keys at $d = 256$", CODE),
        ("each run smoothed over 10 steps", CODE),
        ("is $1/\\sqrt{d}$ with scaling and 1 without", DEFINITION),  # the scale of raw scores
        ("(the 75th percentile)", DEFINITION),
        ("values below $10$ drawn on the lower edge", DEFINITION),  # the figure's floor, 10^{-12}
    ],
    "chapters/03_scaled_dot_product/masks.md": [
        ("such as $-10$ instead of", EXAMPLE),  # -10^9
        ("the same $-10$, and", EXAMPLE),
        ("the $-10$ shortcut", EXAMPLE),
        ("(top, 1 = may attend)", DEFINITION),
        ("the first i + 1 cells in row i", DEFINITION),
        ("a middle axis of size 1", DEFINITION),
        ("keeps the variance at 1", DEFINITION),
        ("[03_scaled_dot_product.ipynb]", DEFINITION),  # a file name
    ],
    "chapters/04_multi_head/multi_head_attention.md": [
        ("$B = 2$, $n = 5$, $n = 7$, $h = 3$", CODE),
        ("$10t, 10t+1, \\dots$", CODE),
        ("$4 d + 4 d$", DEFINITION),  # the parameter count of four d x d projections with biases
        ("the base model's $d = 512$", PAPER),
        ("a sequence of 100 tokens", CODE),
        ("($d = 512$, $n = 100$ above)", CODE),
        ("one head of width 512 produces one distribution per query, eight heads of width 64", PAPER),
        ("$(3 d, d)$", DEFINITION),  # the shape of torch's packed in_proj_weight
    ],
    "chapters/04_multi_head/heads_specialise.md": [
        ("padded with zeros to $d = 34$", CODE),
        ("and 0 otherwise", DEFINITION),
        ("With $c = 8\\sqrt{d}$ the favoured score is 8", CODE),
        ("cancelled to 0 (its word term, $+8$, and its position term, $-8$, add up to 0)", CODE),
        ("its scores are 0 and", DEFINITION),
        ("($h = 1$, $d = 34$)", CODE),
        ("$1/\\sqrt{34}$", CODE),
        ("keep each favoured score at 8", CODE),
    ],
    "chapters/05_transformer_attention/three_attention_types.md": [
        *DIAGRAM_LABELS,
        ("Three 8 by 8 heatmaps", CODE),
        ("so their weights are exactly 0", DEFINITION),  # e^(-inf)
        ("(top, 1 = may attend)", DEFINITION),
    ],
    "chapters/05_transformer_attention/encoder_decoder_layers.md": [
        ("rescaled to mean 0 and variance 1", DEFINITION),
        ("(2048 for $d = 512$ in the original paper)", PAPER),
        ("with its initial gain 1 and bias 0 each output row has mean 0 and variance 1", DEFINITION),
        ("$4 d + 4 d$", DEFINITION),
        ("($d = 512$, 8 heads, $d = 2048$)", CODE),
        ("Dropout must be 0", DEFINITION),
        ("With dropout 0", DEFINITION),
        ("post-norm outputs have mean 0 and variance 1 per row", DEFINITION),  # measured above too
    ],
    "chapters/06_tiny_translator/positions.md": [
        ("a sentence of 7 token vectors", CODE),
        ("\\omega = 10000", PAPER),  # Vaswani et al. (2017), section 3.5
        ("frequency 10000^(-2i/32)", PAPER),
        ("approach $1/10000$", PAPER),  # the limit of the slowest frequency, glued at d = 32
        ("down to $10000$", PAPER),  # 10000^(-(d - 2)/d) as the text check reads it
        ("$2\\pi \\approx 6.3$", DEFINITION),
        ("one period every 6.3 positions", DEFINITION),
        ("the encoding of 64 positions (rows) in 32 features", CODE),
        ("a heatmap of 64 rows and 32 columns with values from -1 to 1", CODE),
        ("almost constant, 0 for even columns and 1 for odd ones", DEFINITION),  # sin 0, cos 0
        ("position from 0 to 63", DEFINITION),
        ("one period over the 64 positions", CODE),
        ("rises almost linearly from 0 to", DEFINITION),  # sin 0
        ("PE[q] of 64 positions", CODE),
        ("a symmetric 64 by 64 heatmap with a bright main diagonal (value 16)", DEFINITION),  # d/2
        ("starting at 16 for k = 0", DEFINITION),
        ("at k = 4", CODE),
        ("largest for the token itself ($d/2 = 16$)", DEFINITION),
        ("is at most 1 and each row has norm $\\sqrt{d/2} = 4$", DEFINITION),
        ("they are of size 1", DEFINITION),
    ],
    "chapters/06_tiny_translator/tiny_translator.md": [
        ("$d = 32$, 4 heads", CODE),
        ("of 8 features", DEFINITION),  # 32 / 4
        ("a feed-forward width of 64", CODE),
        ("a learning rate of 0.01", CODE),
        ("150 steps of 64 pairs drawn at random from the 3000", CODE),
        ("at each of the 150 steps", CODE),
        ("(the mean of the last 10 steps) at step 150", CODE),
        ("a batch of 400", CODE),
        ("exactly right after 150 steps", CODE),
        ("the 4-clause sentences", CODE),
        ("sentences of 4 clauses", CODE),
        ("learns the task in 150 steps", CODE),
    ],
    "chapters/06_tiny_translator/closing_the_loop.md": [
        ("$d = 32$, with a residual connection", CODE),
        ("learning rate 0.01, 100 steps of 32 pairs from the same 3000 training pairs", CODE),
        ("(100 steps of 32 pairs, learning rate 0.01,", CODE),
        ("the number of clauses, 1 to 4", CODE),
        ("one state of 40 numbers", CODE),
    ],
    "chapters/07_attention_at_scale/attention_at_scale.md": [
        ("a 10 by 10 matrix", EXAMPLE),  # "a sentence of ten tokens"
        ("(8 in float64, 4 in float32)", DEFINITION),
        ("one layer of 32 heads in float32", CODE),
        ("$n = 1024$ | $n = 16384$ | $n = 131072$", CODE),
        ("| 32 heads, float32 |", CODE),
        ("(with $d = d = 64$)", CODE),
        ("blocks of 128 keys", CODE),
        ("against n from 256 to 2048", CODE),
        ("At $n = 2048$", CODE),
        ("at a fixed $n = 1024$", CODE),
        ("online softmax at n = 1024", CODE),
        ("from 16 to 64 keys per block", CODE),
        ("from 64 to 1024", CODE),
        ("a single block of 1024 keys", CODE),
        ("$n = 64$, $n = 1000$, blocks of 64", CODE),
        ("holds only 40 keys", DEFINITION),  # 1000 = 15 * 64 + 40
        ("(standard deviation 1)", DEFINITION),  # standard normal entries, q.k / 4
        ("scores of order $\\pm 1000$", CODE),
        ("scores of order ±1000", CODE),
        ("exceeds about 709", DEFINITION),  # log of the largest float64
    ],
    "chapters/07_attention_at_scale/kv_cache.md": [
        ("float32 with $d = 256$ and 4 heads", CODE),
        ("float32, d_model = 256, 4 heads", CODE),
        ("12 layers of width 768 in float32", CODE),
        ("(the shape of GPT-2 small,", PAPER),  # Radford et al. (2019)
        ("32 layers of width 4096 in 16-bit floats", CODE),
        ("(the shape of a 7-billion-parameter model such as Llama 2 7B,", PAPER),  # Touvron et al. (2023)
        ("for 4096 tokens", CODE),
        ("12 layers, width 768, float32:", CODE),
        ("32 layers, width 4096, 16-bit:", CODE),
        ("(batch 1, 4 heads, 512 tokens, $d = 64$, float32)", CODE),
        ("blocks of 128", CODE),
    ],
    "chapters/09_modern_attention/rotary_positions.md": [
        ("$\\theta = 10000$", PAPER),  # Su et al. (2021), the frequencies of Vaswani et al. (2017)
        ("(float64, $d = 64$)", CODE),
    ],
    "chapters/09_modern_attention/grouped_query_attention.md": [
        ("Llama 2 70B", PAPER),
        ("Mistral 7B", PAPER),
        ("Llama 3 8B", PAPER),
        ("4,096 positions", CODE),
        ("with its 8 key/value heads", PAPER),
        (
            "with 8 query heads is trained with 8 key/value heads (MHA), "
            "2 (GQA, a quarter of the query heads) "
            "and 1 (MQA)",
            CODE,
        ),
        ("the median of 21 steps", CODE),
        ("for 8, 2 and 1 key/value heads", CODE),
    ],
    "chapters/09_modern_attention/windows_and_sinks.md": [
        ("Mistral 7B's layers use a window of 4,096", PAPER),
        ("2 heads of 16 features", CODE),
        ("8 query heads sharing 2 key/value heads", CODE),
    ],
    "chapters/09_modern_attention/flash_attention_backward.md": [
        ("FlashAttention-2", PAPER),
        ("two heads of 32 features", CODE),
        ("blocks of 128", CODE),
        ("2017's attention", PAPER),
    ],
}

MATH_CONSTANTS = {0.0, 1.0, 2.0}  # inside a formula: 1 - p, x^2 / 2, {0, 1}, 2i + 1


def page_id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def allowed_spans(text: str, page: str) -> list[tuple[int, int, str]]:
    spans = []
    for pattern, reason in GLOBAL:
        spans += [(m.start(), m.end(), reason) for m in re.finditer(pattern, text)]
    for phrase, kind in ALLOWED.get(page, []):
        start = text.find(phrase)
        while start >= 0:
            spans.append((start, start + len(phrase), kind))
            start = text.find(phrase, start + 1)
    return spans


def unexplained_numbers(page: Path) -> list[str]:
    """Numbers of the page's prose that are neither glued, printed nor allowed, in context."""
    text = narrative(page)
    spans = allowed_spans(text, page_id(page))
    math = [(m.start(), m.end()) for m in MATH.finditer(text)]
    found = []
    for number in stated_numbers(text):
        if any(start <= number.start and number.end <= end for start, end, _ in spans):
            continue
        in_math = any(start <= number.start < end for start, end in math)
        if in_math and number.value in MATH_CONSTANTS:
            continue
        context = text[max(0, number.start - 60) : number.end + 40]
        found.append(f"{number.text!r} in ...{context}...")
    return found


@pytest.mark.parametrize("page", built_pages())
def test_every_number_in_the_prose_is_computed_or_allowed(page: Path):
    found = unexplained_numbers(page)
    assert not found, (
        f"{page_id(page)} states numbers that are neither glued nor allowed "
        "(glue measured values; list sizes, definitions and examples in ALLOWED):\n" + "\n".join(found)
    )


@pytest.mark.parametrize("page", built_pages())
def test_allowed_phrases_are_on_their_page_and_sizes_match_the_code(page: Path):
    entries = ALLOWED.get(page_id(page), [])
    if not entries:
        return
    text, literals = narrative(page), code_literals(page)
    stale = [phrase for phrase, _ in entries if phrase not in text]
    assert not stale, f"{page_id(page)}: allowed phrases no longer on the page: {stale}"
    for phrase, kind in entries:
        if kind is CODE:
            named = [(m.start(), m.end()) for pattern, _ in GLOBAL for m in re.finditer(pattern, phrase)]
            missing = [
                n.text
                for n in stated_numbers(phrase)
                if n.value not in literals and not any(a <= n.start and n.end <= b for a, b in named)
            ]
            assert not missing, f"{page_id(page)}: {phrase!r} says {missing}, which the code never sets"


def test_every_allowed_page_exists():
    missing = sorted(page for page in ALLOWED if not (ROOT / page).exists())
    assert not missing, missing


def test_the_number_finder_sees_numbers_and_skips_what_is_not_prose(tmp_path):
    from tests.page_numbers import clean

    text = clean(
        "The model got 93% right after 150 steps ({glue:text}`acc:.1%` measured), "
        "see `range(0, 64)` and [chapter 1](../01/"
        "x.md); $h_3 = W^{2} x_1 + 5$.\n\n"
        "```python\nx = 12\n```\n:::{note}\n:class: tip\nIn 20 000 pairs, 1,024 keys and 0.75.\n:::\n"
    )
    assert [n.text for n in stated_numbers(text)] == ["93", "150", "1", "5", "20 000", "1,024", "0.75"]
    assert [n.value for n in stated_numbers(text)][4:6] == [20000.0, 1024.0]
