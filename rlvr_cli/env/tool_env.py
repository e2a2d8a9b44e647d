"""The resources server for the length of a run or an evaluation: the reward source of
tool-use rollouts (rlvr_cli/rollout/tool_use.py)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from rlvr_cli.env.agent import Endpoint, EnvClient
from rlvr_cli.env.process import environment_process
from rlvr_cli.env.results import output_cap


class ToolEnv:
    """The resources server for the length of a run: started here (`module:Class`) or reached
    at its URL, its declaration checked against the contract before the first episode."""

    def __init__(self, contract: Any, folder: Path, log_dir: Path | None = None) -> None:
        self.contract, self.folder, self.log_dir = contract, folder, log_dir
        self.endpoint: Endpoint | None = None
        self._stack = contextlib.ExitStack()
        self.client: EnvClient | None = None
        self.schemas: list[dict[str, Any]] = []
        self.output_cap = output_cap(contract.length.max_response_tokens, contract.environment.max_tool_output_bytes)
        self.calls_without_room = contract.environment.calls_without_room or "skip"
        self.permitted: set[str] | None = None  # None: every tool the server offers (a canary narrows it)

    def __enter__(self) -> ToolEnv:
        env = self.contract.environment
        try:
            cap = self.output_cap
            endpoint = self._stack.enter_context(
                environment_process(env.server, self.folder, max_output_bytes=cap, log_dir=self.log_dir)
            )
            self.endpoint = endpoint
            self.client = EnvClient(endpoint, timeout_s=env.timeout_s, max_output_bytes=cap)
            self._stack.callback(self.client.close)
            self.client.check_declaration(env.tools, env.forbidden_tools)
            self.schemas = self.client.tools()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._stack.close()

    def describe(self) -> str:
        """How the server stands, for a message about losing it ("" for a server at a URL)."""
        child = self.endpoint.child if self.endpoint is not None else None
        return child.describe() if child is not None else ""
