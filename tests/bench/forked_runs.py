"""`python -m bench` for each request of stdin (a JSON line: the argv as a list, or an object
with argv, cwd, env, timeout and module: bench.probe for `python -m bench.probe`, ...), each in
a fork of this one process, which imported what a run imports once (torch, Hydra, the harness,
transformers, pandas): a run skips the 2-5 s of imports a fresh interpreter pays (a refusal
still takes about a third of a second: Hydra composes the config). Writes a JSON line per
request: its exit status, stderr and stdout.

This process only imports, so its children find no thread pool of torch's or OpenMP's started
to inherit (a fork of a process whose OpenMP pool had started could hang) and take torch's
default thread count, as a fresh `python -m bench` does."""

import contextlib
import json
import os
import runpy
import signal
import sys
import tempfile

import hydra  # noqa: F401  (the imports a run makes, once)
import torch  # noqa: F401

import bench.cases  # noqa: F401
import bench.config.plan  # noqa: F401
import bench.run.runner  # noqa: F401

with contextlib.suppress(ImportError):  # model= inputs read their config with transformers
    import transformers  # noqa: F401
with contextlib.suppress(ImportError):  # a run's report
    import matplotlib  # noqa: F401
    import pandas  # noqa: F401


def _child(request: dict, out, err) -> None:
    with open(os.devnull) as null:
        os.dup2(null.fileno(), 0)
    os.dup2(out.fileno(), 1)
    os.dup2(err.fileno(), 2)
    if request.get("env") is not None:  # the caller's environment, as a subprocess gets it
        os.environ.clear()
        os.environ.update(request["env"])
    if request.get("cwd"):
        os.chdir(request["cwd"])
    if request.get("timeout"):  # past it the child is killed, as subprocess.run's timeout
        signal.alarm(int(request["timeout"]))
    module = request.get("module", "bench")  # or bench.probe, bench.report
    sys.argv = [module, *request["argv"]]
    sys.modules.pop(f"{module}.__main__", None)  # run as the command runs it: its own __main__
    code = 0
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    except BaseException:  # what the command would print: its traceback
        import traceback

        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run(request: dict | list) -> dict:
    if isinstance(request, list):
        request = {"argv": request}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:
            _child(request, out, err)
        _, status = os.waitpid(pid, 0)
        out.seek(0)
        err.seek(0)
        return {
            "argv": request["argv"],
            "code": os.waitstatus_to_exitcode(status),
            "stdout": out.read().decode(errors="replace"),
            "stderr": err.read().decode(errors="replace"),
        }


if __name__ == "__main__":
    for line in sys.stdin:
        print(json.dumps(run(json.loads(line))), flush=True)
