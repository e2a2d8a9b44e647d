"""The runner inside the unit-test sandbox: runs the model's code once per test case and
reports what it produced. Standard library only; executed as a script by `env/sandbox.py`.

Trust: this runner never sees an expected output — the cases carry inputs only, and every
verdict is decided outside the sandbox by comparing what is reported here with the task's
expected values. The model's code runs in a forked child per case, after the result channel
is closed in it, in its own process group, under rlimits (address space, CPU time, processes,
file size, open files). The runner is not dumpable (no ptrace, no /proc of it) and is the
subreaper of every process the code starts, so it can see and kill what a case leaves behind.

Protocol: the payload (JSON) on stdin; JSON lines on the channel fd (argv[1]): `ready`, then
one line per case (`done` with stdout/stderr or the call's JSON value and types — or each step's,
for a sequence of calls in one process — and the arguments after the call, `exit`, `timeout`,
`output_limit`, `strays`, `budget`), then `end`. A case the code kills the runner in never
reports; the judge outside counts every unreported case as failed.
"""

from __future__ import annotations

import builtins
import contextlib
import io
import json
import os
import resource
import select
import signal
import sys
import time
import traceback

READ = 65536


def _prctl(option: int, value: int) -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(option, value, 0, 0, 0)


def _limit(limits: dict) -> None:
    """The child's limits; without privileges it cannot raise them again."""
    mib = 1 << 20
    cpu = int(limits["case_timeout_s"]) + 1
    for which, value in (
        (resource.RLIMIT_AS, limits["memory_mb"] * mib),
        (resource.RLIMIT_CPU, cpu),
        (resource.RLIMIT_NPROC, limits["processes"] + 2),  # + the runner and the sandbox's init
        (resource.RLIMIT_FSIZE, limits["file_mb"] * mib),
        (resource.RLIMIT_NOFILE, 64),
        (resource.RLIMIT_CORE, 0),
    ):
        hard = resource.getrlimit(which)[1]  # an inherited bound (the verifier's memory_mb) stays
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(which, (value, value))


def _child(payload: dict, case: dict, stdin_path: str, out: int, err: int, res: int, channel: int) -> None:
    """In the forked child: become the program under test. Never returns."""
    code = 1
    try:
        os.close(channel)
        os.setpgid(0, 0)
        os.dup2(os.open(stdin_path, os.O_RDONLY), 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8", errors="replace")
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="replace")
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="replace")
        _limit(payload["limits"])
        call = payload["mode"] == "call"
        namespace = {"__name__": "solution" if call else "__main__", "__builtins__": builtins}
        exec(compile(payload["code"], "solution.py", "exec"), namespace)
        if call:
            if "steps" in case:  # one process, one state: each step sees what the earlier ones left
                objects: dict = {}
                answer = {"steps": [_step(namespace, objects, step) for step in case["steps"]]}
            else:
                name, args, kwargs = payload["function"], case.get("args", []), case.get("kwargs", {})
                answer = _call(namespace.get(name), name, args, kwargs)[1]
                answer["args_after"] = _reported([args, kwargs])["value"]  # what the call did to them
            data = json.dumps(answer, allow_nan=False).encode()
            sys.stdout.flush()
            while data:
                data = data[os.write(res, data) :]
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
        os._exit(code)


def _types(value: object) -> object:
    """The Python types of a JSON value, containers with their members': a tuple is not a list."""
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, [_types(v) for v in value]]
    if isinstance(value, dict):
        return [type(value).__name__, {str(k): _types(v) for k, v in value.items()}]
    return type(value).__name__


def _reported(value: object) -> dict:
    """A return value as the judge outside reads it: its JSON and its types, or what it is."""
    try:
        json.dumps(value, allow_nan=False)
        return {"value": value, "types": _types(value)}
    except (TypeError, ValueError, RecursionError):
        return {"value": None, "unjsonable": type(value).__name__}


def _call(function: object, name: str, args: list, kwargs: dict) -> tuple[object, dict]:
    """(the value, what is reported): the call's value, or the exception a case may expect; a
    name the code does not define is `missing`, never an exception a case could expect."""
    if not callable(function):
        return None, {"missing": name}
    try:
        value = function(*args, **kwargs)
    except Exception as exc:  # compared outside
        kinds = [k.__name__ for k in type(exc).__mro__]
        return None, {"raised": type(exc).__name__, "kinds": kinds, "message": str(exc)[:1000]}
    return value, _reported(value)


def _step(namespace: dict, objects: dict, step: dict) -> dict:
    """One step of a sequence: `call` names a function of the code, or `obj.method` of a value an
    earlier step kept `as` obj."""
    head, _, attr = step["call"].partition(".")
    target = objects[head] if head in objects else namespace.get(head)
    try:
        function = getattr(target, attr, None) if attr and target is not None else target
    except Exception:  # a value's own __getattr__ failing: nothing to call
        function = None
    args, kwargs = step.get("args", []), step.get("kwargs", {})
    value, answer = _call(function, step["call"], args, kwargs)
    if step.get("as") and "raised" not in answer and "missing" not in answer:
        objects[step["as"]] = value
    answer["args_after"] = _reported([args, kwargs])["value"]
    return answer


def _collect(fds: dict[int, str], cap: int, deadline: float) -> tuple[dict[str, bytes], str | None]:
    """Read the case's pipes until every writer is gone; the reason when it had to stop early."""
    got = {name: b"" for name in fds.values()}
    open_fds = set(fds)
    while open_fds:
        left = deadline - time.monotonic()
        if left <= 0:
            return got, "timeout"
        ready, _, _ = select.select(list(open_fds), [], [], left)
        for fd in ready:
            chunk = os.read(fd, READ)
            if not chunk:
                open_fds.discard(fd)
                continue
            got[fds[fd]] += chunk
            if sum(len(v) for v in got.values()) > cap:
                return got, "output_limit"
    return got, None


def _sweep(contained: bool) -> int:
    """Kill and reap every process left in the sandbox but this runner; how many were running.
    Outside a sandbox (the benchmark's plain runs) nothing beyond the case's group is killed."""
    running = 0
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return running
        if pid == 0:  # some are still running: everything but us and init goes
            running += 1
            if not contained:
                return running
            with contextlib.suppress(ProcessLookupError):
                os.kill(-1, signal.SIGKILL)
            time.sleep(0.01)


def _run_case(payload: dict, i: int, case: dict, channel: int, budget_end: float) -> dict:
    limits = payload["limits"]
    stdin_path = os.path.join(os.getcwd(), f".case-{i}.in")  # the sandbox's /tmp; a plain run's own scratch folder
    with open(stdin_path, "w", encoding="utf-8") as f:
        f.write(case.get("stdin", ""))
    pipes = [os.pipe() for _ in range(3)]
    pid = os.fork()
    if pid == 0:
        for r, _ in pipes:
            os.close(r)
        _child(payload, case, stdin_path, pipes[0][1], pipes[1][1], pipes[2][1], channel)
    for _, w in pipes:
        os.close(w)
    deadline = min(time.monotonic() + limits["case_timeout_s"], budget_end)
    fds = {pipes[0][0]: "stdout", pipes[1][0]: "stderr", pipes[2][0]: "value"}
    got, stopped = _collect(fds, limits["output_kb"] * 1024, deadline)
    if stopped:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    for r, _ in pipes:
        os.close(r)
    os.unlink(stdin_path)
    strays = _sweep(payload.get("contained", True))
    if stopped == "timeout" and deadline == budget_end and budget_end < time.monotonic() + 0.01:
        stopped = "budget"
    result = {"case": i, "status": stopped or ("strays" if strays else "done")}
    result["exit"] = os.waitstatus_to_exitcode(status)
    for name, data in got.items():
        result[name] = data.decode("utf-8", errors="replace")
    return result


def main() -> None:
    channel = int(sys.argv[1])
    _prctl(4, 0)  # PR_SET_DUMPABLE 0: the code under test cannot ptrace or open this process
    _prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: orphans of a case come back here to be seen and killed
    payload = json.loads(sys.stdin.buffer.read())
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    budget_end = time.monotonic() + payload["budget_s"]

    def send(record: dict) -> None:
        data = (json.dumps(record) + "\n").encode()
        while data:
            data = data[os.write(channel, data) :]

    send({"event": "ready"})
    for i, case in enumerate(payload["cases"]):
        if time.monotonic() >= budget_end:
            send({"case": i, "status": "budget"})
            continue
        send(_run_case(payload, i, case, channel, budget_end))
    send({"event": "end"})


if __name__ == "__main__":
    main()
