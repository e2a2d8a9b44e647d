"""Serve one resources server of the published NeMo Gym package (run by NeMo Gym's own Python,
`.venv-nemo`), as NeMo Gym starts one: `python serve.py module:Class PORT`."""

from __future__ import annotations

import sys
from importlib import import_module

import uvicorn
from nemo_gym.config_types import BaseServerConfig
from nemo_gym.server_utils import ServerClient
from omegaconf import OmegaConf

HOST = "127.0.0.1"


def main() -> None:
    spec, port = sys.argv[1], int(sys.argv[2])
    module_name, class_name = spec.split(":", 1)
    server_class = getattr(import_module(module_name), class_name)
    config_class = server_class.model_fields["config"].annotation
    name = module_name.rsplit(".", 2)[-2] if "." in module_name else module_name
    server = server_class(
        config=config_class(name=name, host=HOST, port=port, entrypoint="app.py"),
        server_client=ServerClient(
            head_server_config=BaseServerConfig(host=HOST, port=11000),
            global_config_dict=OmegaConf.create({}),
        ),
    )
    app = server.setup_webserver()
    server.setup_liveness(app)
    server.setup_exception_middleware(app)
    uvicorn.run(app, host=HOST, port=port, log_level="warning")


if __name__ == "__main__":
    main()
