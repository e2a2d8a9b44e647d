"""The peak `mfu` divides by (train/calibration.py): the best a machine has shown, cached per
machine, threads, PyTorch and dtype; a noisy or disturbed reading never flatters `mfu`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rlvr_cli.train import calibration, flops
from tests.conftest import copy_experiment, rlvr

CONTRACT = "experiment.rlvr.yaml"
CPU = torch.device("cpu")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RLVR_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "peaks.json"


@pytest.fixture
def products(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Products at 100 GFLOP/s whatever their size; the sizes tried, in order."""
    sizes: list[int] = []

    def product(device, dtype, n):  # type: ignore[no-untyped-def]
        sizes.append(n)
        return 2.0 * n**3 / 1e11

    monkeypatch.setattr(flops, "_best_product", product)
    return sizes


def test_the_first_run_calibrates_wider_and_caches_what_it_measured(cache: Path, products: list[int]) -> None:
    peak, source = calibration.device_peak(CPU, torch.float32)
    assert peak == pytest.approx(1e11) and source == "measured now"
    assert products == [256, 512, 1024, 2048] * 3  # the first run on this machine: 3 sweeps up to 2048²
    key = calibration.machine_key(CPU, torch.float32)
    assert json.loads(cache.read_text()) == {key: pytest.approx(1e11)}
    products.clear()
    assert calibration.device_peak(CPU, torch.float32)[0] == pytest.approx(1e11)
    assert products == [256, 512]  # later runs: the quick product only


def test_a_low_reading_is_never_the_peak_and_a_higher_one_raises_it(cache: Path, products: list[int]) -> None:
    key = calibration.machine_key(CPU, torch.float32)
    cache.parent.mkdir(parents=True)
    cache.write_text(json.dumps({key: 4e11, "another machine": 1.0}))
    peak, source = calibration.device_peak(CPU, torch.float32)  # this run reads 1e11: disturbed
    assert peak == 4e11 and source.startswith("cached best")
    cache.write_text(json.dumps({key: 5e10, "another machine": 1.0}))
    peak, source = calibration.device_peak(CPU, torch.float32)
    assert peak == pytest.approx(1e11) and source.startswith("measured now, above the cached")
    assert json.loads(cache.read_text()) == {key: pytest.approx(1e11), "another machine": 1.0}


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"KEY": "fast"}', '{"KEY": -1}', '{"KEY": NaN}', ""])
def test_a_cache_that_is_not_a_peak_is_measured_around_and_rewritten(
    cache: Path, products: list[int], text: str
) -> None:
    key = calibration.machine_key(CPU, torch.float32)
    cache.parent.mkdir(parents=True)
    cache.write_text(text.replace("KEY", key))
    peak, source = calibration.device_peak(CPU, torch.float32)
    assert peak == pytest.approx(1e11) and source == "measured now"
    assert json.loads(cache.read_text())[key] == pytest.approx(1e11)


def test_a_cache_that_cannot_be_written_is_not_an_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, products: list[int]
) -> None:
    (tmp_path / "a file").write_text("")
    monkeypatch.setenv("RLVR_CACHE_DIR", str(tmp_path / "a file"))  # its peaks.json cannot exist
    assert calibration.device_peak(CPU, torch.float32) == (pytest.approx(1e11), "measured now")
    assert [p.name for p in tmp_path.iterdir()] == ["a file"]


def test_the_key_tells_threads_dtypes_and_torch_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    fp32, bf16 = calibration.machine_key(CPU, torch.float32), calibration.machine_key(CPU, torch.bfloat16)
    assert fp32 != bf16 and fp32.endswith("|float32") and f"torch={torch.__version__}" in fp32
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)
        assert calibration.machine_key(CPU, torch.float32) != fp32
    finally:
        torch.set_num_threads(threads)


def test_the_largest_product_is_not_always_the_fastest(monkeypatch: pytest.MonkeyPatch) -> None:
    """AMX bf16 on a 2-core CPU: ~1,100 GFLOP/s at 1024², ~700 at 2048²: the peak is the best size's."""
    rates = {256: 2e11, 512: 6e11, 1024: 11e11, 2048: 7e11}
    monkeypatch.setattr(flops, "_best_product", lambda device, dtype, n: 2.0 * n**3 / rates[n])
    assert flops.measured_peak(CPU, torch.bfloat16, top=2048) == pytest.approx(11e11)


def test_a_run_divides_by_the_cached_peak(single_turn: Path, tmp_path: Path) -> None:
    """Through `rlvr train`: the cache's best for this machine (here set far above anything
    measured) is the peak, and plan.json says so. The run's key is this process's: the same CPU,
    PyTorch and threads (conftest gives every test process and its commands one OMP_NUM_THREADS)."""
    import os

    exp = copy_experiment(single_turn, tmp_path / "exp")
    key = calibration.machine_key(CPU, torch.float32)
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "peaks.json").write_text(json.dumps({key: 1e18}))
    env = {**os.environ, "RLVR_CACHE_DIR": str(tmp_path / "cache")}
    run = rlvr("train", exp / CONTRACT, "--max-steps", "1", "--run-dir", tmp_path / "run", env=env, timeout=300)
    assert run.code == 0, run.stderr[-2000:]
    plan = json.loads((tmp_path / "run" / "plan.json").read_text())
    assert plan["peak_tflops"] == 1e6 and plan["peak_source"] == "cached best", plan  # no local path
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert row["mfu"] == pytest.approx(row["step_tflop"] * 1e12 / (row["step_seconds"] * 1e18), rel=0.05)
    assert json.loads((tmp_path / "cache" / "peaks.json").read_text()) == {key: 1e18}  # never lowered


@pytest.mark.parametrize("bf16_peak", [None, 1e18], ids=["bf16 slower than fp32", "bf16 faster"])
def test_bf16_on_a_cpu_that_multiplies_it_slower_than_fp32_is_said(
    single_turn: Path, tmp_path: Path, bf16_peak: float | None
) -> None:
    """`precision: bf16` runs as written; where this CPU's best bf16 product is slower than its
    best fp32 one (an AVX2-only CPU: ~100×), the plan says so and names `precision: fp32`. The
    cache sets the fp32 peak far above anything measured; paired: bf16's above it too, no note."""
    import os

    exp = copy_experiment(single_turn, tmp_path / "exp")
    contract = exp / CONTRACT
    contract.write_text(contract.read_text().replace("precision: fp32", "precision: bf16"))
    peaks = {calibration.machine_key(CPU, torch.float32): 1e18}
    if bf16_peak is not None:
        peaks[calibration.machine_key(CPU, torch.bfloat16)] = bf16_peak
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "peaks.json").write_text(json.dumps(peaks))
    env = {**os.environ, "RLVR_CACHE_DIR": str(tmp_path / "cache")}
    run = rlvr("train", contract, "--max-steps", "1", "--run-dir", tmp_path / "run", env=env, timeout=300)
    assert run.code == 0, run.stderr[-2000:]
    plan = json.loads((tmp_path / "run" / "plan.json").read_text())
    if bf16_peak is None:
        assert "bf16 compute: this CPU multiplies bf16 at" in plan["compute_note"]
        assert "note: bf16 compute" in run.stderr and "`precision: fp32` would train faster here" in run.stderr
    else:
        assert "compute_note" not in plan and "note: bf16" not in run.stderr
