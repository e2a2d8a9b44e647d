"""`final/` of a sharded policy, written weight by weight (train/final_shards.py): the folder loads
with from_pretrained as the model it was written from, in one file or in several with an index.
The torchrun tests (test_distributed.py) write it from FSDP2 shards."""

from __future__ import annotations

import json
import weakref
from pathlib import Path
from typing import ClassVar

import pytest
import torch
from transformers import AutoModelForCausalLM

from rlvr_cli.toy.tiny import build_tiny
from rlvr_cli.train import final_shards
from rlvr_cli.train.final_shards import plan_files, save_final_sharded


def test_files_are_cut_in_order_at_the_limit_and_a_large_weight_gets_its_own() -> None:
    sizes = {"a": 4, "b": 4, "c": 10, "d": 1, "e": 1}
    assert plan_files(sizes, 8) == [["a", "b"], ["c"], ["d", "e"]]
    assert plan_files(sizes, 100) == [["a", "b", "c", "d", "e"]]


@pytest.mark.parametrize("limit", [1 << 40, 100_000])
def test_the_folder_loads_as_the_model_it_was_written_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: int
) -> None:
    source = AutoModelForCausalLM.from_pretrained(build_tiny(tmp_path / "tiny"))
    with torch.no_grad():
        for p in source.parameters():
            p.add_(torch.randn_like(p) * 0.01)  # not the weights on disk
    monkeypatch.setattr(final_shards, "FILE_BYTES", limit)
    final = tmp_path / "final"
    save_final_sharded(source, final, main=True)
    files = sorted(p.name for p in final.glob("*.safetensors"))
    if limit > 1 << 30:
        assert files == ["model.safetensors"] and not (final / final_shards.INDEX).exists()
    else:
        assert len(files) > 2 and files[0] == f"model-00001-of-{len(files):05d}.safetensors"
        index = json.loads((final / final_shards.INDEX).read_text())
        assert set(index["weight_map"].values()) == set(files)
        assert index["metadata"]["total_size"] == sum(
            p.numel() * p.element_size() for n, p in source.state_dict().items() if n in index["weight_map"]
        )
    loaded = AutoModelForCausalLM.from_pretrained(final)
    for (name, a), (_, b) in zip(source.state_dict().items(), loaded.state_dict().items(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
    assert loaded.config.architectures == source.config.architectures


class _Shard:
    """Stands in for a DTensor shard: gathering it is a collective every process must join."""

    gathered = 0
    alive: ClassVar[list[weakref.ref[torch.Tensor]]] = []  # the whole tensors handed out so far

    def __init__(self, whole: torch.Tensor) -> None:
        self.whole = whole
        self.dtype = whole.dtype
        self.shape = whole.shape

    def numel(self) -> int:
        return self.whole.numel()

    def element_size(self) -> int:
        return self.whole.element_size()

    def detach(self) -> _Shard:
        return self

    def full_tensor(self) -> torch.Tensor:
        _Shard.gathered += 1
        held = [ref for ref in _Shard.alive if ref() is not None]
        assert not held, f"{len(held)} gathered weights still held when the next one is gathered"
        gathered = self.whole.clone()  # what a gather gives: a new tensor
        _Shard.alive.append(weakref.ref(gathered))
        return gathered


def _sharded(source: torch.nn.Module, monkeypatch: pytest.MonkeyPatch) -> dict[str, _Shard]:
    _Shard.gathered = 0
    _Shard.alive = []
    state = {name: _Shard(t) for name, t in source.state_dict().items()}
    monkeypatch.setattr(source, "state_dict", lambda: state)
    return state


@pytest.mark.parametrize("limit", [1 << 40, 100_000])
def test_the_main_process_holds_one_gathered_weight_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: int
) -> None:
    """Each weight is written as soon as it is gathered, not kept until its file is complete (a
    file of up to 2 GiB on the main process, above a sharded CPU run's step peak)."""
    source = AutoModelForCausalLM.from_pretrained(build_tiny(tmp_path / "tiny"))
    expected = {name: t.clone() for name, t in source.state_dict().items()}
    state = _sharded(source, monkeypatch)
    monkeypatch.setattr(final_shards, "FILE_BYTES", limit)
    save_final_sharded(source, tmp_path / "final", main=True)
    assert _Shard.gathered == len(state) - len(final_shards.tied_names(source)) > 3
    monkeypatch.undo()
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "final")
    for name, tensor in loaded.state_dict().items():
        torch.testing.assert_close(tensor, expected[name], rtol=0, atol=0, msg=name)


def test_a_write_error_on_the_main_process_is_raised_after_every_gather(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Otherwise the other processes would wait forever in the next gather. The second file is
    written to /dev/full, which fails as a full disk does."""
    source = AutoModelForCausalLM.from_pretrained(build_tiny(tmp_path / "tiny"))
    state = _sharded(source, monkeypatch)
    monkeypatch.setattr(final_shards, "FILE_BYTES", 100_000)
    pieces = final_shards.model_pieces(source)
    count = len(plan_files({name: piece.size for name, piece in pieces.items()}))
    final = tmp_path / "final"
    final.mkdir()
    (final / f"model-00002-of-{count:05d}.safetensors").symlink_to("/dev/full")
    with pytest.raises(OSError, match="No space left"):
        save_final_sharded(source, final, main=True)
    kept = len(state) - len(final_shards.tied_names(source))
    assert _Shard.gathered == kept > 3 and count > 2


def test_every_dtype_reads_back_through_safetensors_and_one_it_cannot_name_fails_after_every_gather(
    tmp_path: Path,
) -> None:
    from safetensors.torch import load_file

    tensors = {
        f"w{i}": (torch.randn(3, 5) * 4).to(dtype)
        for i, dtype in enumerate(
            [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.float8_e4m3fn, torch.float8_e5m2]
        )
    }
    tensors |= {"count": torch.tensor(7), "flags": torch.tensor([True, False]), "empty": torch.zeros(0, 4)}
    gathered: list[str] = []

    def piece(name: str, t: torch.Tensor) -> final_shards.Piece:
        return final_shards.Piece(t.dtype, tuple(t.shape), lambda: gathered.append(name) or t)

    class Model:  # what save_final_sharded reads of a model besides its pieces
        config = AutoModelForCausalLM.from_pretrained(build_tiny(tmp_path / "tiny")).config
        generation_config = None

    save_final_sharded(Model(), tmp_path / "final", True, {n: piece(n, t) for n, t in tensors.items()})
    loaded = load_file(tmp_path / "final" / "model.safetensors")
    assert list(loaded) == list(tensors) == gathered  # in the order gathered
    for name, tensor in tensors.items():
        assert loaded[name].dtype == tensor.dtype and torch.equal(
            loaded[name].reshape(-1).view(torch.uint8), tensor.reshape(-1).view(torch.uint8)
        )
    gathered.clear()
    pieces = {"w0": piece("w0", tensors["w0"]), "z": piece("z", torch.zeros(2, dtype=torch.complex64))}
    with pytest.raises(ValueError, match="complex64 has no safetensors name"):
        save_final_sharded(Model(), tmp_path / "other", True, pieces)
    assert gathered == ["w0", "z"]
