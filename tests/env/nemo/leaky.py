"""A NeMo Gym resources server written with the nemo-gym package, as its example stateful
counter but with one counter for every session: the shared state `rlvr audit isolation` must
find through the bridge (served by `serve.py` in NeMo Gym's own Python)."""

from __future__ import annotations

from fastapi import FastAPI, Request
from nemo_gym.base_resources_server import (
    BaseResourcesServerConfig,
    BaseSeedSessionRequest,
    BaseSeedSessionResponse,
    BaseVerifyRequest,
    BaseVerifyResponse,
    SimpleResourcesServer,
)
from pydantic import BaseModel


class SharedCounterConfig(BaseResourcesServerConfig):
    pass


class Increment(BaseModel):
    count: int


class Seed(BaseSeedSessionRequest):
    initial_count: int


class Verify(BaseVerifyRequest):
    expected_count: int


class SharedCounterResourcesServer(SimpleResourcesServer):
    config: SharedCounterConfig
    counter: int = 0

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/increment_counter")(self.increment_counter)
        app.post("/get_counter_value")(self.get_counter_value)
        return app

    async def seed_session(self, request: Request, body: Seed) -> BaseSeedSessionResponse:
        self.counter = body.initial_count
        return BaseSeedSessionResponse()

    async def increment_counter(self, request: Request, body: Increment) -> dict:
        self.counter += body.count
        return {"success": True}

    async def get_counter_value(self, request: Request) -> dict:
        return {"count": self.counter}

    async def verify(self, request: Request, body: Verify) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=float(self.counter == body.expected_count))
