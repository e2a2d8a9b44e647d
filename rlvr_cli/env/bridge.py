"""The base of rlvr's bridges to other frameworks' servers (env/nemo_gym.py, env/openenv.py): an
rlvr `ResourcesServer` whose tools are not methods but schemas read from the other server, and
whose `invoke` sends each call there."""

from __future__ import annotations

from typing import Any

from rlvr_cli.env.server import ResourcesServer


class Bridge(ResourcesServer):
    """Tools declared by their OpenAI function schemas (`_schemas`), filtered as a server's
    own are by `offered` and `forbidden`."""

    _schemas: list[dict[str, Any]]

    def offered_tools(self) -> list[str]:
        names = [s["function"]["name"] for s in self._schemas]
        return [n for n in names if self.offered is None or n in self.offered or n in self.forbidden]

    def schemas(self) -> list[dict[str, Any]]:
        offered = set(self.offered_tools())
        return [s for s in self._schemas if s["function"]["name"] in offered]
