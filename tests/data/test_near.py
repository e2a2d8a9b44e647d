"""The near-duplicate machinery agrees with datasketch, the library it stands on: the batched
signatures are datasketch's MinHash values, the banded index returns MinHashLSH's candidates,
and the secret prefilter never hides a line the scanner would flag."""

from __future__ import annotations

import random

import numpy as np
import pytest

from rlvr_cli.data.near import Index, Signer, lsh_params, shingle_hash
from rlvr_cli.data.scan import Scanner, maybe_secret


def texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma", "delta", "épsilon", "zeta", "eta", "θeta", "iota", "kappa", "✓"]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(1, 12))) for _ in range(n)] + ["", "ab"]


def test_signatures_are_datasketch_minhash_values() -> None:
    from datasketch import MinHash

    signer = Signer(64, 4)
    for text, row in zip(texts(40, 1), signer.signatures(texts(40, 1)), strict=True):
        expected = MinHash(num_perm=64, seed=1, scheme="affine32", hashfunc=shingle_hash)
        expected.update_batch([text[i : i + 4] for i in range(len(text) - 3)] if len(text) >= 4 else [text])
        assert np.array_equal(expected.hashvalues, row), text


@pytest.mark.parametrize(("threshold", "permutations"), [(0.5, 64), (0.8, 128), (0.9, 256)])
def test_the_index_returns_minhashlsh_candidates_and_finds_pairs_at_the_threshold(
    threshold: float, permutations: int
) -> None:
    from datasketch import LeanMinHash, MinHashLSH

    signer = Signer(permutations, 5)
    base, query = signer.signatures(texts(200, 2)), signer.signatures(texts(200, 3))
    index = Index(threshold, permutations)
    index.add(list(range(len(base))), base)
    reference = MinHashLSH(num_perm=permutations, params=lsh_params(threshold, permutations))
    for i, signature in enumerate(base):
        reference.insert(i, LeanMinHash(seed=1, hashvalues=signature, scheme="affine32"))
    for signature, found in zip(query, index.candidates(query), strict=True):
        assert found == set(reference.query(LeanMinHash(seed=1, hashvalues=signature, scheme="affine32")))
    bands, rows = lsh_params(threshold, permutations)
    assert 1 - (1 - threshold**rows) ** bands >= 0.99 and bands * rows <= permutations


def test_the_secret_prefilter_passes_every_line_the_scanner_flags() -> None:
    samples = [
        "AKIAIOSFODNN7EXAMPLE",
        "ghp_" + "a1B2" * 9,
        "glpat-" + "x1Y2z3" * 4,
        "xoxb-123456789012-1234567890123-abcdefghijklmnopqrstuvwx",
        "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
        'password = "hunter2xyz"',
        "contraseña = 'abcdef123'",
        "-----BEGIN RSA PRIVATE KEY-----",
        "https://admin:s3cr3tpw@db.example.net/x",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    ]
    from detect_secrets.core.scan import scan_line

    with Scanner(None):
        for line in samples:
            if list(scan_line(line)):
                assert maybe_secret(line), line
    assert not maybe_secret("A farmer has 12 cows and buys 5 more. How many cows?")
