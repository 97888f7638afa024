"""Running a notebook's code cells inside the child process (the learner's code runs here).

An IPython shell executes each cell as a Jupyter kernel would (magics, the value of the last
expression, tracebacks), and every cell's outputs are appended to a JSON-lines file as soon
as the cell ends, so that a crash or a timeout later on loses nothing already done. Check
records (the learner's raw arrays) go next to it as ``.npz`` files, written without pickle.
"""

from __future__ import annotations

import io
import json
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

MAX_STREAM_CHARS = 20_000  # per cell and stream; more is cut with a note
MAX_RECORD_ELEMENTS = 5_000_000


@dataclass(frozen=True)
class CellJob:
    index: int  # position in the sanitized notebook
    source: str


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

    class CollectingDisplayHook(DisplayHook):
        def __call__(self, result: Any = None) -> None:
            if result is None:
                return
            self.shell.user_ns["_"] = result
            data, metadata = self.shell.display_formatter.format(result)
            self.shell.collected.append(
                {"output_type": "execute_result", "data": _jsonable(data),
                 "metadata": _jsonable(metadata), "execution_count": self.shell.execution_count}
            )

    class CollectingPublisher(DisplayPublisher):
        def publish(self, data, metadata=None, *args: Any, **kwargs: Any) -> None:
            self.shell.collected.append(
                {"output_type": "display_data", "data": _jsonable(data),
                 "metadata": _jsonable(metadata or {})}
            )

        def clear_output(self, wait: bool = False) -> None:
            pass

    class CollectingShell(InteractiveShell):
        displayhook_class = CollectingDisplayHook
        display_pub_class = CollectingPublisher

        def enable_gui(self, gui: Any = None) -> None:  # no event loop in a grading child
            pass

        def _showtraceback(self, etype, evalue, stb) -> None:  # what ipykernel sends as "error"
            self.collected.append(
                {"output_type": "error", "ename": getattr(etype, "__name__", str(etype)),
                 "evalue": str(evalue), "traceback": list(stb)}
            )

    shell = CollectingShell.instance(colors="nocolor")
    shell.showtraceback = types.MethodType(InteractiveShell.showtraceback, shell)
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


def execute_cells(cells: list[CellJob], results_file: Path, record_dir: Path | None) -> None:
    """Run ``cells`` in order, appending one JSON line per finished cell to ``results_file``."""
    from grader import recording

    recorder = recording.start_recording() if record_dir is not None else None
    run_cell = _bound_run_cell()
    shell = _make_shell()
    real_stdout, real_stderr = sys.stdout, sys.stderr
    with open(results_file, "a", encoding="utf-8") as results:
        for cell in cells:
            stdout, stderr = BoundedStream("stdout"), BoundedStream("stderr")
            shell.collected = []
            if recorder is not None:
                recorder.current_cell = cell.index
            sys.stdout, sys.stderr = stdout, stderr
            failure: BaseException | None = None
            try:
                outcome = run_cell(shell, cell.source, store_history=True)
                failure = outcome.error_before_exec or outcome.error_in_exec
            except BaseException as exc:  # noqa: BLE001 - the learner's code may raise anything
                failure = exc
            finally:
                sys.stdout, sys.stderr = real_stdout, real_stderr
            if failure is not None and not any(o["output_type"] == "error" for o in shell.collected):
                # The traceback display was silenced (a known cheat patches showtraceback):
                # the cell's own result still says it failed, as a kernel's reply status would.
                shell.collected.append(
                    {"output_type": "error", "ename": type(failure).__name__,
                     "evalue": str(failure), "traceback": []}
                )
            outputs = [
                {"output_type": "stream", "name": s.name, "text": s.text()}
                for s in (stdout, stderr) if s.size or s.dropped
            ] + shell.collected
            line = {"index": cell.index, "outputs": outputs, "records": []}
            if recorder is not None and record_dir is not None:
                line["records"] = _save_records(recorder.records.pop(cell.index, []), record_dir, cell.index)
            results.write(json.dumps(line) + "\n")
            results.flush()


def _save_records(records: list, record_dir: Path, cell_index: int) -> list[dict]:
    saved = []
    for k, rec in enumerate(records):
        entry = {"exercise": rec.exercise, "seed": rec.seed, "params": _jsonable_params(rec.params),
                 "error": rec.error, "file": None}
        if rec.outputs is not None:
            arrays = {key: np.asarray(v) for key, v in rec.outputs.items()}
            if sum(a.size for a in arrays.values()) > MAX_RECORD_ELEMENTS:
                entry["error"] = "the output is far larger than the case asks for"
            else:
                path = record_dir / f"cell{cell_index}_check{k}.npz"
                np.savez(path, **arrays)
                entry["file"] = path.name
        saved.append(entry)
    return saved


def _jsonable_params(params: dict) -> dict:
    try:
        return json.loads(json.dumps(params))
    except (TypeError, ValueError):
        return {k: repr(v) for k, v in params.items()}
