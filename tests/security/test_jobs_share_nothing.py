"""Attacks that pass state from one grading job to another, and a memory budget split over processes.

Each runs as the grader runs it, once as root and once as uid 65534 (``setpriv``). As root a
job is uid 65534 with no user namespace of its own, so whatever the kernel keeps per uid is
shared by every root-mode job unless the job may not reach it:

- kernel keyrings: job 1 stores a function's source with ``add_key`` (user, user-session
  and session keyrings, and linked into the persistent keyring with ``keyctl``); job 2, of
  another submission, searches every keyring for it and finds nothing; after the grader has
  ended, no such key is left for uid 65534;
- the other routes: SysV message queues, semaphores and shared memory, POSIX message queues,
  files in ``/tmp``, ``/dev/shm`` and the home are not seen by the next job; the calls a
  notebook never needs (inotify, fanotify, userfaultfd, bpf, perf_event_open, ptrace,
  process_vm_readv, kcmp, pidfd_getfd, personality, unshare, a clone into a new user
  namespace) are refused with an error, not a kill; no pid outside the job can be named;
- chapter 7's memory budget binds every process of the job: a solution cell starts a helper
  process that waits, and when the budgeted test cell calls the function it computes the
  whole (n_q, n_k) matrix (512 MiB) and sends the answer back through a pipe. Graded end to
  end with ``python -m grader autograde``, it earns nothing on the memory case, while an
  honest chapter 7 notebook keeps every point.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import uuid
from pathlib import Path

import nbformat
import pytest

from grader.paths import SOLUTIONS
from tests import interpreter_access
from tests.notebook_runner import solved_notebook, with_cell
from tests.security.grade_as import grade_class_as, identity_prefix
from tests.security.test_resources_round2 import _results, run_jobs

pytestmark = [
    pytest.mark.security,
    pytest.mark.grading,
    pytest.mark.slow,
    pytest.mark.xdist_group("security"),
]

ROOT = Path(__file__).resolve().parents[2]
IDENTITIES = ["root", "user"] if os.getuid() == 0 else ["user"]
CH07 = "07_attention_at_scale"
KEY_CALLS = {"x86_64": (248, 249, 250), "aarch64": (217, 218, 219)}  # add_key, request_key, keyctl


@pytest.fixture(scope="module", autouse=True)
def _python_reachable():
    interpreter_access.hold()


KEYRING_HELPERS = """
import ctypes, json, os, platform
libc = ctypes.CDLL(None, use_errno=True)
ADD_KEY, REQUEST_KEY, KEYCTL = {calls}[platform.machine()]
RINGS = {{"session": -3, "user": -4, "user_session": -5}}
GET_PERSISTENT, LINK, SEARCH, READ = 22, 8, 10, 11
NAME = {name!r}

def syscall(*args):
    args = [ctypes.c_long(a) if isinstance(a, int) else a for a in args]
    result = libc.syscall(*args)
    return result if result >= 0 else -ctypes.get_errno()

def persistent():
    return syscall(KEYCTL, GET_PERSISTENT, -1, -2)  # linked into the process keyring

def find_all():
    found = {{}}
    rings = dict(RINGS, persistent=persistent())
    for where, ring in rings.items():
        key = syscall(KEYCTL, SEARCH, ring, b"user", (NAME + where).encode(), 0) \
            if where in RINGS or ring > 0 else ring
        if key < 0:
            key = syscall(REQUEST_KEY, b"user", (NAME + where).encode(), None, 0)
        text = ""
        if key > 0:
            buffer = ctypes.create_string_buffer(4096)
            size = syscall(KEYCTL, READ, key, buffer, 4096)
            text = buffer.raw[:max(size, 0)].decode(errors="replace")
        found[where] = {{"key": key, "text": text}}
    return found
"""

STORE_KEYS = """
SOURCE = b"def scaled_dot_product_attention(Q, K, V, mask=None): ..."
stored = {}
for where, ring in RINGS.items():
    stored[where] = syscall(ADD_KEY, b"user", (NAME + where).encode(), SOURCE, len(SOURCE), ring)
ring = persistent()
stored["persistent_ring"] = ring
if ring > 0:
    key = syscall(ADD_KEY, b"user", (NAME + "persistent").encode(), SOURCE, len(SOURCE), -2)
    stored["persistent"] = syscall(KEYCTL, LINK, key, ring) if key > 0 else key
print(json.dumps({"stored": stored, "found_here": find_all()}))
"""

FIND_KEYS = """
print(json.dumps({"found": find_all()}))
"""


def _keyring_script(name: str, body: str) -> str:
    return KEYRING_HELPERS.format(calls=KEY_CALLS, name=name) + body


def _as_nobody() -> list[str]:
    """uid 65534 itself, whichever identity ran the grader (as root, its jobs ran as 65534)."""
    return identity_prefix("user")


@pytest.fixture(scope="module", params=IDENTITIES)
def keyring_run(request):
    if os.uname().machine not in KEY_CALLS:
        pytest.skip("the key calls' numbers are known for x86_64 and aarch64 only")
    name = f"attention-{uuid.uuid4().hex[:12]}-"
    store, find = _keyring_script(name, STORE_KEYS), _keyring_script(name, FIND_KEYS)
    run = run_jobs(request.param, [[store], [find]], limits={"timeout": 60})
    # the grader has ended: look for the keys as uid 65534 itself, outside any job
    after = subprocess.run(
        [*_as_nobody(), sys.executable, "-c", find], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    return request.param, run, after, name


def test_a_key_stored_by_one_job_is_not_found_by_the_next(keyring_run):
    identity, run, _, name = keyring_run
    assert run["isolation"] == "namespaces", run
    first, second = run["jobs"]
    assert first["exitcode"] == 0 and second["exitcode"] == 0, (first["log"], second["log"])
    stored = _results(first)["stored"]
    assert all(v < 0 for v in stored.values()), stored  # refused with an error, not a kill
    found = _results(second)["found"]
    assert all(f["key"] < 0 and not f["text"] for f in found.values()), found


def test_no_key_outlives_the_grader(keyring_run):
    identity, _, after, _ = keyring_run
    assert after.returncode == 0, after.stderr[-2000:]
    found = json.loads(after.stdout.splitlines()[-1])["found"]
    assert all(f["key"] < 0 and not f["text"] for f in found.values()), found


LEAVE_STATE = textwrap.dedent("""
    import ctypes, json, os
    libc = ctypes.CDLL(None, use_errno=True)
    KEY = {key}
    left = {{}}
    def errno_of(result):
        return result if result >= 0 else -ctypes.get_errno()
    queue = errno_of(libc.msgget(KEY, 0o1600))  # IPC_CREAT | 0600
    if queue >= 0:
        message = (ctypes.c_long * 2)(1, 0x2A)
        left["msgsnd"] = errno_of(libc.msgsnd(queue, message, 8, 0))
    left["msgget"] = queue
    left["semget"] = errno_of(libc.semget(KEY, 1, 0o1600))
    left["shmget"] = errno_of(libc.shmget(KEY, 4096, 0o1600))
    libc.mq_open.restype = ctypes.c_int
    left["mq_open"] = errno_of(libc.mq_open(b"/attention-{name}", os.O_RDWR | os.O_CREAT, 0o600, None))
    for folder in ("/tmp", "/dev/shm", os.path.expanduser("~")):
        with open(os.path.join(folder, "attention-{name}"), "w") as handle:
            handle.write("def f(): return 42")
    print(json.dumps(left))
""")

FIND_STATE = textwrap.dedent("""
    import ctypes, json, os
    libc = ctypes.CDLL(None, use_errno=True)
    KEY = {key}
    found = {{}}
    def errno_of(result):
        return result if result >= 0 else -ctypes.get_errno()
    found["msgget"] = errno_of(libc.msgget(KEY, 0))
    found["semget"] = errno_of(libc.semget(KEY, 0, 0))
    found["shmget"] = errno_of(libc.shmget(KEY, 0, 0))
    libc.mq_open.restype = ctypes.c_int
    found["mq_open"] = errno_of(libc.mq_open(b"/attention-{name}", os.O_RDONLY, 0, None))
    found["files"] = [f for f in ("/tmp", "/dev/shm", os.path.expanduser("~"))
                      if os.path.exists(os.path.join(f, "attention-{name}"))]
    print(json.dumps(found))
""")

REFUSED_CALLS = textwrap.dedent("""
    import ctypes, json, os, platform
    libc = ctypes.CDLL(None, use_errno=True)
    NUMBERS = {
        "x86_64": {"inotify_init1": 294, "fanotify_init": 300, "userfaultfd": 323, "bpf": 321,
                   "perf_event_open": 298, "ptrace": 101, "process_vm_readv": 310, "kcmp": 312,
                   "pidfd_getfd": 438, "personality": 135, "unshare": 272, "clone": 56},
        "aarch64": {"inotify_init1": 26, "fanotify_init": 262, "userfaultfd": 282, "bpf": 280,
                    "perf_event_open": 241, "ptrace": 117, "process_vm_readv": 270, "kcmp": 272,
                    "pidfd_getfd": 438, "personality": 92, "unshare": 97, "clone": 220},
    }[platform.machine()]
    me = os.getpid()
    buffer = ctypes.create_string_buffer(128)
    ARGS = {  # harmless arguments that would succeed were the call allowed
        "inotify_init1": (0,), "fanotify_init": (0, 0), "userfaultfd": (1,),  # UFFD_USER_MODE_ONLY
        "bpf": (0, buffer, 64), "perf_event_open": (buffer, 0, -1, -1, 0),
        "ptrace": (16, 1 if me != 1 else 2, 0, 0),  # PTRACE_ATTACH
        "process_vm_readv": (me, 0, 0, 0, 0, 0),
        "kcmp": (me, me, 0, 0, 0), "pidfd_getfd": (os.pidfd_open(me), 0, 0),
        "personality": (0x0040000,), "unshare": (0x10000000,), "clone": (0x10000000 | 17, 0, 0, 0, 0),
    }
    answers = {}
    for name, number in NUMBERS.items():
        args = [ctypes.c_long(a) if isinstance(a, int) else a for a in ARGS[name]]
        result = libc.syscall(ctypes.c_long(number), *args)
        if result == 0 and name == "clone":  # the child of a clone that was allowed
            os._exit(0)
        answers[name] = os.strerror(ctypes.get_errno()) if result < 0 else "allowed"
    own = {int(task) for task in os.listdir("/proc/self/task")}  # its threads (IPython's history)
    seen = []  # pids this job can name beside its own
    for pid in range(1, 4097):
        try:
            os.kill(pid, 0)
            if pid not in own:
                seen.append(pid)
        except ProcessLookupError:
            pass
        except PermissionError:
            seen.append(pid)
    print(json.dumps({"answers": answers, "seen": seen, "me": me}))
""")


@pytest.fixture(scope="module", params=IDENTITIES)
def state_run(request):
    name, key = uuid.uuid4().hex[:12], 0x5A000000 + uuid.uuid4().int % 0xFFFFFF
    leave = LEAVE_STATE.format(key=key, name=name)
    find = FIND_STATE.format(key=key, name=name)
    run = run_jobs(request.param, [[leave], [find], [REFUSED_CALLS]], limits={"timeout": 60})
    return request.param, run


def test_ipc_objects_and_files_do_not_reach_the_next_job(state_run):
    identity, run = state_run
    left, found = _results(run["jobs"][0]), _results(run["jobs"][1])
    assert left["msgget"] >= 0 and left["semget"] >= 0, left  # made in the job's own namespace
    assert all(found[k] < 0 for k in ("msgget", "semget", "shmget", "mq_open")), (left, found)
    assert found["files"] == [], found


def test_calls_a_notebook_never_needs_are_refused_not_killed(state_run):
    identity, run = state_run
    job = run["jobs"][2]
    assert job["exitcode"] == 0, job["log"]
    result = _results(job)
    refused = {
        name: why
        for name, why in result["answers"].items()
        if why in ("Operation not permitted", "Function not implemented")
    }
    assert refused == result["answers"], result["answers"]
    assert result["seen"] == [], result  # no pid outside the job's own can be named


HELPER = """
import pickle, sys
import numpy as np
source, sink = sys.stdin.buffer, sys.stdout.buffer
while len(head := source.read(8)) == 8:
    Q, K, V, mask = pickle.loads(source.read(int.from_bytes(head, "little")))
    scores = np.empty(Q.shape[:-1] + K.shape[-2:-1])  # the whole (n_q, n_k) matrix: 512 MiB
    np.matmul(Q, np.swapaxes(K, -1, -2), out=scores)
    scores /= np.sqrt(Q.shape[-1])
    if mask is not None:
        np.copyto(scores, -np.inf, where=~np.broadcast_to(mask, scores.shape))
    top = scores.max(axis=-1, keepdims=True)
    scores -= np.where(np.isfinite(top), top, 0.0)
    np.exp(scores, out=scores)
    total = scores.sum(axis=-1, keepdims=True)
    weighted = scores @ V
    answer = pickle.dumps(np.divide(weighted, total, out=np.zeros_like(weighted), where=total > 0))
    sink.write(len(answer).to_bytes(8, "little") + answer)
    sink.flush()
"""

HELPER_PROCESS = f"""\
import pickle, subprocess, sys
_helper = subprocess.Popen([sys.executable, "-c", {HELPER!r}], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE)  # waits until the budgeted test cell calls

def online_softmax_attention(Q, K, V, block_size, mask=None):
    data = pickle.dumps(tuple(None if a is None else np.asarray(a) for a in (Q, K, V, mask)))
    _helper.stdin.write(len(data).to_bytes(8, "little") + data)
    _helper.stdin.flush()
    head = _helper.stdout.read(8)
    if len(head) < 8:
        raise RuntimeError("the helper has gone")
    return pickle.loads(_helper.stdout.read(int.from_bytes(head, "little")))
"""


@pytest.fixture(scope="module", params=IDENTITIES)
def graded_ch07(request):
    root = Path(tempfile.mkdtemp(prefix="attention-share-"))
    os.chmod(root, 0o755)
    source, submitted, out = root / "source", root / "submitted", root / "out"
    shutil.copytree(SOLUTIONS / CH07, source / CH07)
    notebooks = {
        "honest": solved_notebook(CH07),
        "helper": with_cell(solved_notebook(CH07), "online_softmax_attention", HELPER_PROCESS),
    }
    for student, nb in notebooks.items():
        (submitted / student / CH07).mkdir(parents=True)
        nbformat.write(nb, submitted / student / CH07 / f"{CH07}.ipynb")
    try:
        run = grade_class_as(request.param, root, 120, 900)
        assert run.returncode == 0, run.stderr[-3000:]
        yield {
            student: json.loads((out / student / CH07 / "results.json").read_text()) for student in notebooks
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_helper_process_does_not_escape_the_memory_budget(graded_ch07):
    memory = next(
        t for t in graded_ch07["helper"]["tests"] if t["grade_id"] == "test_online_softmax_attention__memory"
    )
    assert memory["points"] == 0 and memory["status"] != "passed", memory


def test_an_honest_chapter_7_notebook_keeps_every_point(graded_ch07):
    honest = graded_ch07["honest"]
    assert honest["score"] == honest["max_score"] > 0, [t for t in honest["tests"] if t["status"] != "passed"]
