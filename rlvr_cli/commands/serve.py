"""`rlvr serve CONTRACT --interface nemo-gym`: the contract's resources server with NeMo Gym's
interface (env/nemo_gym_app.py), until interrupted; `--rows DIR` first writes the train and
holdout tasks as NeMo Gym rows (sealed_eval is never written)."""

from __future__ import annotations

import sys
from pathlib import Path

from rlvr_cli.commands.common import load_valid_contract
from rlvr_cli.errors import UsageProblem

INTERFACES = ("nemo-gym",)


def run_serve(contract_path: Path, interface: str, host: str, port: int, rows_dir: Path | None) -> int:
    from rlvr_cli.env.agent import load_app
    from rlvr_cli.env.nemo_gym_app import nemo_gym_app
    from rlvr_cli.env.results import output_cap
    from rlvr_cli.env.scoring import weighted_reward

    if interface not in INTERFACES:
        raise UsageProblem(f"--interface {interface!r}: one of {', '.join(INTERFACES)}")
    contract = load_valid_contract(contract_path)
    env = contract.environment
    if env.kind != "tool_use" or env.server is None:
        raise UsageProblem("rlvr serve serves a tool_use contract's resources server (environment.server)")
    served = f"{env.server}: only a ResourcesServer class or instance is served (this one is served already)"
    if env.server.startswith(("http://", "https://", "nemo-gym+", "openenv+")):
        raise UsageProblem(served)
    folder = contract_path.resolve().parent
    cap = output_cap(contract.length.max_response_tokens, env.max_tool_output_bytes)
    server = getattr(load_app(env.server, folder, max_output_bytes=cap).state, "server", None)
    if server is None:
        raise UsageProblem(served)
    if rows_dir is not None:
        _write_rows(contract, folder, rows_dir, server.schemas())
    import uvicorn

    print(f"serving {env.server} with the NeMo Gym interface on http://{host}:{port}", file=sys.stderr)
    app = nemo_gym_app(server, lambda verdict: weighted_reward(contract, verdict))
    uvicorn.run(app, host=host, port=port, log_level="warning")
    return 0


def _write_rows(contract: object, folder: Path, out: Path, schemas: list) -> None:
    from rlvr_cli.contract.tasks import read_split
    from rlvr_cli.env.nemo_gym_app import rows
    from rlvr_cli.files import atomic_write_text

    out.mkdir(parents=True, exist_ok=True)
    for split in ("train", "holdout"):
        path = folder / getattr(contract.data.splits, split).path  # type: ignore[attr-defined]
        atomic_write_text(out / f"{split}.jsonl", rows(read_split(path, split), schemas))
        print(f"{split}: NeMo Gym rows → {out / f'{split}.jsonl'}", file=sys.stderr)
