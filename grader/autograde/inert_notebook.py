"""A graded notebook as data: what OUT keeps of a submission can be shown, never run.

Every notebook the grader writes into ``OUT/autograded`` goes through :func:`make_inert`
first (``pipeline._save``), so formgrader, nbgrader's ``generate_feedback`` and anyone who
opens the file get text and pictures only, whichever renderer they use:

- markdown and raw cells: no raw HTML survives. Every ``<`` that would open a tag, a
  comment or an autolink (``<`` then a letter, ``/``, ``!`` or ``?``, the characters after
  which an HTML tokenizer or a CommonMark parser starts markup) is followed by a zero-width
  space, so it is shown as the character it is. Character references are decoded first (at
  most :data:`ENTITY_ROUNDS` times; any still left get the same zero-width space after their
  ``&``), so ``&lt;script&gt;`` or ``jav&#97;script:`` cannot become markup or a scheme in
  the renderer. ``javascript:`` and ``vbscript:`` (letters split by white space, a colon
  escaped by a backslash) get a zero-width space before their colon, which makes any URL
  built from them relative. The text reads as before.
- outputs: only ``text/plain``, ``image/png`` and ``image/jpeg`` (valid base64) are kept; an
  HTML, JavaScript, SVG, Markdown, LaTeX or widget output is replaced by a plain-text note.
  Every field a template prints is given its type (a stream's name, an execution count,
  an image's width and height as integers), since nbconvert's templates print some of them
  unescaped.
- cell metadata keeps only ``nbgrader``; attachments only PNG and JPEG (a reference to one
  that is gone no longer reads as one, or nbconvert would refuse the notebook); notebook metadata
  only the kernel's and language's names (no ``widgets`` state, whose presence makes
  nbconvert load widget code).

The rules are textual and renderer-agnostic on purpose: a parser of our own deciding what is
code and what is HTML could disagree with the renderer's, and that disagreement would be the
hole. Test cells keep only streams and errors already (``scoring.score_notebook``); this
runs after nbgrader's SaveAutoGrades has read them, so no grade depends on it.
"""

from __future__ import annotations

import base64
import binascii
import html
import re
import uuid
from typing import Any

from nbformat import NotebookNode

from grader.autograde.notebook_file import notebook_node

ZWSP = "\u200b"
KEPT_TYPES = ("text/plain", "image/png", "image/jpeg")
ENTITY_ROUNDS = 8
_TAG_START = re.compile(r"<(?=[A-Za-z/!?])")
_ENTITY = re.compile(r"&(?=#[0-9]|#[xX][0-9A-Fa-f]|[A-Za-z][A-Za-z0-9]*;)")
_ATTACHMENT = re.compile(r"attachment:([^\s()\"'<>]*)")
_SPACE = r"[\s\x00-\x1f]*"
_SCHEME = re.compile("|".join(_SPACE.join(word) for word in ("javascript", "vbscript"))
                     + rf"(?={_SPACE}\\?:)", re.IGNORECASE)  # fmt: skip
_CELL_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_BASE64 = re.compile(r"[A-Za-z0-9+/=\s]*")
_LANGUAGE_KEYS = ("name", "version", "pygments_lexer", "file_extension", "mimetype")
_KERNEL_KEYS = ("name", "display_name", "language")


def inert_text(text: Any) -> str:
    """Markdown (or raw) text that no renderer turns into markup, a script or a script URL."""
    text = "".join(map(str, text)) if isinstance(text, list) else str(text)
    for _ in range(ENTITY_ROUNDS):
        decoded = html.unescape(text)
        if decoded == text:
            break
        text = decoded
    text = _ENTITY.sub("&" + ZWSP, text)
    text = _SCHEME.sub(lambda m: m.group() + ZWSP, text)
    return _TAG_START.sub("<" + ZWSP, text)


def make_inert(nb: NotebookNode) -> list[str]:
    """Rewrite ``nb`` in place as data (see the module's docstring); return the kinds of
    what was removed (``text/html``, ``output type 'x'``, ``attachment``), each once."""
    removed: list[str] = []
    nb.metadata = notebook_node(_notebook_metadata(nb.get("metadata", {})))
    seen: set[str] = set()
    for cell in nb.cells:
        cell_id = str(cell.get("id", ""))
        if "id" in cell and (not _CELL_ID.fullmatch(cell_id) or cell_id in seen):
            cell["id"] = uuid.uuid4().hex[:8]
        seen.add(str(cell.get("id", "")))
        meta = cell.get("metadata", {})
        cell.metadata = notebook_node({"nbgrader": meta["nbgrader"]} if isinstance(meta, dict)
                                      and isinstance(meta.get("nbgrader"), dict) else {})  # fmt: skip
        if cell.get("cell_type") == "code":
            cell.source = _string(cell.get("source", ""))
            cell.execution_count = _count(cell.get("execution_count"))
            cell.outputs = [notebook_node(o) for o in (_output(o, removed) for o in cell.get("outputs", []))
                            if o is not None]  # fmt: skip
        else:  # markdown, raw, or a type nbgrader let through: shown as text either way
            cell.source = inert_text(cell.get("source", ""))
            kept = _attachments(cell.get("attachments", {}), removed)
            if "attachments" in cell:
                cell.attachments = notebook_node(kept)
            # nbconvert refuses a whole notebook whose markdown names a missing attachment
            cell.source = _unlink_missing(cell.source, set(kept))
    return sorted(set(removed))


def _unlink_missing(text: str, kept: set[str]) -> str:
    """``attachment:NAME`` of an attachment not kept, made plain text."""
    return _ATTACHMENT.sub(lambda m: m.group() if m.group(1) in kept
                           else f"attachment{ZWSP}:{m.group(1)}", text)  # fmt: skip


def _notebook_metadata(meta: Any) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    if not isinstance(meta, dict):
        return kept
    for key, names in (("kernelspec", _KERNEL_KEYS), ("language_info", _LANGUAGE_KEYS)):
        value = meta.get(key)
        if isinstance(value, dict):
            kept[key] = {k: value[k] for k in names if isinstance(value.get(k), str)}
    return kept


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _output(output: Any, removed: list[str]) -> dict[str, Any] | None:
    """One output as data, or None (an output type nbformat does not have)."""
    kind = output.get("output_type") if isinstance(output, dict) else None
    if kind == "stream":
        name = output.get("name")
        return {
            "output_type": "stream",
            "name": name if name in ("stdout", "stderr") else "stdout",
            "text": _string(output.get("text", "")),
        }
    if kind == "error":
        traceback = output.get("traceback", [])
        return {
            "output_type": "error",
            "ename": _string(output.get("ename", "")),
            "evalue": _string(output.get("evalue", "")),
            "traceback": [_string(line) for line in traceback] if isinstance(traceback, list) else [],
        }
    if kind not in ("execute_result", "display_data"):
        removed.append(f"output type {str(kind)[:40]!r}")
        return None
    data = output.get("data", {}) if isinstance(output.get("data"), dict) else {}
    kept: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    dropped = []
    for mime, value in data.items():
        mime = str(mime)
        if mime == "text/plain":
            kept[mime] = _string(value)
        elif mime in KEPT_TYPES and _image(value):
            kept[mime] = _string(value)
            size = _image_size(output.get("metadata", {}), mime)
            if size:
                metadata[mime] = size
        else:
            dropped.append(mime[:60])
    if dropped:
        removed += dropped
        note = f"[not shown: {', '.join(sorted(dropped))} (OUT keeps text and PNG/JPEG images only)]"
        kept["text/plain"] = f"{kept['text/plain']}\n{note}" if "text/plain" in kept else note
    result = {"output_type": kind, "data": kept, "metadata": metadata}
    if kind == "execute_result":
        result["execution_count"] = _count(output.get("execution_count"))
    return result


def _string(value: Any) -> str:
    return "".join(map(str, value)) if isinstance(value, list) else str(value)


def _image(value: Any) -> bool:
    """Base64 text that decodes: nbconvert puts it into ``src="data:...,{{ value }}"`` as it is."""
    text = _string(value)
    if not _BASE64.fullmatch(text):
        return False
    try:
        base64.b64decode("".join(text.split()), validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _image_size(meta: Any, mime: str) -> dict[str, int]:
    """An image's width and height when they are integers (nbconvert prints them as given)."""
    found = meta.get(mime, {}) if isinstance(meta, dict) else {}
    if not isinstance(found, dict):
        return {}
    return {
        k: found[k]
        for k in ("width", "height")
        if isinstance(found.get(k), int) and not isinstance(found.get(k), bool)
    }


def _attachments(attachments: Any, removed: list[str]) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    for name, bundle in attachments.items() if isinstance(attachments, dict) else []:
        safe = {m: _string(v) for m, v in (bundle.items() if isinstance(bundle, dict) else [])
                if m in ("image/png", "image/jpeg") and _image(v)}  # fmt: skip
        if len(safe) != (len(bundle) if isinstance(bundle, dict) else -1):
            removed.append("attachment")
        if safe and re.fullmatch(r"[\w.-]{1,100}", str(name)):
            kept[str(name)] = safe
    return kept
