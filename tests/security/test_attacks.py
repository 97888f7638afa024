"""Attacks on the autograder by a student who has read its source (see SECURITY.md).

One class of chapter 3 submissions is graded per identity: the grader as root (a container,
CI) and as an ordinary user (uid 65534 via setpriv, as on a JupyterHub). Every attack sits
in the ``softmax_jacobian`` solution cell of an otherwise correct notebook and defines the
correct function only if the attack FAILED (else a function that raises with what it got),
so the attacker's score says whether a rule held, and the message says what leaked. Honest
classmates graded in the same run must keep their exact scores; the run must exit 0 and
leave nothing running.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import socket
import subprocess
import tempfile
import textwrap
from pathlib import Path

import nbformat
import pytest

import grader
from grader.paths import SOLUTIONS
from tests.notebook_runner import learner_notebook, solved_notebook, with_cell
from tests.security.grade_as import grade_class_as

pytestmark = [
    pytest.mark.security,
    pytest.mark.grading,
    pytest.mark.slow,
    pytest.mark.xdist_group("security"),
]

A = "03_scaled_dot_product"
FULL = 10.0
JACOBIAN_POINTS = 2.0
SECRET = "s3cret-token-of-the-instructor"
MARKER = "4242.4242"  # an argument of `sleep` that only escapee attacks use
JACOBIAN = "def softmax_jacobian(p):\n    return np.diag(p) - np.outer(p, p)\n"

IDENTITIES = ["root", "user"] if os.getuid() == 0 else ["user"]


def _probe(body: str) -> str:
    """A solution cell that runs ``body`` (which appends to ``leaks``), then defines the answer."""
    return (
        "import os, sys, glob, json, signal, socket, resource, subprocess\n"
        "leaks = []\n" + textwrap.dedent(body) + "\nif leaks:\n"
        "    def softmax_jacobian(p, _leaks=tuple(leaks)):\n"
        "        raise RuntimeError('ATTACK WORKED: ' + '; '.join(_leaks))\n"
        "else:\n"
        "    " + JACOBIAN.replace("\n    ", "\n        ")
    )


def _confinement_attacks(paths: dict[str, str], port: int) -> dict[str, str]:
    """Attacks on what the child can see and reach: secrets, files to write, the network."""
    readable = json.dumps(
        [paths[k] for k in ("solutions", "source", "out", "victim_notebook", "grader", "submitted")]
    )
    writable = json.dumps(
        [
            paths["out"] + "/grades.csv",
            paths["out"] + "/gradebook.db",
            paths["victim_results"],
            paths["source"] + "/" + A + "/" + A + ".ipynb",
            paths["grader"] + "/checks.py",
            os.path.dirname(np_file()) + "/__init__.py",
            "/etc/passwd",
            "/usr/lib/evil",
        ]
    )
    return {
        "read_secrets": _probe(f"""
            for path in {readable}:
                if os.path.exists(path):
                    leaks.append('sees ' + path)
            for path in glob.glob('/tmp/attention-grading-*') + glob.glob('/tmp/pytest-of-*'):
                leaks.append('sees the grader work folder ' + path)
            if {SECRET!r} in json.dumps(dict(os.environ)):
                leaks.append('environment')
            try:
                if {SECRET!r} in open('/proc/self/environ').read():
                    leaks.append('initial environment')
            except OSError:
                pass
            for pid in [p for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()]:
                try:
                    cmd = open(f'/proc/{{pid}}/cmdline').read()
                except OSError:
                    continue
                if 'grader' in cmd or 'pytest' in cmd:
                    leaks.append('sees process ' + pid + ' ' + cmd[:60])
            for name in ('grader.reference', 'grader.exercises', 'grader.checks'):
                try:
                    __import__(name)
                    leaks.append('imported ' + name)
                except ImportError:
                    pass
        """),
        "write_everywhere": _probe(f"""
            for path in {writable}:
                try:
                    with open(path, 'a') as handle:
                        handle.write('x')
                    leaks.append('wrote ' + path)
                except OSError:
                    pass
        """),
        "network": _probe(f"""
            for host in ('127.0.0.1', 'localhost'):
                try:
                    socket.create_connection((host, {port}), timeout=2).close()
                    leaks.append('connected to ' + host)
                except OSError:
                    pass
        """),
    }


def _process_attacks() -> dict[str, str]:
    """Attacks on the child's own privileges and limits, and processes that try to outlive it."""
    return {
        "privileges": _probe("""
            for kind in (resource.RLIMIT_AS, resource.RLIMIT_CPU, resource.RLIMIT_NPROC,
                         resource.RLIMIT_FSIZE, resource.RLIMIT_CORE):
                soft, hard = resource.getrlimit(kind)
                if soft != hard:
                    leaks.append(f'limit {kind} soft {soft} < hard {hard}')
                try:
                    resource.setrlimit(kind, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
                    leaks.append(f'raised limit {kind}')
                except (ValueError, OSError):
                    pass
            status = open('/proc/self/status').read()
            if 'NoNewPrivs:\\t1' not in status:
                leaks.append('no_new_privs is off')
            if 'CapEff:\\t0000000000000000' not in status:
                leaks.append('has capabilities')
            if os.getuid() == 0:
                leaks.append('runs as uid 0')
            for sig_target in (-1, 0, os.getppid()):
                try:
                    os.kill(sig_target, signal.SIGKILL)
                except (OSError, ProcessLookupError):
                    pass
            pids = [p for p in os.listdir('/proc') if p.isdigit()]
            if len(pids) > 3:
                leaks.append(f'sees {len(pids)} processes')
        """),
        "escapee": _probe(f"""
            subprocess.Popen(['setsid', 'sh', '-c', '(sleep {MARKER} &) ; sleep {MARKER}'],
                             start_new_session=True)
            pid = os.fork()
            if pid == 0:
                os.setsid()
                if os.fork() == 0:
                    os.execvp('sleep', ['sleep', '{MARKER}'])
                os._exit(0)
            os.waitpid(pid, 0)
        """),
    }


def _resource_attacks() -> dict[str, str]:
    """Attacks on the run itself: stalling it, filling the disk, flooding the report."""
    return {
        "stall_stop": "import os, signal\nos.kill(os.getpid(), signal.SIGSTOP)\n" + JACOBIAN,
        "stall_sleep": "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "time.sleep(10**6)\n" + JACOBIAN,
        "fill_disk": _probe("""
            written = 0
            for folder in ('.', '/tmp', '/dev/shm'):
                for k in range(400):  # 400 MB per folder if nothing stopped it
                    try:
                        with open(f'{folder}/fill{k}.bin', 'wb') as handle:
                            handle.write(bytes(2**20))
                        written += 1
                    except OSError:
                        break
            if written > 3 * 70:
                leaks.append(f'wrote {written} MB')
            for folder in ('.', '/tmp', '/dev/shm'):
                for name in glob.glob(folder + '/fill*.bin'):
                    os.remove(name)
        """),
        "long_error": "def softmax_jacobian(p):\n    raise ValueError('x' * 10**6)\n",
    }


def _attacks(paths: dict[str, str], port: int) -> dict[str, str]:
    """Student name -> the softmax_jacobian cell of that attack."""
    return {
        **_confinement_attacks(paths, port),
        **_process_attacks(),
        **_resource_attacks(),
        "hidden_tests": (
            "import inspect\n"
            "def softmax_jacobian(p):\n"
            "    seen = []\n"
            "    for frame in inspect.stack():\n"
            "        seen += frame.code_context or []\n"
            "        try:\n"
            "            seen.append(inspect.getsource(frame.frame))\n"
            "        except (OSError, TypeError):\n"
            "            pass\n"
            "    ns = get_ipython().user_ns\n"
            "    seen += [str(x) for x in ns.get('In', [])] + [str(x) for x in ns.get('_ih', [])]\n"
            "    seen += [str(x) for x in get_ipython().history_manager.input_hist_raw]\n"
            "    needle = 'check(' + '\"softmax_jacobian\"'  # not in this cell's own text\n"
            "    if any(needle in s for s in seen):\n"
            "        raise RuntimeError('ATTACK WORKED: read a test cell')\n"
            "    return np.diag(p) - np.outer(p, p)\n"
        ),
    }


def np_file() -> str:
    import numpy

    return numpy.__file__


STUB_ATTACKS = {
    # the stubbed notebook, with one solution cell that tries to forge points
    "forge_report": (
        "import os, json, base64\n"
        "fake = {'dtype': '<f8', 'shape': [4, 4], 'data': base64.b64encode(bytes(128)).decode()}\n"
        "huge = {'dtype': '<f8', 'shape': [100000, 100000], 'data': 'AAAA'}\n"
        "for index in range(60):\n"
        "    line = {'index': index, 'outputs': [], 'records': [\n"
        "        {'exercise': 'softmax_jacobian', 'seed': s, 'params': {}, 'error': '',\n"
        "         'arrays': {'jacobian': fake, 'output': huge}} for s in range(40)]}\n"
        "    os.write(3, (json.dumps(line) + '\\n').encode())\n"
        '    os.write(1, b\'{"event": "exited", "id": "j1", "code": 0, "timed_out": false}\\n\')\n'
        "def softmax_jacobian(p):\n"
        "    raise NotImplementedError\n"
    ),
    "fake_display": (
        "import attention_learner.checks as checks_module\n"
        "from IPython.display import display\n"
        "checks_module.check = lambda *a, **k: 2.0\n"
        "check = checks_module.check\n"
        "get_ipython().display_formatter.formatters['text/plain'].for_type(type(None), lambda *a: '2.0')\n"
        "def softmax_jacobian(p):\n"
        "    display(2.0)\n"
        "    return 2.0\n"
    ),
}


def _write_folder_attacks(submitted: Path, solved: nbformat.NotebookNode) -> None:
    """Submissions that attack through their folders: symlinks (to a classmate's notebook, to
    a secret beside the notebook, a whole student folder) and student ids that are not names."""
    (submitted / "linker" / A).mkdir(parents=True)
    os.symlink(submitted / "correct" / A / f"{A}.ipynb", submitted / "linker" / A / f"{A}.ipynb")
    (submitted / "data_linker" / A).mkdir(parents=True)
    nbformat.write(
        with_cell(
            solved,
            "softmax_jacobian",
            _probe("""
        for name in ('secret_link', 'solutions_link'):
            if os.path.lexists(name):
                leaks.append('found ' + name)
    """),
        ),
        submitted / "data_linker" / A / f"{A}.ipynb",
    )
    os.symlink("/etc/hostname", submitted / "data_linker" / A / "secret_link")
    os.symlink(str(SOLUTIONS), submitted / "data_linker" / A / "solutions_link")
    os.symlink(submitted / "correct", submitted / "alias")
    for bad in ("grades.csv", ".hidden", "colon:id"):
        (submitted / bad / A).mkdir(parents=True)
        nbformat.write(solved, submitted / bad / A / f"{A}.ipynb")


@pytest.fixture(scope="module", params=IDENTITIES)
def graded(request):
    identity = request.param
    root = Path(tempfile.mkdtemp(prefix="attention-security-"))
    os.chmod(root, 0o755)
    source = root / "source"
    shutil.copytree(SOLUTIONS / A, source / A)
    submitted, out = root / "submitted", root / "out"
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    paths = {
        "solutions": str(SOLUTIONS),
        "source": str(source),
        "out": str(out),
        "submitted": str(submitted),
        "grader": str(Path(grader.__file__).parent),
        "victim_notebook": str(submitted / "correct" / A / f"{A}.ipynb"),
        "victim_results": str(out / "correct" / A / "results.json"),
    }
    solved, stub = solved_notebook(A), learner_notebook(A)
    notebooks = {"correct": solved, "stub": stub}
    notebooks.update(
        {name: with_cell(solved, "softmax_jacobian", code) for name, code in _attacks(paths, port).items()}
    )
    notebooks.update({name: with_cell(stub, "softmax_jacobian", code) for name, code in STUB_ATTACKS.items()})
    for student, nb in notebooks.items():
        (submitted / student / A).mkdir(parents=True)
        nbformat.write(nb, submitted / student / A / f"{A}.ipynb")
    _write_folder_attacks(submitted, solved)
    try:
        run = grade_class_as(identity, root, 20, 900, env=dict(os.environ, ATTENTION_INSTRUCTOR_TOKEN=SECRET))
        ps = subprocess.run(["ps", "-eo", "pid,ppid,uid,args"], capture_output=True, text=True).stdout
        yield {"identity": identity, "root": root, "out": out, "run": run, "ps": ps, "submitted": submitted}
    finally:
        listener.close()
        shutil.rmtree(root, ignore_errors=True)


def result(graded, student) -> dict:
    return json.loads((graded["out"] / student / A / "results.json").read_text())


def jacobian(res) -> dict:
    return next(t for t in res["tests"] if t["grade_id"] == "test_softmax_jacobian")


def test_the_run_finishes_and_classmates_keep_their_scores(graded):
    assert graded["run"].returncode == 0, graded["run"].stderr[-3000:]
    assert result(graded, "correct")["score"] == FULL
    assert result(graded, "stub")["score"] == 0
    assert result(graded, "correct")["isolation"] == "namespaces"


ATTACKERS = [
    "read_secrets",
    "write_everywhere",
    "network",
    "privileges",
    "escapee",
    "hidden_tests",
    "data_linker",
    "fill_disk",
]


@pytest.mark.parametrize("student", ATTACKERS)
def test_attack_gains_nothing(graded, student):
    """The attack failed: the correct function was defined and passed (nothing leaked)."""
    res = result(graded, student)
    test = jacobian(res)
    assert test["points"] == JACOBIAN_POINTS, test["message"]
    lost = [(t["grade_id"], t["points"], t.get("message", "")[:300]) for t in res["tests"]]
    assert res["score"] == FULL, lost


def leftovers(ps: str, job_uid: str = "65534") -> list[str]:
    """The ``ps -eo pid,ppid,uid,args`` lines of processes with the jobs' identity that no
    live grading run owns.

    Other tests grade at the same time (pytest-xdist), and their jobs run as uid 65534 too:
    those descend from their run's fork server, alive and running as root. A process this
    run left behind has no such ancestor: its own fork server has exited, so it was
    reparented to init.
    """
    rows = {}
    for line in ps.splitlines()[1:]:
        pid, ppid, uid, args = (line.split(None, 3) + [""])[:4]
        rows[pid] = (ppid, uid, args)

    def owned_by_a_live_run(pid: str) -> bool:
        seen = set()
        while pid in rows and pid not in seen:
            seen.add(pid)
            ppid, uid, args = rows[pid]
            if uid != job_uid and "grader.autograde.sandbox" in args:
                return True
            pid = ppid
        return False

    return [f"{pid} {ppid} {uid} {args}" for pid, (ppid, uid, args) in rows.items()
            if uid == job_uid and not owned_by_a_live_run(pid)]  # fmt: skip


def test_nothing_is_left_running(graded):
    """No escapee, and no process of the jobs' identity (uid 65534 either way) survives the run."""
    assert MARKER not in graded["ps"]
    assert not leftovers(graded["ps"])


def test_leftover_detection_ignores_other_runs_only():
    """The filter above: a job under another run's live (root) fork server is not ours; the
    same process reparented to init is."""
    ps = (
        "  PID  PPID   UID ARGS\n"
        "    1     0     0 /sbin/init\n"
        "  100     1     0 python -m grader.autograde.sandbox\n"
        "  200   100 65534 python -m grader.autograde.sandbox\n"
        "  201   200 65534 python -c learner_code\n"
        "  300     1 65534 python -m grader.autograde.sandbox\n"
    )
    assert leftovers(ps) == ["300 1 65534 python -m grader.autograde.sandbox"]


def test_a_sleeping_child_is_killed_at_the_time_limit(graded):
    res = result(graded, "stall_sleep")
    assert res["status"] == "timeout", res
    assert res["score"] == FULL - JACOBIAN_POINTS  # tests before the stall keep their points


def test_a_child_cannot_stop_itself_to_stall_the_run(graded):
    """SIGSTOP to itself: PID 1 of its namespace ignores it (or the limit would kill it)."""
    res = result(graded, "stall_stop")
    assert (res["status"], res["score"]) in (("graded", FULL), ("timeout", FULL - JACOBIAN_POINTS))


@pytest.mark.parametrize("student", list(STUB_ATTACKS))
def test_forged_reports_and_displays_earn_nothing(graded, student):
    res = result(graded, student)
    assert res["score"] == 0, res
    assert res["status"] in ("graded", "crashed")


def test_echoed_exception_text_is_bounded(graded):
    res = result(graded, "long_error")
    assert res["score"] == FULL - JACOBIAN_POINTS
    assert 100 < len(jacobian(res)["message"]) <= 2_500
    feedback = (graded["out"] / "long_error" / A / "feedback.html").read_text()
    assert len(feedback) < 50_000


def test_symlinks_are_not_followed(graded):
    linker = result(graded, "linker")
    assert linker["status"] == "invalid" and linker["score"] == 0
    assert "symlink" in " ".join(linker["notes"]) + linker["message"]
    alias = result(graded, "alias")
    assert alias["status"] == "invalid" and "symlink" in alias["message"]


def test_bad_student_ids_get_an_invalid_row(graded):
    with open(graded["out"] / "grades.csv", newline="") as handle:
        rows = {r["student_id"]: r for r in csv.DictReader(handle)}
    for bad in ("grades.csv", ".hidden", "colon:id"):
        assert rows[bad]["status"] == "invalid", rows[bad]
    assert (graded["out"] / "grades.csv").is_file()
    assert not (graded["out"] / ".hidden").exists()
    assert rows["correct"]["status"] == "graded"
