"""The Jupyter server behind ``python -m grader formgrader OUT``: formgrader's grading pages, nothing else.

``python -m grader.formgrader_server --ServerApp.root_dir=OUT ...`` (``grader/formgrader.py``
starts it). What a student wrote is in OUT as data already (``autograde/inert_notebook.py``);
this server is the second line, so that a notebook which still held markup could neither run
a script in the instructor's browser nor reach anything through the server:

- **No Jupyter services** but login: no contents, ``/files/``, kernels, sessions, terminals,
  nbconvert, config or shutdown API, no JupyterLab or Notebook pages (only this module is
  loaded as an extension; the ones installed beside it and those of the instructor's Jupyter
  configuration are not). Nothing over HTTP writes into OUT but nbgrader's gradebook and
  feedback handlers.
- **Only the nbgrader routes manual grading needs** (:data:`ROUTES`, each with its methods):
  the pages, the gradebook's read API, grades, comments and flags (PUT/POST), and generating
  and releasing feedback. Left out: autograde (it would run a learner's code unconfined),
  assign/release/collect/unrelease, editing assignments and students, the files of a
  submission's folder, and ``/formgrader?path=...``, which would load an ``nbgrader_config.py``
  from any folder named in a link.
- **A Content-Security-Policy on every response** (:class:`PolicyTransform`): scripts from
  this server only, plus the inline scripts of nbgrader's own templates, each allowed by its
  SHA-256 when it is one of them (:func:`allowed_script`): the fixed ones verbatim, the
  ones that set page variables only with plain values. No other inline script, event handler
  or ``javascript:`` URL runs; images only from ``data:``; no frames, plugins or forms
  elsewhere. nbgrader's pages keep working (``tests/security/test_formgrader_hostile.py``);
  MathJax from its CDN does not load, so formulas show as TeX.
"""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path
from typing import Any

from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.serverapp import ServerApp
from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager
from jupyter_server.utils import url_path_join
from tornado import web

EXTENSION = "grader.formgrader_server"
GET, READ = ("GET",), ("GET", "HEAD")
# nbgrader's route pattern -> the methods kept (a route missing here is not served)
ROUTES: dict[str, tuple[str, ...]] = {
    r"/formgrader/manage_assignments/?": GET,
    r"/formgrader/manage_submissions/([^/]+)/?": GET,
    r"/formgrader/gradebook/?": GET,
    r"/formgrader/gradebook/([^/]+)/?": GET,
    r"/formgrader/gradebook/([^/]+)/([^/]+)/?": GET,
    r"/formgrader/manage_students/?": GET,
    r"/formgrader/manage_students/([^/]+)/?": GET,
    r"/formgrader/manage_students/([^/]+)/([^/]+)/?": GET,
    r"/formgrader/submissions/components/(.*)": READ,
    r"/formgrader/submissions/([^/]+)/?": GET,
    r"/formgrader/fonts/(.*)": READ,
    r"/formgrader/api/status": GET,
    r"/formgrader/api/assignments": GET,
    r"/formgrader/api/assignment/([^/]+)": GET,
    r"/formgrader/api/assignment/([^/]+)/generate_feedback": ("POST",),
    r"/formgrader/api/assignment/([^/]+)/release_feedback": ("POST",),
    r"/formgrader/api/assignment/([^/]+)/([^/]+)/generate_feedback": ("POST",),
    r"/formgrader/api/assignment/([^/]+)/([^/]+)/release_feedback": ("POST",),
    r"/formgrader/api/notebooks/([^/]+)": GET,
    r"/formgrader/api/submissions/([^/]+)": GET,
    r"/formgrader/api/submission/([^/]+)/([^/]+)": GET,
    r"/formgrader/api/submitted_notebooks/([^/]+)/([^/]+)": GET,
    r"/formgrader/api/submitted_notebook/([^/]+)/flag": ("POST",),
    r"/formgrader/api/grades": GET,
    r"/formgrader/api/grade/([^/]+)": ("GET", "PUT"),
    r"/formgrader/api/comments": GET,
    r"/formgrader/api/comment/([^/]+)": ("GET", "PUT"),
    r"/formgrader/api/students": GET,
    r"/formgrader/api/student/([^/]+)": GET,
    r"/formgrader/api/student_submissions/([^/]+)": GET,
    r"/formgrader/api/student_notebook_submissions/([^/]+)/([^/]+)": GET,
}
_NAVIGATION = "/formgrader/submissions/(?P<submission_id>[^/]+)/"  # prev/next: a redirect, kept
_SCRIPT = re.compile(rb"<script\b([^>]*)>(.*?)</script\s*>", re.S | re.I)
# a script of nbgrader's templates that only sets page variables: var name = "plain value";
_VARIABLES = re.compile(r'\s*(?:var [A-Za-z_]+ = "[A-Za-z0-9_./:+ -]*";\s*)+')
_HANDLER = re.compile(rb'\son[a-zA-Z]+="([^"{}]*)"')
# formgrade.js waits for MathJax 2, which nbconvert's template loads from a CDN: a local
# stand-in with the calls formgrade.js makes, which typesets nothing (formulas stay TeX)
_MATHJAX_CDN = re.compile(rb'src="https://cdnjs\.cloudflare\.com/ajax/libs/mathjax/[^"]*"')
MATHJAX_SHIM = (
    "window.MathJax = {Hub: {Config: function () {}, Queue: function () {},\n"
    "  Startup: {signal: {Interest: function (f) {\n"
    "    setTimeout(function () { f('End'); }, 0); }}}}};\n"
)
_state = {"shim": "/formgrader/guard/mathjax.js"}


def _template_inline_code() -> tuple[frozenset[str], frozenset[str]]:
    """The inline scripts and the event-handler attributes of nbgrader's templates that hold
    no template variable, verbatim."""
    from nbgrader.server_extensions.formgrader import handlers

    scripts: set[str] = set()
    attributes: set[str] = set()
    for template in Path(handlers.template_path).rglob("*"):
        if template.suffix in (".tpl", ".j2"):
            text = template.read_bytes()
            for _attrs, body in _SCRIPT.findall(text):
                code = body.decode("utf-8")
                if "{{" not in code and "{%" not in code and code.strip():
                    scripts.add(code)
            attributes.update(code.decode("utf-8") for code in _HANDLER.findall(text))
    return frozenset(scripts), frozenset(attributes)


FIXED, _HANDLERS = _template_inline_code()


def allowed_script(text: str) -> bool:
    """Whether an inline script of a response is one of nbgrader's own."""
    return text in FIXED or bool(_VARIABLES.fullmatch(text))


def _sha256(text: bytes) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text).digest()).decode() + "'"


def policy(body: bytes) -> str:
    """The Content-Security-Policy of a response whose (whole) body is ``body``."""
    allowed = []
    for attrs, script in _SCRIPT.findall(body):
        if b"src=" not in attrs.lower() and allowed_script(script.decode("utf-8", "replace")):
            allowed.append(_sha256(script))
    hashes = " ".join(sorted(set(allowed)) + sorted(_sha256(h.encode()) for h in _HANDLERS))
    return (
        "default-src 'none'; "
        f"script-src 'self' 'unsafe-hashes' {hashes}; "
        "style-src 'self' 'unsafe-inline'; img-src data:; font-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'; "
        "object-src 'none'; frame-src 'none'; worker-src 'none'; manifest-src 'none'"
    )


class PolicyTransform(web.OutputTransform):
    """Sets the policy (and a few headers that go with it) on every response of the server.

    A body sent in several chunks gets the policy of its first, which allows fewer scripts,
    never more: nbgrader writes its pages in one. ``Cache-Control: no-store`` keeps every
    page from being revalidated (a 304 has no body to hash)."""

    def transform_first_chunk(self, status_code: int, headers: Any, chunk: bytes,
                              finishing: bool) -> tuple[int, Any, bytes]:  # fmt: skip
        html = "html" in headers.get("Content-Type", "") and finishing
        if html and _MATHJAX_CDN.search(chunk):
            chunk = _MATHJAX_CDN.sub(f'src="{_state["shim"]}"'.encode(), chunk)
            if "Content-Length" in headers:
                headers["Content-Length"] = str(len(chunk))
        headers["Content-Security-Policy"] = policy(chunk if html else b"")
        headers["X-Content-Type-Options"] = "nosniff"
        headers["X-Frame-Options"] = "DENY"
        headers["Referrer-Policy"] = "no-referrer"
        headers["Cross-Origin-Opener-Policy"] = "same-origin"
        # never stored: a revalidated copy (304) would take the policy of an empty body, and
        # the gradebook's pages stay out of the browser's disk cache
        headers["Cache-Control"] = "no-store"
        return status_code, headers, chunk


class FormgraderHome(JupyterHandler):
    """``/formgrader``: to Manage Assignments (nbgrader's handler also took ``?path=``)."""

    @web.authenticated
    def get(self) -> None:
        self.redirect(url_path_join(self.base_url, "formgrader", "manage_assignments"))


class MathJaxShim(JupyterHandler):
    """:data:`MATHJAX_SHIM`, as a script of this server."""

    def get(self) -> None:
        self.set_header("Content-Type", "application/javascript; charset=UTF-8")
        self.finish(MATHJAX_SHIM)


def _limited(handler: type, methods: tuple[str, ...]) -> type:
    """``handler`` answering only ``methods`` (tornado gives 405 for the others)."""
    return type(handler.__name__, (handler,), {"SUPPORTED_METHODS": methods})


def kept_routes(routes: list[tuple]) -> list[tuple]:
    """nbgrader's routes that :data:`ROUTES` keeps, each limited to its methods."""
    kept = []
    for route in routes:
        pattern, handler, *rest = route
        if pattern in ROUTES:
            kept.append((pattern, _limited(handler, ROUTES[pattern]), *rest))
        elif pattern.startswith(_NAVIGATION):
            kept.append((pattern, _limited(handler, GET), *rest))
    missing = set(ROUTES) - {route[0] for route in kept}
    if missing:  # a newer nbgrader renamed a route: its page would break without saying why
        raise RuntimeError(f"nbgrader has none of these formgrader routes: {sorted(missing)}")
    return kept


def _gradebook_api() -> type:
    """nbgrader's API with the gradebook's graded submissions counted as submitted.

    nbgrader counts a submission by its folder in ``submitted/`` and its time by that folder's
    ``timestamp.txt``; OUT has no ``submitted/`` (its autograde button would run a learner's
    code unconfined), so "# Submissions" read 0 and the feedback buttons, shown only when it
    is above 0, were missing. Here a submission is also one the gradebook holds with a folder
    in ``autograded/``, and its time the gradebook's: formgrader then counts what was graded
    and still lists each submission as autograded (its two timestamps agree)."""
    from nbgrader.api import Assignment, Student, SubmittedAssignment
    from nbgrader.apps.api import NbGraderAPI

    class GradebookSubmissions(NbGraderAPI):
        def _graded(self, assignment_id: str) -> dict[tuple[str, str], Any]:
            with self.gradebook as gb:
                query = gb.db.query(Student.id, Assignment.name, SubmittedAssignment.timestamp)
                query = query.select_from(SubmittedAssignment).join(SubmittedAssignment.student)
                query = query.join(SubmittedAssignment.assignment)
                if assignment_id != "*":
                    query = query.filter(Assignment.name == assignment_id)
                rows = query.all()
            folder = self.coursedir.autograded_directory
            return {(student, name): stamp for student, name, stamp in rows
                    if Path(self.coursedir.format_path(folder, student, name)).is_dir()}  # fmt: skip

        def get_source_assignments(self) -> set[str]:
            """The assignments handed out: released into the exchange, or with a graded
            submission (OUT/source/ holds every assignment a watcher prepared)."""
            handed_out = self.get_released_assignments()
            handed_out |= {name for _student, name in self._graded("*")}
            return super().get_source_assignments() & handed_out

        def get_submitted_students(self, assignment_id: str) -> set[str]:
            graded = {student for student, _name in self._graded(assignment_id)}
            return super().get_submitted_students(assignment_id) | graded

        def get_submitted_timestamp(self, assignment_id: str, student_id: str) -> Any:
            claimed = super().get_submitted_timestamp(assignment_id, student_id)
            if claimed is not None:
                return claimed
            return self._graded(assignment_id).get((student_id, assignment_id))

    return GradebookSubmissions


def _load_jupyter_server_extension(serverapp: ServerApp) -> None:
    """nbgrader's formgrader (as its own loader sets it up) with :func:`kept_routes` only."""
    from nbgrader.server_extensions.formgrader import apihandlers, base, handlers
    from nbgrader.server_extensions.formgrader.formgrader import FormgradeExtension

    base.NbGraderAPI = _gradebook_api()  # every handler's self.api (base.BaseHandler.api)

    webapp = serverapp.web_app
    webapp.transforms.insert(0, PolicyTransform)
    formgrader = FormgradeExtension(parent=serverapp)
    formgrader.root_dir = serverapp.root_dir
    formgrader.log = serverapp.log
    formgrader.initialize([])
    formgrader.init_tornado_settings(webapp)
    static = _limited(web.StaticFileHandler, READ)
    routes = [(r"/formgrader/?", FormgraderHome), (r"/formgrader/guard/mathjax.js", MathJaxShim),
              *kept_routes(handlers.default_handlers + apihandlers.default_handlers),
              (r"/formgrader/static/(.*)", static, {"path": handlers.static_path}),
              (r"/formgrader/.*", handlers.Template404)]  # fmt: skip
    base = webapp.settings["base_url"]
    _state["shim"] = url_path_join(base, "formgrader/guard/mathjax.js")
    webapp.add_handlers(".*$", [(url_path_join(base, r[0].lstrip("/")), *r[1:]) for r in routes])


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": EXTENSION}]


class ReadOnlyContents(AsyncLargeFileManager):
    """OUT through Jupyter's contents manager: no ``/files/`` route (it would serve the
    gradebook and the source's hidden tests) and no write (no route of this server asks for
    one; a refusal if one ever did)."""

    def get_extra_handlers(self) -> list:
        return []

    async def save(self, model: dict, path: str = "") -> dict:
        raise web.HTTPError(403, "formgrader serves OUT read-only")

    async def delete_file(self, path: str) -> None:
        raise web.HTTPError(403, "formgrader serves OUT read-only")

    async def rename_file(self, old_path: str, new_path: str) -> None:
        raise web.HTTPError(403, "formgrader serves OUT read-only")


class FormgraderServer(ServerApp):
    """A ServerApp with login as its only service and this module as its only extension."""

    name = "grader-formgrader"
    # jupyter_server leaves its own unannotated, so its 13 names type it as a 13-tuple
    default_services = ("auth",)  # type: ignore[assignment]

    def find_server_extensions(self) -> None:
        self.jpserver_extensions = {EXTENSION: True}

    def init_server_extensions(self) -> None:
        self.jpserver_extensions = {EXTENSION: True}
        self.terminals_enabled = False
        self.contents_manager_class = ReadOnlyContents
        self.allow_origin, self.allow_origin_pat = "", ""
        self.disable_check_xsrf = False
        super().init_server_extensions()


main = FormgraderServer.launch_instance

if __name__ == "__main__":
    main()
