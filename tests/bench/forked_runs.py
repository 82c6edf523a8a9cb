"""`python -m bench` for each argv of stdin (a JSON list a line), each in a fork of this one
process, which imported the harness once: about 30 ms a refusal instead of 2 s for a fresh
interpreter. Writes a JSON line per argv: its exit status, stderr and stdout. Only for inputs
that are refused or end before a row is measured: a fork that measures would inherit this
process's torch threads."""

import contextlib
import json
import os
import runpy
import sys
import tempfile

import hydra  # noqa: F401  (the imports a run makes, once)
import torch  # noqa: F401

import bench.cases  # noqa: F401
import bench.config.plan  # noqa: F401
import bench.run.runner  # noqa: F401

with contextlib.suppress(ImportError):  # model= inputs read their config with transformers
    import transformers  # noqa: F401


def _child(argv: list[str], out, err) -> None:
    os.dup2(out.fileno(), 1)
    os.dup2(err.fileno(), 2)
    sys.argv = ["bench", *argv]
    sys.modules.pop("bench.__main__", None)  # run as the command runs it: its own __main__
    code = 0
    try:
        runpy.run_module("bench", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    except BaseException:  # what the command would print: its traceback
        import traceback

        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run(argv: list[str]) -> dict:
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:
            _child(argv, out, err)
        _, status = os.waitpid(pid, 0)
        out.seek(0)
        err.seek(0)
        return {
            "argv": argv,
            "code": os.waitstatus_to_exitcode(status),
            "stdout": out.read().decode(errors="replace"),
            "stderr": err.read().decode(errors="replace"),
        }


if __name__ == "__main__":
    for line in sys.stdin:
        print(json.dumps(run(json.loads(line))), flush=True)
