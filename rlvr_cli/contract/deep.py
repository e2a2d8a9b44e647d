"""`rlvr validate --deep`: read the files the contract names (never the network).

RLV901 when an artifact, data file, chat template, stop token or verifier cannot be found or
loaded; RLV104 when a file no longer matches its sha256 (lock file or `sha256:` keys). The
rows of the data splits are checked by `rlvr data check` (rlvr_cli/data/), which
`rlvr validate --deep` runs too.
"""

from __future__ import annotations

import ast
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from rlvr_cli.contract import hub, lock
from rlvr_cli.contract.diagnostics import Finding, error
from rlvr_cli.contract.models import Contract
from rlvr_cli.files import sha256_file


def run_all(contract: Contract, folder: Path, contract_path: Path) -> list[Finding]:
    checks = (artifacts, _tokenizer, _data, _verifier, _server)
    findings = [f for check in checks for f in check(contract, folder)]
    findings.extend(_lock(contract, contract_path))
    return findings


def _model_folder(path: str | None, folder: Path, where: tuple, what: str) -> Iterator[Finding]:
    if path is None:
        return
    root = folder / path
    build = (
        "; put a transformers model folder there (config.json and weights), or build the tiny local one: "
        f"python -m rlvr_cli.toy.tiny {root} (`rlvr init` builds it unless given --no-model)"
    )
    if not root.is_dir():
        yield error("RLV901", where, f"{what} folder {path} does not exist{build}")
    elif not (root / "config.json").is_file():
        yield error("RLV901", where, f"{what} folder {path} has no config.json{build}")


def artifacts(c: Contract, folder: Path, _contract_path: Path | None = None) -> Iterator[Finding]:
    """The policy and reference folders (config.json) and hub ids the local cache holds: what
    `train`, `plan` and `gate` need before they load anything."""
    yield from _model_folder(c.artifacts.policy.path, folder, ("artifacts", "policy", "path"), "policy")
    ref = c.artifacts.reference
    if ref is not None:
        yield from _model_folder(ref.path, folder, ("artifacts", "reference", "path"), "reference")
    for role, hub_ref in (("policy", c.artifacts.policy), ("reference", ref), ("tokenizer", c.artifacts.tokenizer)):
        if hub_ref is not None and getattr(hub_ref, "id", None) and hub.snapshot(hub_ref.id, hub_ref.revision) is None:
            yield error("RLV901", ("artifacts", role, "id"), hub.missing(hub_ref.id, hub_ref.revision))
    if c.hyperparameters.adapter is not None:
        from rlvr_cli.contract.rules_adapter import adapter_findings_loaded

        yield from adapter_findings_loaded(c, folder)


def _tokenizer(c: Contract, folder: Path) -> Iterator[Finding]:
    tok = c.artifacts.tokenizer
    root = folder / tok.path if tok.path else hub.snapshot(tok.id, tok.revision)  # type: ignore[arg-type]
    if root is None:  # a hub id the cache lacks: reported with the artifacts
        return
    where = ("artifacts", "tokenizer")
    if not (root / "tokenizer.json").is_file():
        yield error("RLV901", (*where, "path"), f"no tokenizer.json in {tok.path or root}")
        return
    try:
        vocab = _vocabulary(root / "tokenizer.json")
    except (OSError, ValueError) as exc:
        yield error("RLV901", (*where, "path"), f"tokenizer.json cannot be loaded: {exc}")
        return
    for i, stop in enumerate(c.length.stop_tokens):
        if stop not in vocab:
            yield error(
                "RLV901", ("length", "stop_tokens", i), f"stop token {stop!r} is not a single token of the tokenizer"
            )
    yield from _chat_template(tok.chat_template, root, folder, (*where, "chat_template"))


def _vocabulary(path: Path) -> set[str]:
    data = json.loads(path.read_text(encoding="utf-8"))
    vocab = {t["content"] for t in data.get("added_tokens", [])}
    model_vocab = (data.get("model") or {}).get("vocab") or {}
    if isinstance(model_vocab, dict):
        vocab.update(model_vocab)
    else:  # Unigram: [[piece, score], ...]
        vocab.update(piece for piece, _ in model_vocab)
    return vocab


def native_template(root: Path) -> str | None:
    """The tokenizer's own chat template as transformers would load it, or None."""
    jinja = root / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    config = root / "tokenizer_config.json"
    if config.is_file():
        template = json.loads(config.read_text(encoding="utf-8")).get("chat_template")
        if isinstance(template, list):  # named templates: the default one renders chats
            named = {t.get("name"): t.get("template") for t in template}
            template = named.get("default")
        if isinstance(template, str) and template.strip():
            return template
    return None


def _chat_template(spec: str, root: Path, folder: Path, where: tuple) -> Iterator[Finding]:
    if spec == "native":
        try:
            source = native_template(root)
        except (OSError, ValueError) as exc:
            yield error("RLV901", where, f"tokenizer_config.json cannot be read: {exc}")
            return
        if source is None:
            yield error("RLV901", where, "chat_template is native but the tokenizer has none")
            return
    else:
        path = folder / spec
        if not path.is_file():
            yield error("RLV901", where, f"chat template file {spec} does not exist")
            return
        source = path.read_text(encoding="utf-8")
    yield from _compile_template(source, where)


def _compile_template(source: str, where: tuple) -> Iterator[Finding]:
    try:
        import jinja2
    except ImportError:  # jinja2 arrives with the train extra; without it we only check presence
        return
    try:
        jinja2.Environment().parse(source)
    except jinja2.TemplateSyntaxError as exc:
        yield error("RLV901", where, f"chat template does not compile (line {exc.lineno}): {exc.message}")


def _data(c: Contract, folder: Path) -> Iterator[Finding]:
    """The data files exist and match their sha256; what is in them is the data check's
    (rlvr_cli/data/, run by `rlvr validate --deep` through `check_file(more=...)`)."""
    for i, source in enumerate(c.data.sources):
        yield from _file_hash(folder, source.path, source.sha256, ("data", "sources", i))
    for name in ("train", "holdout", "sealed_eval"):
        split = getattr(c.data.splits, name)
        yield from _file_hash(folder, split.path, split.sha256, ("data", "splits", name))
    if c.data.split_manifest:
        yield from _split_manifest(c, folder)


def _split_manifest(c: Contract, folder: Path) -> Iterator[Finding]:
    """The splits are still the ones `rlvr data split` wrote (RLV104 when one changed since)."""
    where, rel = ("data", "split_manifest"), c.data.split_manifest
    path = folder / rel  # type: ignore[operator]
    if not path.is_file():
        yield error("RLV901", where, f"{rel} does not exist (`rlvr data split` writes it)")
        return
    try:
        written = json.loads(path.read_text(encoding="utf-8"))["splits"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        yield error("RLV901", where, f"{rel} cannot be read: {exc}")
        return
    for name in ("train", "holdout", "sealed_eval"):
        split_path = folder / getattr(c.data.splits, name).path
        recorded = (written.get(name) or {}).get("sha256") if isinstance(written, dict) else None
        if split_path.is_file() and recorded != sha256_file(split_path):
            yield error("RLV104", where, f"{getattr(c.data.splits, name).path} changed since {rel} was written")


def _file_hash(folder: Path, rel: str, sha: str | None, where: tuple) -> Iterator[Finding]:
    path = folder / rel
    if not path.is_file():
        yield error("RLV901", (*where, "path"), f"{rel} does not exist")
    elif sha is not None and sha256_file(path) != sha:
        yield error("RLV104", (*where, "sha256"), f"{rel} no longer matches its sha256")


def _verifier(c: Contract, folder: Path) -> Iterator[Finding]:
    if c.environment.answer_check is not None and not _importable("math_verify"):
        yield error(
            "RLV901", ("environment", "answer_check"), "answer_check needs math-verify: pip install 'rlvr-cli[train]'"
        )
    if c.environment.judge is not None:
        yield from _judge(c, folder)
    spec = c.environment.verifier
    if spec is None:
        return
    module, function = spec.split(":", 1)
    where = ("environment", "verifier")
    if module.split(".")[0] in sys.stdlib_module_names:
        yield error("RLV901", where, f"'{module}' is a standard-library module; the verifier is your own code")
        return
    candidates = [folder / f"{module.replace('.', '/')}.py", folder / module.replace(".", "/") / "__init__.py"]
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        if _importable(module):
            return
        yield error("RLV901", where, f"verifier module '{module}' is not found beside the contract")
        return
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError as exc:
        yield error("RLV901", where, f"{path.name} line {exc.lineno}: {exc.msg}")
        return
    names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    names |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    if function not in names:
        yield error("RLV901", where, f"{path.name} defines no '{function}'")


def _server(c: Contract, folder: Path) -> Iterator[Finding]:
    """`environment.server` as `module:Class`: the user's own module (never the standard
    library: `os:system`, `http.server:...` are no resources server), beside the contract or installed."""
    spec = c.environment.server
    if spec is None or spec.startswith(("http://", "https://", "nemo-gym+", "openenv+")) or ":" not in spec:
        return
    module = spec.split(":", 1)[0]
    where = ("environment", "server")
    if module.split(".")[0] in sys.stdlib_module_names:
        yield error("RLV901", where, f"'{module}' is a standard-library module; the resources server is your own code")
        return
    local = [folder / f"{module.replace('.', '/')}.py", folder / module.replace(".", "/") / "__init__.py"]
    source = next((p for p in local if p.is_file()), None) or _installed_source(module)
    if source is None and not _importable(module):
        yield error("RLV901", where, f"resources server module '{module}' is not found beside the contract")
    elif source is not None:
        yield from _server_tools(c, source, spec.split(":", 1)[1])


def _installed_source(module: str) -> Path | None:
    """The .py file an installed module would be loaded from (found, never imported)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    origin = spec.origin if spec is not None else None
    return Path(origin) if origin and origin.endswith(".py") else None


def _server_tools(c: Contract, source: Path, name: str) -> Iterator[Finding]:
    """The contract's tool lists against what a server beside it declares, read from its source
    without running it — where the class says so plainly (a direct ResourcesServer subclass,
    literal `offered` / `forbidden`, `@tool` methods); otherwise train and the audits check it."""
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"), filename=str(source))
    except (SyntaxError, OSError, ValueError):
        return
    found = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)
    declared = _declared(found) if found is not None else None
    if declared is None:
        return
    offered, forbidden = declared  # as ResourcesServer.offered_tools() and GET /declaration compute them
    server = {"tools": sorted(t for t in offered if t not in forbidden), "forbidden_tools": sorted(forbidden & offered)}
    for key in ("forbidden_tools", "tools"):
        stated = getattr(c.environment, key)
        if stated is not None and sorted(stated) != server[key]:
            yield error(
                "RLV901",
                ("environment", key),
                f"environment.{key} is {sorted(stated)} but {source.name}:{name} declares {server[key]}",
            )


def _declared(cls: ast.ClassDef) -> tuple[set[str], set[str]] | None:
    bases = [b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else "" for b in cls.bases]
    if bases != ["ResourcesServer"]:
        return None  # what it inherits is not in this class's text
    tools = {
        f.name
        for f in cls.body
        if isinstance(f, ast.FunctionDef)
        and any((d.id if isinstance(d, ast.Name) else getattr(d, "attr", "")) == "tool" for d in f.decorator_list)
    }
    values: dict[str, object] = {"offered": None, "forbidden": ()}
    for node in cls.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if isinstance(target, ast.Name) and target.id in values:
            try:
                values[target.id] = ast.literal_eval(node.value)  # type: ignore[union-attr]
            except ValueError:
                return None  # computed: not plainly said
    listed, forbidden = values["offered"], set(values["forbidden"] or ())  # type: ignore[call-overload]
    offered = {t for t in tools if listed is None or t in listed or t in forbidden}  # type: ignore[operator]
    return offered, forbidden


def _importable(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _lock(c: Contract, contract_path: Path) -> Iterator[Finding]:
    path = lock.lock_path(c, contract_path)
    if not path.is_file():
        if c.artifacts.lock:
            yield error("RLV901", ("artifacts", "lock"), f"lock file {c.artifacts.lock} does not exist")
        return
    try:
        locked = json.loads(path.read_text(encoding="utf-8"))["files"]
        current = lock.compute(c, contract_path.resolve().parent)["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        yield error("RLV104", ("artifacts",), f"lock file {path.name} cannot be checked: {exc}")
        return
    for name in sorted(set(locked) | set(current)):
        if locked.get(name) != current.get(name):
            state = "is new" if name not in locked else "is gone" if name not in current else "changed"
            yield error("RLV104", ("artifacts",), f"{name} {state} since {path.name} was written")


def _judge(c: Contract, folder: Path) -> Iterator[Finding]:
    judge, where = c.environment.judge, ("environment", "judge")
    assert judge is not None
    if not _importable("openai"):
        yield error("RLV901", where, "judge needs the openai client: pip install 'rlvr-cli[judge]'")
    if judge.api_key_env and not os.environ.get(judge.api_key_env):
        yield error("RLV901", (*where, "api_key_env"), f"the environment variable {judge.api_key_env} is not set")
    if judge.cache and not (folder / judge.cache).parent.is_dir():
        yield error("RLV901", (*where, "cache"), f"the folder of {judge.cache} does not exist")
