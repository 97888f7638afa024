"""Chapter 7's exercise specs: the reference passes every check the notebook makes, every
classic bug is named by at least one of them, and failures read well."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attention_learner.cases import get_case
from attention_learner.spec import to_numpy
from grader.checks import check
from grader.exercises.ch07 import EXERCISES
from grader.reference import CachedSelfAttention, KVCache, online_softmax_attention
from tests.spec_helpers import assert_bugs_caught, notebook_checks

pytestmark = pytest.mark.ch07

ASSIGNMENT = "07_attention_at_scale"
REFERENCE = {
    "online_softmax_attention": online_softmax_attention,
    "online_softmax_attention__memory": online_softmax_attention,
    "KVCache": KVCache,
    "CachedSelfAttention": CachedSelfAttention,
    "CachedSelfAttention__torch": CachedSelfAttention,
}


def test_the_reference_passes_every_check_of_the_notebook():
    calls = notebook_checks(ASSIGNMENT)
    assert {name for name, _, _ in calls} == set(REFERENCE)
    for name, seed, params in calls:
        check(name, REFERENCE[name], seed=seed, **params)


def test_every_classic_bug_is_named_by_a_check_of_the_notebook():
    assert_bugs_caught(ASSIGNMENT, EXERCISES)


def test_a_stub_is_reported_as_not_implemented():
    def online_softmax_attention(Q, K, V, block_size, mask=None):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="not implemented yet"):
        check("online_softmax_attention", online_softmax_attention, seed=1)


def test_returning_a_tuple_is_explained():
    def online_softmax_attention_with_weights(Q, K, V, block_size, mask=None):
        return online_softmax_attention(Q, K, V, block_size, mask), None

    with pytest.raises(AssertionError, match="output array alone"):
        check("online_softmax_attention", online_softmax_attention_with_weights, seed=1)


def test_a_cache_that_concatenates_features_is_told_so():
    class FeatureCache(KVCache):
        def append(self, k_new, v_new):
            if self.k is None:
                self.k, self.v = k_new, v_new
            else:
                self.k, self.v = torch.cat([self.k, k_new], -1), torch.cat([self.v, v_new], -1)
            return self.k, self.v

    with pytest.raises(AssertionError, match="other than the sequence axis"):
        check("KVCache", FeatureCache, seed=1)
    with pytest.raises(AssertionError, match="along the feature axis"):
        check("KVCache", FeatureCache, seed=2, chunks=(2, 2, 2))


def test_a_layer_without_cache_is_told_that_the_later_chunks_are_wrong():
    class NoCache(CachedSelfAttention):
        def forward(self, x_new):
            self.reset()
            return super().forward(x_new)

    with pytest.raises(AssertionError) as failure:
        check("CachedSelfAttention", NoCache, seed=1)
    message = str(failure.value)
    # the bug's model explains the output, so its note names it (and no "where it is wrong"
    # fallback is needed): the first chunk is right, the later ones attend to themselves only
    assert "out_step0" not in message and "out_step1 differs" in message
    named = "each chunk attends only to itself: the cached keys and values of earlier chunks were not used"
    assert named in message


def test_nan_outputs_get_the_overflow_hint():
    def overflowing(Q, K, V, block_size, mask=None):
        s = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
        p = np.exp(s)  # no max subtracted: inf / inf = NaN for scores above ~709
        return (p @ V) / p.sum(-1, keepdims=True)

    with pytest.raises(AssertionError, match="exp overflows"):
        check("online_softmax_attention", overflowing, seed=10, n_k=9, block_size=2, logit_scale=1000.0)


def test_every_raw_output_is_an_array_of_at_least_one_axis():
    """The grader's reports carry no 0-d arrays: every output a case sends has an axis."""
    for name, seed, params in notebook_checks(ASSIGNMENT):
        case = get_case(name)
        inputs = case.make_inputs(np.random.default_rng(seed), **params)
        outputs = case.call(REFERENCE[name], inputs)
        for key, value in outputs.items():
            assert to_numpy(value).ndim >= 1, f"{name} (seed {seed}) sends {key} as a 0-d array"


def test_descriptions_follow_the_params_that_run():
    """Sizes in a description come from the params of the case that runs, not from defaults
    written again by hand."""
    online = get_case("online_softmax_attention").case_description({"n_k": 9, "block_size": 4})
    assert "n_k=9" in online and "block_size=4 (3 block(s), the last of 1)" in online
    cache = get_case("KVCache").case_description({"batch": 1, "d_v": 6, "chunks": [2, 2]})
    assert cache == "batch 1, num_heads=3, d_k=4, d_v=6, appending chunks of [2, 2] positions"
    cached = get_case("CachedSelfAttention").case_description({"num_heads": 2, "chunks": (4, 1)})
    assert "num_heads=2, d_head=4 (d_model=8), a sequence of 5 tokens fed in chunks of [4, 1]" in cached
