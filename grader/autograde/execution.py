"""Running a notebook's code cells inside the child process (the learner's code runs here).

An IPython shell executes each cell as a Jupyter kernel would (magics, the value of the last
expression, tracebacks), and every cell's outputs, with the raw arrays its ``check`` calls
received, are written to the report descriptor as soon as the cell ends
(``child_report``), so that a crash or a timeout later on loses nothing already done.

Test cells run without a trace the learner's code could read back: no history (``In``,
``_ih``), no source registered for ``inspect``/``linecache``, so tracebacks never quote them.
Nothing here decides anything; the parent judges what the report says.
"""

from __future__ import annotations

import io
import json
import resource
import sys
import types
from dataclasses import dataclass
from typing import Any

import numpy as np

from attention_learner import recording
from grader.autograde.child_report import (
    MAX_REACHED,
    MAX_REACHED_CHARS,
    MAX_RECORD_ELEMENTS,
    encode_arrays,
    write_line,
)
from grader.autograde.confine import address_space

MAX_STREAM_CHARS = 20_000  # per cell and stream; more is cut with a note
MAX_ERROR_CHARS = 2_000  # an exception's text, as echoed into feedback


@dataclass(frozen=True)
class CellJob:
    index: int  # position in the sanitized notebook
    source: str
    hidden: bool = False  # a test cell: run without leaving its source anywhere readable
    memory_bytes: int | None = None  # what this cell may allocate above the job's start
    warnings_on_stdout: bool = False  # this course's notebooks: a warning costs no points


class BoundedStream(io.TextIOBase):
    """A text stream that keeps the first MAX_STREAM_CHARS characters and counts the rest."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.parts: list[str] = []
        self.size = 0
        self.dropped = 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        text = str(text)
        room = MAX_STREAM_CHARS - self.size
        if room > 0:
            self.parts.append(text[:room])
            self.size += min(room, len(text))
        self.dropped += max(0, len(text) - max(room, 0))
        return len(text)

    def text(self) -> str:
        tail = f"\n... [{self.dropped} more characters cut by the grader]\n" if self.dropped else ""
        return "".join(self.parts) + tail


def _make_shell() -> Any:
    """An IPython shell whose results, displays and tracebacks are collected, not printed."""
    from IPython.core.displayhook import DisplayHook
    from IPython.core.displaypub import DisplayPublisher
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    class CollectingDisplayHook(DisplayHook):
        def __call__(self, result: Any = None) -> None:
            if result is None:
                return
            shell: Any = self.shell  # the CollectingShell below (IPython: InteractiveShell | None)
            shell.user_ns["_"] = result
            data, metadata = shell.display_formatter.format(result)
            shell.collected.append(
                {
                    "output_type": "execute_result",
                    "data": _jsonable(data),
                    "metadata": _jsonable(metadata),
                    "execution_count": shell.execution_count,
                }
            )

    class CollectingPublisher(DisplayPublisher):
        def publish(
            self, data: dict[str, Any], metadata: dict[str, Any] | None = None, *args: Any, **kwargs: Any
        ) -> None:
            shell: Any = self.shell  # the CollectingShell below
            shell.collected.append(
                {
                    "output_type": "display_data",
                    "data": _jsonable(data),
                    "metadata": _jsonable(metadata or {}),
                }
            )

        def clear_output(self, wait: bool = False) -> None:
            pass

    class CollectingShell(InteractiveShell):
        displayhook_class = CollectingDisplayHook
        display_pub_class = CollectingPublisher
        collected: list[dict[str, Any]]  # the cell's outputs, as nbformat has them

        def enable_gui(self, gui: Any = None) -> None:  # no event loop in a grading child
            pass

        # what ipykernel sends as "error"
        def _showtraceback(self, etype: Any, evalue: Any, stb: list[str]) -> None:
            self.collected.append(
                {
                    "output_type": "error",
                    "ename": getattr(etype, "__name__", str(etype)),
                    "evalue": str(evalue),
                    "traceback": list(stb),
                }
            )

    # no history database: a kernel's In/Out stay in memory, but the sqlite file in the job's
    # home and the thread that writes it (both per job) are not needed to grade one notebook
    config = Config()
    config.HistoryManager.enabled = False
    shell = CollectingShell.instance(config=config, colors="nocolor")
    # IPython's showtraceback bound on the instance now: a cell that patches the class's later
    # does not reach this shell (mypy: assigning to a method is deliberate here)
    shell.showtraceback = types.MethodType(InteractiveShell.showtraceback, shell)  # type: ignore[method-assign]
    shell.InteractiveTB.set_mode("Plain")  # Python's own format: 20x cheaper than "Context"
    shell.collected = []
    return shell


def _bound_run_cell() -> Any:
    from IPython.core.interactiveshell import InteractiveShell

    return InteractiveShell.run_cell  # taken before any learner code can replace it


def _jsonable(data: Any) -> Any:
    try:
        json.dumps(data)
        return data
    except (TypeError, ValueError):
        return {k: str(v) for k, v in dict(data).items()}


def _uncached(shell: Any) -> Any:
    """A replacement for IPython's CachingCompiler.cache that keeps no copy of the source."""
    counter = iter(range(1, 1 << 62))

    def cache(transformed_code: str, number: int = 0, raw_code: str | None = None) -> str:
        return f"<test cell {next(counter)}>"

    return cache


def execute_cells(cells: list[CellJob], report_fd: int, record: bool, salt: int = 0) -> None:
    """Run ``cells`` in order, writing one report line per finished cell to ``report_fd``.

    With ``record``, every check records the learner's raw outputs for the parent, on inputs
    drawn from ``salt`` (the job's secret, see ``attention_learner.recording.grading_seed``).
    A cell with ``warnings_on_stdout`` (this course's notebooks) shows warnings on stdout, as
    a notebook kernel that imports the learner package does, so that they cost no points.
    """
    if any(cell.warnings_on_stdout for cell in cells):
        from attention_learner.checks import show_warnings_on_stdout

        show_warnings_on_stdout()
    recorder = recording.start_recording(salt) if record else None
    run_cell = _bound_run_cell()
    limit_memory = _memory_limiter()  # bound before any learner code can replace its parts
    shell = _make_shell()
    caching = shell.compile.cache
    hidden_cache = _uncached(shell)
    real_stdout, real_stderr = sys.stdout, sys.stderr
    for cell in cells:
        stdout, stderr = BoundedStream("stdout"), BoundedStream("stderr")
        shell.collected = []
        if recorder is not None:
            recorder.current_cell = cell.index
        shell.compile.cache = hidden_cache if cell.hidden else caching
        if cell.memory_bytes is not None:
            limit_memory(cell.memory_bytes)
        sys.stdout, sys.stderr = stdout, stderr
        failure: BaseException | None = None
        try:
            outcome = run_cell(shell, cell.source, store_history=not cell.hidden)
            failure = outcome.error_before_exec or outcome.error_in_exec
        except BaseException as exc:  # noqa: BLE001 - the learner's code may raise anything
            failure = exc
        finally:
            sys.stdout, sys.stderr = real_stdout, real_stderr
        if failure is not None and not any(o["output_type"] == "error" for o in shell.collected):
            # The traceback display was silenced (a known cheat patches showtraceback):
            # the cell's own result still says it failed, as a kernel's reply status would.
            shell.collected.append(
                {
                    "output_type": "error",
                    "ename": type(failure).__name__,
                    "evalue": str(failure),
                    "traceback": [],
                }
            )
        outputs = [
            {"output_type": "stream", "name": s.name, "text": s.text()}
            for s in (stdout, stderr)
            if s.size or s.dropped
        ] + [_bounded(o) for o in shell.collected]
        records = recorder.records.pop(cell.index, []) if recorder is not None else []
        write_line(
            report_fd,
            {"index": cell.index, "outputs": outputs, "records": [_encode_record(r) for r in records]},
        )


def _memory_limiter() -> Any:
    """``limit(extra)``: from now on this process may map at most ``extra`` bytes more than it
    had when the job started, for good: soft and hard address-space limits both drop, and an
    unprivileged process cannot raise a hard limit again. A memory rule of a test cell is
    enforced so, by the kernel (an allocation over it raises MemoryError), never by a figure
    the learner's process reports. Taken when the job starts, before any learner code."""
    setrlimit, getrlimit, limit_as = resource.setrlimit, resource.getrlimit, resource.RLIMIT_AS
    baseline = address_space()

    def limit(extra: int) -> None:
        wanted = baseline + int(extra)
        _, hard = getrlimit(limit_as)
        if hard == resource.RLIM_INFINITY or wanted < hard:
            setrlimit(limit_as, (wanted, wanted))

    return limit


def _bounded(output: dict[str, Any]) -> dict[str, Any]:
    """Error texts cut to MAX_ERROR_CHARS: the learner chooses them, the feedback echoes them."""
    if output.get("output_type") != "error":
        return output
    return {
        **output,
        "evalue": str(output.get("evalue", ""))[:MAX_ERROR_CHARS],
        "traceback": [str(t)[:MAX_ERROR_CHARS] for t in output.get("traceback", [])[:50]],
    }


def _encode_record(rec: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "exercise": rec.exercise,
        "seed": rec.seed,
        "params": _jsonable_params(rec.params),
        "error": str(rec.error)[:MAX_ERROR_CHARS],
        "arrays": None,
        "reached": [str(r)[:MAX_REACHED_CHARS] for r in getattr(rec, "reached", ())[:MAX_REACHED]],
    }
    if rec.outputs is not None:
        try:
            arrays = {key: np.asarray(v) for key, v in rec.outputs.items()}
            if sum(a.size for a in arrays.values()) > MAX_RECORD_ELEMENTS:
                entry["error"] = "the output is far larger than the case asks for"
            else:
                entry["arrays"] = encode_arrays(arrays)
        except (TypeError, ValueError) as exc:
            entry["error"] = f"the output could not be read as numbers: {exc}"[:MAX_ERROR_CHARS]
    return entry


def _jsonable_params(params: dict[str, Any]) -> dict[str, Any]:
    try:
        copied: dict[str, Any] = json.loads(json.dumps(params))
        return copied
    except (TypeError, ValueError):
        return {k: repr(v) for k, v in params.items()}
