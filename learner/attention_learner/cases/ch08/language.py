"""The toy language pair of chapters 6 and 8 (English -> French), its vocabularies and pairs:
the one definition the book, the reference and the chapter 8 notebook use.

A sentence is 1 to 3 clauses "noun phrase, verb, noun phrase" joined by "and"; a noun phrase
is an article, at most one adjective and a noun. In French the article takes the noun's
gender, adjectives follow the noun and agree with it, verbs and "and" go word for word.
Token ids: <pad> = 0, <bos> = 1, <eos> = 2, then the words sorted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

PAD, BOS, EOS = 0, 1, 2
SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>")

# English noun -> (French noun, gender). No noun starts with a vowel, so that the article
# never elides (l'arbre) and "the" is always "le" or "la".
NOUNS = {
    "cat": ("chat", "m"),
    "dog": ("chien", "m"),
    "boy": ("garçon", "m"),
    "book": ("livre", "m"),
    "boat": ("bateau", "m"),
    "horse": ("cheval", "m"),
    "street": ("rue", "f"),
    "car": ("voiture", "f"),
    "house": ("maison", "f"),
    "girl": ("fille", "f"),
    "table": ("table", "f"),
    "flower": ("fleur", "f"),
}
# English adjective -> (masculine, feminine). All of them follow the noun in French.
ADJECTIVES = {
    "red": ("rouge", "rouge"),
    "black": ("noir", "noire"),
    "green": ("vert", "verte"),
    "white": ("blanc", "blanche"),
    "heavy": ("lourd", "lourde"),
    "tired": ("fatigué", "fatiguée"),
}
ARTICLES = {"the": ("le", "la"), "a": ("un", "une")}
VERBS = {"sees": "voit", "likes": "aime", "follows": "suit", "finds": "trouve", "pushes": "pousse"}
CONJUNCTION = {"and": "et"}


def translate(sentence: list[str]) -> list[str]:
    """The toy grammar's translation of an English token list.

    Articles take the gender of their noun (the street -> la rue, the cat -> le chat), and
    adjectives move after the noun and agree with it (the red car -> la voiture rouge, the
    black cat -> le chat noir); verbs and "and" translate word for word.
    """
    return translate_with_alignment(sentence)[0]


def translate_with_alignment(sentence: list[str]) -> tuple[list[str], list[int]]:
    """The translation and, for each French word, the position of the English word it
    translates (the alignment a translator's cross-attention can learn)."""
    out: list[str] = []
    source: list[int] = []
    i = 0
    while i < len(sentence):
        word = sentence[i]
        if word in ARTICLES:
            j = i + 1
            while sentence[j] in ADJECTIVES:
                j += 1
            noun, gender = NOUNS[sentence[j]]
            g = 0 if gender == "m" else 1
            out += [ARTICLES[word][g], noun]
            source += [i, j]
            for k in range(i + 1, j):  # the adjectives, after the noun
                out.append(ADJECTIVES[sentence[k]][g])
                source.append(k)
            i = j + 1
        elif word in VERBS or word in CONJUNCTION:
            out.append(VERBS.get(word) or CONJUNCTION[word])
            source.append(i)
            i += 1
        else:
            raise ValueError(f"{word!r} is not in the toy grammar")
    return out, source


def random_sentence(rng: np.random.Generator, n_clauses: int, p_adjective: float = 0.5) -> list[str]:
    """An English sentence of ``n_clauses`` clauses "NP verb NP" joined by "and".

    A noun phrase is an article, at most one adjective (with probability ``p_adjective``),
    and a noun.
    """
    nouns, adjectives = list(NOUNS), list(ADJECTIVES)

    def noun_phrase() -> list[str]:
        words = [str(rng.choice(list(ARTICLES)))]
        if rng.random() < p_adjective:
            words.append(adjectives[rng.integers(len(adjectives))])
        return words + [nouns[rng.integers(len(nouns))]]

    words: list[str] = []
    for c in range(n_clauses):
        if c:
            words.append("and")
        words += noun_phrase() + [list(VERBS)[rng.integers(len(VERBS))]] + noun_phrase()
    return words


class Vocab:
    """Token <-> id, with <pad> = 0, <bos> = 1, <eos> = 2 first."""

    def __init__(self, words: Sequence[str]) -> None:
        self.tokens = list(SPECIAL_TOKENS) + sorted(set(words) - set(SPECIAL_TOKENS))
        self.index = {t: i for i, t in enumerate(self.tokens)}

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(self, words: Sequence[str]) -> list[int]:
        return [self.index[w] for w in words]

    def decode(self, ids: Any) -> list[str]:
        """Ids -> words, stopping at the first <eos> and skipping <bos> and <pad>."""
        words = []
        for i in [int(i) for i in ids]:
            if i == EOS:
                break
            if i not in (PAD, BOS):
                words.append(self.tokens[i])
        return words


def source_vocab() -> Vocab:
    return Vocab(list(NOUNS) + list(ADJECTIVES) + list(ARTICLES) + list(VERBS) + list(CONJUNCTION))


def target_vocab() -> Vocab:
    words = [n for n, _ in NOUNS.values()] + [w for pair in ADJECTIVES.values() for w in pair]
    words += [w for pair in ARTICLES.values() for w in pair] + list(VERBS.values())
    return Vocab(words + list(CONJUNCTION.values()))


def make_pairs(
    n: int, seed: int, clauses: Sequence[int] = (1, 2, 3), exclude: set[tuple[str, ...]] | None = None
) -> list[tuple[list[str], list[str]]]:
    """``n`` distinct (English, French) pairs, the number of clauses drawn from ``clauses``;
    sentences in ``exclude`` (tuples of English words) are skipped, for a held-out set."""
    rng = np.random.default_rng(seed)
    seen = set(exclude or ())
    pairs: list[tuple[list[str], list[str]]] = []
    while len(pairs) < n:
        english = random_sentence(rng, int(rng.choice(list(clauses))))
        if tuple(english) in seen:
            continue
        seen.add(tuple(english))
        pairs.append((english, translate(english)))
    return pairs


def token_accuracy(predicted: list[str], reference: list[str]) -> float:
    """The fraction of the reference's positions (and its end) that the prediction gets right.

    Position t counts as right when predicted[t] == reference[t]; a prediction of the wrong
    length loses the positions it lacks and the end-of-sentence position.
    """
    hits = sum(p == r for p, r in zip(predicted, reference, strict=False))
    hits += len(predicted) == len(reference)
    return hits / (len(reference) + 1)
