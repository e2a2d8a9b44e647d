"""The resources server contract, the file_edit sandbox, the agent loop and model interfaces."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from rlvr_cli.env.agent import EnvClient, run_episode, serve
from rlvr_cli.env.builtin.file_edit import FileEditServer
from rlvr_cli.env.model import OpenAIModel, ScriptedModel, parse_completion, to_chat
from rlvr_cli.env.server import create_app, tool

TASK = {"id": "t", "prompt": "Set version to 2 in config/app.toml", "target": "config/app.toml"}


class WithHiddenTool(FileEditServer):
    @tool
    def shell(self, state, command: str) -> str:
        """Not offered to the policy."""
        return "ran " + command


@pytest.fixture
def server() -> FileEditServer:
    return WithHiddenTool()


@pytest.fixture
def http(server: FileEditServer) -> TestClient:
    return TestClient(create_app(server))


def seed(http: TestClient) -> str:
    return http.post("/seed_session", json={"task": TASK}).json()["session_id"]


def test_sessions_are_unguessable_and_unknown_ones_are_refused(http: TestClient) -> None:
    a, b = seed(http), seed(http)
    assert a != b and len(a) >= 32
    for path, body in [
        ("/tools/list_files", {"session_id": "nope"}),
        ("/verify", {"session_id": "nope"}),
        ("/close", {"session_id": "nope"}),
    ]:
        response = http.post(path, json=body)
        assert response.status_code == 404 and "seed a session first" in response.json()["detail"]


def test_tools_not_offered_are_refused(http: TestClient) -> None:
    sid = seed(http)
    response = http.post("/tools/shell", json={"session_id": sid, "arguments": {"command": "ls"}})
    assert response.status_code == 403
    assert "shell" not in {t["function"]["name"] for t in http.get("/tools").json()}


def test_malformed_requests_get_4xx_and_the_server_keeps_serving(http: TestClient) -> None:
    assert http.post("/seed_session", json={"tasks": {}}).status_code == 422
    assert http.post("/seed_session", content=b"{not json").status_code == 422
    assert http.post("/tools/read_file", json={"session_id": 5}).status_code == 422
    sid = seed(http)
    bad_args = http.post("/tools/read_file", json={"session_id": sid, "arguments": {"nope": 1}})
    assert bad_args.status_code == 200 and bad_args.json()["output"].startswith("error: bad arguments")
    assert http.post("/tools/list_files", json={"session_id": sid}).status_code == 200


def test_close_releases_the_session_and_its_folder(server: FileEditServer, http: TestClient) -> None:
    sid = seed(http)
    root = server.session(sid).state.root
    assert root.is_dir() and server.open_sessions == 1
    assert http.post("/close", json={"session_id": sid}).json() == {"closed": True}
    assert not root.exists() and server.open_sessions == 0
    assert http.post("/tools/list_files", json={"session_id": sid}).status_code == 404


@pytest.mark.parametrize("path", ["../outside.txt", "/etc/passwd", "config/../../x", "~/x", "", "a\x00b"])
def test_path_escapes_are_refused(http: TestClient, path: str) -> None:
    sid = seed(http)
    for name, args in [
        ("read_file", {"path": path}),
        ("write_file", {"path": path, "content": "x"}),
        ("delete_file", {"path": path}),
    ]:
        output = http.post(f"/tools/{name}", json={"session_id": sid, "arguments": args}).json()["output"]
        assert output.startswith("error:"), (name, path, output)


def test_symlinks_are_not_followed(server: FileEditServer, http: TestClient, tmp_path: Path) -> None:
    sid = seed(http)
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    os.symlink(secret, server.session(sid).state.root / "link.txt")
    os.symlink(tmp_path, server.session(sid).state.root / "dir")
    for path in ("link.txt", "dir/secret.txt"):
        output = http.post("/tools/read_file", json={"session_id": sid, "arguments": {"path": path}}).json()["output"]
        assert "symlink" in output and "top secret" not in output


def test_verify_reads_the_servers_own_log_and_changes_nothing(server: FileEditServer, http: TestClient) -> None:
    sid = seed(http)
    http.post(
        "/tools/replace_in_file",
        json={"session_id": sid, "arguments": {"path": "config/app.toml", "old": "version = 1", "new": "version = 2"}},
    )
    before = http.post("/tools/list_files", json={"session_id": sid}).json()
    first = http.post("/verify", json={"session_id": sid, "final_message": "done"}).json()
    second = http.post("/verify", json={"session_id": sid}).json()
    assert first["reward"] == second["reward"] == 1.0
    assert http.post("/tools/list_files", json={"session_id": sid}).json() == before
    assert [c["tool"] for c in server.session(sid).calls] == ["replace_in_file", "list_files", "list_files"]


def test_agent_loop_transcript_in_responses_item_shapes() -> None:
    steps = [
        [{"type": "function_call", "name": "read_file", "arguments": {"path": "config/app.toml"}}],
        [
            {
                "type": "function_call",
                "name": "replace_in_file",
                "arguments": {"path": "config/app.toml", "old": "version = 1", "new": "version = 2"},
            }
        ],
        [{"type": "message", "role": "assistant", "content": "done"}],
        [{"type": "message", "role": "assistant", "content": "never reached"}],
    ]
    with serve(create_app(FileEditServer())) as url:
        client = EnvClient(url)
        transcript = run_episode(ScriptedModel(steps), client, TASK, max_steps=6)
        capped = run_episode(ScriptedModel(steps[:2] * 3), client, TASK, max_steps=2)
        client.close()
    assert transcript.verdict.reward == 1.0 and transcript.final_message == "done"
    assert len(transcript.steps) == 3
    output = transcript.steps[0]["tool_outputs"][0]
    assert output["type"] == "function_call_output" and "version = 1" in output["output"]
    assert output["call_id"] == transcript.steps[0]["model_output"][0]["call_id"]
    assert len(capped.steps) == 2  # max_steps bounds model calls


def test_parse_completion_and_chat_conversion() -> None:
    items = parse_completion(
        'thinking <tool_call>{"name": "read_file", "arguments": {"path": "a"}}</tool_call>'
        "<tool_call>not json</tool_call>"
    )
    assert items[0] == {"type": "message", "role": "assistant", "content": "thinking <tool_call>not json</tool_call>"}
    assert items[1]["name"] == "read_file" and json.loads(items[1]["arguments"]) == {"path": "a"}
    chat = to_chat(
        [
            {"type": "message", "role": "user", "content": "hi"},
            *items[1:],
            {"type": "function_call_output", "call_id": items[1]["call_id"], "output": "A"},
        ]
    )
    assert [m["role"] for m in chat] == ["user", "assistant", "tool"]
    assert chat[1]["tool_calls"][0]["function"]["name"] == "read_file"


def test_openai_compatible_model_interface() -> None:
    from fastapi import FastAPI

    fake = FastAPI()
    seen: list[dict] = []

    @fake.post("/v1/chat/completions")
    def complete(body: dict) -> dict:
        seen.append(body)
        return {
            "choices": [
                {
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {"id": "c1", "type": "function", "function": {"name": "list_files", "arguments": "{}"}}
                        ],
                    }
                }
            ]
        }

    with serve(fake) as url:
        model = OpenAIModel(url, "tiny", max_tokens=16)
        out = model.respond([{"type": "message", "role": "user", "content": "go"}], [{"type": "function"}])
    assert out == [{"type": "function_call", "call_id": "c1", "name": "list_files", "arguments": "{}"}]
    assert seen[0]["messages"] == [{"role": "user", "content": "go"}] and seen[0]["model"] == "tiny"


def test_transformers_model_interface(tiny_chatml: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr_cli.env.model import TransformersModel

    tokenizer = AutoTokenizer.from_pretrained(tiny_chatml)
    lm = AutoModelForCausalLM.from_pretrained(tiny_chatml)
    torch.manual_seed(3)
    with torch.no_grad():  # loud random weights: the greedy answer is a varied string, not blank lines
        for p in lm.parameters():
            p.normal_(0.0, 0.5)
    stop = tokenizer.convert_tokens_to_ids("<|im_end|>")
    model = TransformersModel(lm, tokenizer, max_new_tokens=8, stop_ids=[stop], temperature=0.0)
    out = model.respond([{"type": "message", "role": "user", "content": "hi"}], [])
    # the same greedy continuation, computed here with transformers' own generate
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    ids = tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
    new = lm.generate(ids, max_new_tokens=8, do_sample=False, eos_token_id=stop, pad_token_id=stop)[0, ids.shape[1] :]
    expected = tokenizer.decode([t for t in new.tolist() if t != stop], skip_special_tokens=False).strip()
    assert expected and out == [{"type": "message", "role": "assistant", "content": expected}]
