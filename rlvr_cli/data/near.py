"""Near-duplicate prompts across splits: MinHash signatures over character shingles, an LSH
index of the evaluation splits banded as datasketch's `MinHashLSH` bands, and each other
prompt queried against it.

Signatures are computed for a batch of prompts at once with datasketch's own `affine32`
permutations (the MurmurHash3 finalizer, then `a·h + b` mod 2³²), so they are exactly what
`datasketch.MinHash(scheme="affine32", hashfunc=shingle_hash)` would give for the same
shingles — only without a Python call per shingle.

The estimate never decides alone. A candidate pair from the index whose estimated Jaccard
similarity (the share of equal signature values) comes within ESTIMATE_SLACK of the threshold
is then confirmed (`confirm`): it is a near duplicate only when the two prompts hold the same
numbers in the same roles (`same_numbers`) — distinct problems from one template differ in
them, a reworded copy does not — and the exact Jaccard similarity of their shingle sets reaches
the threshold.

Semantic clusters (`dedup.semantic_clusters: true`) are found the same way over skeletons — each
prompt with its numbers masked (`skeleton`) — and confirmed by the exact similarity alone: the
distinct problems of one template form one cluster, which the contract says lies in one split.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from rlvr_cli.data.normal import NUMBERS, numbers

_SEED = 1
_POLY = np.uint64(0x100000001B3)  # FNV-64 prime: the shingle's characters as a polynomial
_FMIX32 = (16, np.uint32(0x85EBCA6B), 13, np.uint32(0xC2B2AE35), 16)


def shingle_hash(shingle: str) -> int:
    """The 32-bit hash of one shingle, as `signatures` computes it (for datasketch's `hashfunc`)."""
    h = 0
    for i, ch in enumerate(shingle):
        h = (h + ord(ch) * pow(int(_POLY), i, 1 << 64)) % (1 << 64)
    return (h ^ (h >> 32)) & 0xFFFFFFFF


def _fmix32(h: np.ndarray) -> np.ndarray:
    s1, m1, s2, m2, s3 = _FMIX32
    h = h ^ (h >> np.uint32(s1))
    h = h * m1
    h = h ^ (h >> np.uint32(s2))
    h = h * m2
    return h ^ (h >> np.uint32(s3))


def _window_hashes(texts: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
    """The hash of every k-character window of every text (a text shorter than k is one
    window), and the index of the text each window belongs to."""
    codes = np.frombuffer("".join(texts).encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
    lengths = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
    owner = np.repeat(np.arange(len(texts)), lengths)
    n = len(codes)
    span = min(k, n)
    acc = np.zeros(max(n - span + 1, 0), dtype=np.uint64)
    power = np.uint64(1)
    with np.errstate(over="ignore"):
        for j in range(span):
            acc += codes[j : n - span + 1 + j] * power
            power = power * _POLY
    valid = owner[: len(acc)] == owner[span - 1 :] if len(acc) else np.zeros(0, dtype=bool)
    hashes, who = acc[valid], owner[: len(acc)][valid]
    short = [i for i, t in enumerate(texts) if 0 < len(t) < k or (len(t) == 0)]
    if short:
        extra = np.array([shingle_hash(texts[i]) for i in short], dtype=np.uint64)
        hashes = np.concatenate([hashes ^ (hashes >> np.uint64(32)), extra])
        who = np.concatenate([who, np.array(short, dtype=np.int64)])
        order = np.argsort(who, kind="stable")
        return hashes[order].astype(np.uint32), who[order]
    return (hashes ^ (hashes >> np.uint64(32))).astype(np.uint32), who


@dataclass
class Signer:
    """MinHash signatures, `permutations` uint32 values per text."""

    permutations: int
    shingle: int
    a: np.ndarray = field(init=False, repr=False)
    b: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        from datasketch import MinHash

        a, b = MinHash(num_perm=self.permutations, seed=_SEED, scheme="affine32").permutations
        self.a, self.b = a.astype(np.uint32)[:, None], b.astype(np.uint32)[:, None]

    def signatures(self, texts: Sequence[str]) -> np.ndarray:
        """`(len(texts), permutations)` uint32; texts are signed in batches of a few hundred."""
        out = np.empty((len(texts), self.permutations), dtype=np.uint32)
        for start in range(0, len(texts), 512):
            out[start : start + 512] = self._batch(texts[start : start + 512])
        return out

    def _batch(self, texts: Sequence[str]) -> np.ndarray:
        hashes, who = _window_hashes(texts, self.shingle)
        starts = np.searchsorted(who, np.arange(len(texts)))
        with np.errstate(over="ignore"):
            mixed = _fmix32(hashes)
            values = self.a * mixed[None, :]
            values += self.b
        return np.minimum.reduceat(values, starts, axis=1).T


RECALL = 0.99  # the least chance that a pair exactly at the threshold becomes a candidate
ESTIMATE_SLACK = 0.15  # candidates estimated this far below the threshold are still confirmed exactly


def shingles(text: str, k: int) -> set[str]:
    """Every k-character window of `text` (a shorter text is one shingle), as `signatures` hashes them."""
    return {text[i : i + k] for i in range(len(text) - k + 1)} if len(text) >= k else {text}


def jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


_ROLE = re.compile(r"(\d+(?:[.,]\d+)*)\s*([^\W\d]\w*|[^\w\s])?")


def same_numbers(a: str, b: str) -> bool:
    """Two prompts state one problem's numbers: the same numbers, in the same order or each
    before the same word (`12 apples and 5 pears` is `5 pears and 12 apples`, not `5 apples
    and 12 pears`: template siblings often swap numbers, rewordings seldom change their roles)."""
    if numbers(a) != numbers(b):
        return False
    if NUMBERS.findall(a) == NUMBERS.findall(b):
        return True
    return Counter(m.groups() for m in _ROLE.finditer(a)) == Counter(m.groups() for m in _ROLE.finditer(b))


def confirm(a: str, b: str, threshold: float, k: int) -> float | None:
    """The exact Jaccard similarity of two prompts when they are near duplicates (the same
    numbers in the same roles, and a similarity reaching the threshold); None when they are not."""
    if not same_numbers(a, b):
        return None
    similarity = jaccard(shingles(a, k), shingles(b, k))
    return similarity if similarity >= threshold else None


def numbers_salt(text: str) -> bytes:
    """The block a prompt's near duplicates lie in: the digest of the numbers it states."""
    return hashlib.blake2b(repr(sorted(numbers(text).elements())).encode(), digest_size=8).digest()


def skeleton(text: str) -> str:
    """A prompt with its numbers masked: what the distinct problems of one template share."""
    return NUMBERS.sub("#", text)


def same_template(a: str, b: str, threshold: float, k: int) -> float | None:
    """The exact Jaccard similarity of two skeletons when it reaches the threshold: two prompts
    of one semantic cluster (a template's siblings, or copies); None when they are not."""
    similarity = jaccard(shingles(a, k), shingles(b, k))
    return similarity if similarity >= threshold else None


def lsh_params(threshold: float, permutations: int) -> tuple[int, int]:
    """(bands, rows per band) for the LSH index: the fewest candidates below the threshold
    among the choices that find a pair at the threshold with probability ≥ RECALL (a leak
    check must not miss; every candidate is then checked on its full signature).
    datasketch's own choice balances misses and false candidates equally, and finds a
    pair at the threshold only ~40% of the time."""
    best: tuple[float, int, int] | None = None
    for rows in range(1, permutations + 1):
        for bands in range(1, permutations // rows + 1):
            if 1 - (1 - threshold**rows) ** bands < RECALL:
                continue
            below = sum(1 - (1 - (j / 100) ** rows) ** bands for j in range(int(threshold * 100)))
            if best is None or below < best[0]:
                best = (below, bands, rows)
            break  # more bands only add candidates
    assert best is not None  # rows = 1, bands = permutations always qualifies for threshold > 0.04
    return best[1], best[2]


class Index:
    """An LSH index of signatures: `bands` bands of `rows` values each, as datasketch's
    `MinHashLSH(params=(bands, rows))` bands them (a tests checks both give the same
    candidates); two signatures are candidates when one band is equal. Built here over whole
    batches — one dictionary lookup per band per row — because `MinHashLSH.query` costs
    ~45 µs a call in Python, a minute per million rows. Candidates are then checked on their
    full signatures."""

    def __init__(self, threshold: float, permutations: int) -> None:
        self.threshold = threshold
        self.bands, self.band_rows = lsh_params(threshold, permutations)
        self.tables: list[dict[bytes, list[int]]] = [{} for _ in range(self.bands)]
        self.keys: list[object] = []
        self.rows = np.empty((1024, permutations), dtype=np.uint32)  # grown by doubling

    def _band_keys(self, signatures: np.ndarray, salts: list[bytes] | None = None) -> list[list[bytes]]:
        """Each band's key per signature; with `salts`, each prefixed by its row's salt, so that
        only rows of one salt can be candidates (blocking: a near duplicate states the same
        numbers, so templated data stops making every sibling a candidate of every other)."""
        r = self.band_rows
        out = []
        for band in range(self.bands):
            part = np.ascontiguousarray(signatures[:, band * r : (band + 1) * r])
            keys = part.view(f"V{4 * r}").ravel().tolist()
            out.append(keys if salts is None else [salt + key for salt, key in zip(salts, keys, strict=True)])
        return out

    def add(self, keys: list[object], signatures: np.ndarray, salts: list[bytes] | None = None) -> None:
        first = len(self.keys)
        while first + len(keys) > len(self.rows):
            self.rows = np.concatenate([self.rows, np.empty_like(self.rows)])
        self.rows[first : first + len(keys)] = signatures
        self.keys.extend(keys)
        for table, band_keys in zip(self.tables, self._band_keys(signatures, salts), strict=True):
            for offset, key in enumerate(band_keys):
                table.setdefault(key, []).append(first + offset)

    def candidates(self, signatures: np.ndarray, salts: list[bytes] | None = None) -> list[set[int]]:
        """For each signature, the slots sharing at least one band (and its salt) with it."""
        found: list[set[int]] = [set() for _ in range(len(signatures))]
        for table, band_keys in zip(self.tables, self._band_keys(signatures, salts), strict=True):
            if not table:
                continue
            for i, key in enumerate(band_keys):
                slots = table.get(key)
                if slots:
                    found[i].update(slots)
        return found

    def matches(
        self, signatures: np.ndarray, floor: float | None = None, salts: list[bytes] | None = None
    ) -> list[list[tuple[object, float]]]:
        """For each signature, the indexed keys whose estimated Jaccard similarity with it
        reaches `floor` (default: the threshold)."""
        floor = self.threshold if floor is None else floor
        out: list[list[tuple[object, float]]] = []
        for signature, slots in zip(signatures, self.candidates(signatures, salts), strict=True):
            if not slots:
                out.append([])
                continue
            index = np.fromiter(slots, dtype=np.int64, count=len(slots))
            similarity = (self.rows[index] == signature).mean(axis=1)
            keep = np.nonzero(similarity >= floor)[0]
            out.append([(self.keys[index[i]], float(similarity[i])) for i in keep])
        return out
