"""Packed episodes never see each other: logits inside a pack equal logits alone."""

from __future__ import annotations

import pytest

from rlvr_cli.chat.pack import pack


@pytest.fixture(scope="module")
def model(tiny_chatml):
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(tiny_chatml)
    return m.eval()


EPISODES = [
    ([4, 40, 41, 42, 43, 5], [0, 0, 1, 1, 1, 1]),
    ([4, 50, 51, 5], [0, 1, 1, 1]),
    ([4, 60, 61, 62, 63, 64, 65, 5], [0, 0, 0, 1, 1, 1, 1, 1]),
]


def logits_in_pack(model, episodes, max_tokens=20):
    import torch

    packs = pack(episodes, max_tokens, pad_id=1)
    assert len(packs) == 1
    p = packs[0]
    with torch.no_grad():
        out = model(
            input_ids=torch.tensor([p.input_ids]),
            position_ids=torch.tensor([p.position_ids]),
            attention_mask=p.attention_mask(),
        ).logits[0]
    return p, [out[s:e] for s, e in p.bounds]


def test_each_episode_in_a_pack_matches_it_alone(model) -> None:
    import torch

    p, packed = logits_in_pack(model, EPISODES)
    for (ids, _), logits in zip(EPISODES, packed, strict=True):
        with torch.no_grad():
            alone = model(input_ids=torch.tensor([ids])).logits[0]
        torch.testing.assert_close(logits, alone, atol=1e-5, rtol=1e-4)
    assert p.position_ids[:6] == list(range(6)) and p.position_ids[6:10] == list(range(4))


def test_changing_one_episode_leaves_the_others_unchanged(model) -> None:
    import torch

    _, before = logits_in_pack(model, EPISODES)
    changed = [EPISODES[0], ([4, 70, 71, 5], [0, 1, 1, 1]), EPISODES[2]]
    _, after = logits_in_pack(model, changed)
    torch.testing.assert_close(after[0], before[0], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(after[2], before[2], atol=1e-5, rtol=1e-4)
    assert not torch.allclose(after[1], before[1])


def test_without_the_block_mask_episodes_would_leak(model) -> None:
    """The isolation test can fail: a plain causal mask over the same row changes the logits."""
    import torch

    p, packed = logits_in_pack(model, EPISODES)
    with torch.no_grad():
        leaky = model(input_ids=torch.tensor([p.input_ids]), position_ids=torch.tensor([p.position_ids])).logits[0]
    s, e = p.bounds[1]
    assert not torch.allclose(leaky[s:e], packed[1], atol=1e-4)


def test_first_token_of_each_episode_is_out_of_the_loss() -> None:
    p = pack([([1, 2, 3], [1, 1, 1]), ([4, 5], [1, 1])], 8, pad_id=0)[0]
    assert p.loss_mask == [0, 1, 1, 0, 1, 0, 0, 0]
    assert p.episode == [0, 0, 0, 1, 1, -1, -1, -1]
    assert len(pack([([1] * 5, [1] * 5)] * 3, 10)) == 2
    with pytest.raises(ValueError, match="more than a pack holds"):
        pack([([1] * 11, [1] * 11)], 10)
