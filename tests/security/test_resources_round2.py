"""Attacks on a job's memory, tasks and lifetime, and on what of the machine it can see.

Each attack runs in the grading sandbox exactly as grading configures it
(``tests/security/job_runner.py``: ``choose_isolation`` + ``grading_config``), once with the
grader as root and once as uid 65534 through ``setpriv``. As root on these machines every job
gets cgroup v1 ``memory`` and ``pids`` folders of its own; as uid 65534 no cgroup can be had
(v1 needs root, and the v2 hierarchy here delegates neither controller), so the fallback
limits are what these tests prove there, and ``cgroup`` says which case ran. A root run with
cgroups switched off (``ServerConfig.cgroups``) proves the fallback as root too.

- memory is capped per job, not per process: 512 MB of memfds written (never mapped), 438 MB
  queued in socket buffers by two processes, four processes of 48 MB and one of 160 MB, all
  against a 256 MB job (without a cgroup: memfds and sockets refused, 128 MB per process),
  and 20,000 files on a tmpfs;
- tasks are capped per job: 40 threads against the default limit of 16;
- no job outlives its grader: ``python -m grader autograde`` on a notebook that clears its
  own parent-death signal, ignores SIGTERM, starts a setsid'd ``sleep`` and a double-forked
  loop and then sleeps forever is SIGKILLed with its whole process group; within a few
  seconds nothing of the job is left (and, as root, its cgroups are empty and removed by
  the next server);
- the job sees a minimal ``/etc`` of its own and no ``/opt``: not ``/etc/shadow``, not
  ``/etc/hostname``, not a file planted under ``/opt``; numpy and torch still work.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import nbformat
import pytest

from tests import interpreter_access
from tests.security.grade_as import NOBODY, autograde_command, chown_tree, identity_prefix, switches
from tests.security.test_check_confined import _notebook

pytestmark = [
    pytest.mark.security,
    pytest.mark.grading,
    pytest.mark.slow,
    pytest.mark.xdist_group("security"),
]

ROOT = Path(__file__).resolve().parents[2]
MB = 2**20
IDENTITIES = ["root", "user"] if os.getuid() == 0 else ["user"]
JOB_MEMORY = 256 * MB  # the job's memory in the cgroup case
PROCESS_MEMORY = 128 * MB  # each process's address space in the fallback case
TASKS = 16
LIMITS = {
    "timeout": 60,
    "memory_bytes": JOB_MEMORY,
    "process_memory_bytes": PROCESS_MEMORY,
    "processes": TASKS,
}


@pytest.fixture(scope="module", autouse=True)
def _python_reachable():
    interpreter_access.hold()


def run_jobs(
    identity: str, cells: list[list[str]], cgroups: bool = True, limits: dict | list[dict] = LIMITS
) -> dict:
    """Run one job per list of cells in the grading sandbox, as ``identity`` (``limits``: for
    every job, or one per job)."""
    per_job = limits if isinstance(limits, list) else [limits] * len(cells)
    jobs = [{"cells": c, "limits": k} for c, k in zip(cells, per_job, strict=True)]
    spec = {"cgroups": cgroups, "jobs": jobs}
    home = tempfile.mkdtemp(prefix="attention-home-")
    os.chmod(home, 0o777)
    try:
        run = subprocess.run(
            [*identity_prefix(identity), sys.executable, "-m", "tests.security.job_runner"],
            input=json.dumps(spec),
            capture_output=True,
            text=True,
            timeout=600,
            cwd=ROOT,
            env=dict(os.environ, HOME=home),
        )
    finally:
        shutil.rmtree(home, ignore_errors=True)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.splitlines()[-1])


def _results(job: dict) -> dict:
    """The JSON line the attack printed last (every attack here prints one)."""
    lines = [line for text in job["stdout"] for line in text.splitlines() if line.startswith("{")]
    assert lines, job
    return json.loads(lines[-1])


MEMFD_BOMB = textwrap.dedent("""
    import json, os
    held, error, fds = 0, '', []
    try:
        while held < 512 * 2**20:
            fd = os.memfd_create('bomb')
            os.write(fd, b'\\x01' * (32 * 2**20))  # written, never mapped: no address space
            fds.append(fd)
            held += 32 * 2**20
    except (OSError, MemoryError) as exc:
        error = repr(exc)
    print(json.dumps({'held': held, 'error': error}))
""")

SPREAD_BOMB = textwrap.dedent("""
    import json, os, time
    SIZES = [48] * 4 + [160]  # MB
    read, write = os.pipe()
    pids = {}
    for k, size in enumerate(SIZES):
        pid = os.fork()
        if pid == 0:
            try:
                block = b'\\x01' * (size * 2**20)  # pages touched, not only mapped
                os.write(write, f'{k}y'.encode())
            except MemoryError:
                os.write(write, f'{k}n'.encode())
            time.sleep(60)
            os._exit(0)
        pids[k] = pid
    os.set_blocking(read, False)
    answers, dead = {}, set()
    deadline = time.monotonic() + 30
    while len(set(answers) | dead) < len(SIZES) and time.monotonic() < deadline:
        try:
            data = os.read(read, 64).decode()
            for k in range(0, len(data), 2):
                answers[int(data[k])] = data[k + 1]
        except BlockingIOError:
            time.sleep(0.02)
        for k, pid in pids.items():
            if k not in dead and os.waitpid(pid, os.WNOHANG) != (0, 0):
                dead.add(k)
    time.sleep(0.5)  # an OOM kill in flight lands
    for k, pid in pids.items():
        if k not in dead and os.waitpid(pid, os.WNOHANG) != (0, 0):
            dead.add(k)
    held = sum(SIZES[k] for k, a in answers.items() if a == 'y' and k not in dead)
    print(json.dumps({'answers': ''.join(answers.get(k, '-') for k in range(len(SIZES))),
                      'dead': sorted(dead), 'held_mb': held}))
    for pid in pids.values():
        try:
            os.kill(pid, 9)
        except OSError:
            pass
""")

SOCKET_BOMB = textwrap.dedent("""
    import json, os, socket, time
    def fill():  # 8 MB queued in the kernel behind each socket (2 x net.core.wmem_max here)
        held, pairs = 0, []
        for _ in range(28):
            a, b = socket.socketpair()
            a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 << 20)
            b.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
            a.setblocking(False)
            try:
                while True:
                    held += a.send(b'x' * (1 << 16))
            except BlockingIOError:
                pass
            pairs.append((a, b))
        return held, pairs
    read, write = os.pipe()
    kids = []
    for _ in range(2):
        pid = os.fork()
        if pid == 0:
            try:
                held, pairs = fill()
                os.write(write, f'{held >> 20},'.encode())
            except OSError as exc:
                os.write(write, f'{exc.errno},'.encode())
            time.sleep(30)
            os._exit(0)
        kids.append(pid)
    os.set_blocking(read, False)
    got, deadline = '', time.monotonic() + 20
    while got.count(',') < 2 and time.monotonic() < deadline:
        try:
            got += os.read(read, 64).decode()
        except BlockingIOError:
            time.sleep(0.05)
        if any(os.waitpid(p, os.WNOHANG) != (0, 0) for p in kids):
            break  # one was killed: the job's cgroup counted its sockets
    alive = [p for p in kids if os.waitpid(p, os.WNOHANG) == (0, 0)]
    print(json.dumps({'got': got, 'alive': len(alive)}))
    for p in kids:
        try:
            os.kill(p, 9)
        except OSError:
            pass
""")

THREADS = textwrap.dedent("""
    import ctypes, json, threading
    threading.stack_size(2**18)  # cheap threads: the count, not the address space, is tested
    ctypes.CDLL(None).mallopt(-8, 1)  # M_ARENA_MAX: no 64 MB arena per thread
    stop = threading.Event()
    started, error = 0, ''
    for _ in range(40):
        try:
            threading.Thread(target=stop.wait, daemon=True).start()
            started += 1
        except RuntimeError as exc:
            error = repr(exc)
            break
    stop.set()
    print(json.dumps({'started': started, 'error': error}))
""")

INODES = textwrap.dedent("""
    import json, os
    made, error = 0, ''
    try:
        for k in range(20000):
            open(f'/tmp/i{k}', 'w').close()
            made += 1
    except OSError as exc:
        error = repr(exc)
    print(json.dumps({'made': made, 'error': error}))
""")


@pytest.fixture(scope="module", params=IDENTITIES)
def memory_runs(request):
    identity = request.param
    cells = [[MEMFD_BOMB], [SPREAD_BOMB], [THREADS], [INODES], [SOCKET_BOMB]]
    defaults = {"timeout": 60}  # the tasks of a job as grading sets them (SECURITY.md: 16)
    run = run_jobs(identity, cells, limits=[LIMITS, LIMITS, defaults, LIMITS, LIMITS])
    assert run["isolation"] == "namespaces"
    return identity, run


def _counted(identity: str, run: dict) -> bool:
    """Whether the jobs had cgroups; as root on these machines they must have had them."""
    if identity == "root":
        assert run["cgroup"] == "v1", "as root, these machines give every job a v1 cgroup"
    return run["cgroup"] != "none"


def test_memfd_pages_count_against_the_job(memory_runs):
    """512 MB written into memfds (no address space counts them) in a 256 MB job: with a
    cgroup the job is killed or refused before it holds more than 256 MB; without one
    memfd_create itself is refused."""
    identity, run = memory_runs
    job = run["jobs"][0]
    if _counted(identity, run):
        if job["exitcode"] == 0:
            assert _results(job)["held"] <= JOB_MEMORY, job
        else:
            assert job["exitcode"] == -signal.SIGKILL, job  # the cgroup's OOM killer
    else:
        held = _results(job)
        assert held["held"] == 0 and "Operation not permitted" in held["error"], held


def test_memory_is_capped_per_job_not_per_process(memory_runs):
    """Four processes of 48 MB and one of 160 MB: with a cgroup, never more than the job's
    256 MB at once; without one, no process gets more than its 128 MB."""
    identity, run = memory_runs
    job = run["jobs"][1]
    if job["exitcode"] != 0:  # the cell's own process was the one the OOM killer chose
        assert _counted(identity, run) and job["exitcode"] == -signal.SIGKILL, job
        return
    result = _results(job)
    answers = result["answers"]
    if _counted(identity, run):
        assert result["held_mb"] * MB <= JOB_MEMORY, result
    else:
        assert answers[4:] == "n", answers  # 160 MB is more than a process may have
        assert answers[:4] == "yyyy", answers  # 48 MB each is allowed (what the cell process
        # itself maps after the limit is set, up to tens of MB on a loaded machine, is charged
        # to every process it forks: 96 MB of a 128 MB limit failed once that way)


def test_socket_buffers_count_against_the_job(memory_runs):
    """Two processes queueing 219 MB each in socket buffers (kernel memory no address space
    counts) in a 256 MB job: the cgroup counts them; without one, sockets are refused."""
    identity, run = memory_runs
    job = run["jobs"][4]
    if _counted(identity, run):
        if job["exitcode"] != 0:
            assert job["exitcode"] == -signal.SIGKILL, job
            return
        result = _results(job)
        held = sum(int(x) for x in result["got"].split(",") if x) if result["alive"] == 2 else 0
        assert held * MB <= JOB_MEMORY, result
    else:
        assert _results(job)["got"] == "1,1,", job  # EPERM, in both processes


def test_tasks_are_capped_per_job(memory_runs):
    """40 threads (each cheap in memory) in a job with the default limits: 16 tasks at most,
    the job's keeper and PID 1 included (the pids cgroup, or RLIMIT_NPROC in the job's own
    user namespace)."""
    identity, run = memory_runs
    started = _results(run["jobs"][2])
    assert started["started"] < TASKS, started
    assert "can't start new thread" in started["error"], started


def test_a_tmpfs_has_a_bounded_number_of_files(memory_runs):
    _, run = memory_runs
    made = _results(run["jobs"][3])
    assert made["made"] < 5000, made
    assert "No space left" in made["error"], made


@pytest.mark.skipif(os.getuid() != 0, reason="only root can have the cgroups to switch off")
def test_the_fallback_limits_hold_as_root_without_cgroups():
    """Root with cgroups switched off: the fallback's memfd refusal and per-process limit."""
    run = run_jobs("root", [[MEMFD_BOMB], [SPREAD_BOMB]], cgroups=False)
    assert run["cgroup"] == "none"
    held = _results(run["jobs"][0])
    assert held["held"] == 0 and "Operation not permitted" in held["error"], held
    assert _results(run["jobs"][1])["answers"][4:] == "n"


@pytest.mark.skipif(os.getuid() != 0, reason="the cgroup v1 folders need root")
def test_no_cgroup_is_left_after_a_run():
    run = run_jobs("root", [["print('{}')"]])
    assert run["cgroup"] == "v1"
    assert not _run_folders(run["server_pid"])


def _run_folders(server_pid: int) -> list[Path]:
    from grader.autograde import cgroups as cgroup_tree

    cgroups = cgroup_tree.discover_bases()
    return [p for base in cgroups for p in base.glob(f"{cgroup_tree.RUN_PREFIX}{server_pid}-*")]


# ------------------------------------------------------------------ no job outlives its grader


MARKER = "4343.4343"  # an argument of `sleep` that only this attack uses
IMMORTAL = textwrap.dedent(f"""
    import ctypes, os, signal, subprocess, time
    ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)  # PR_SET_PDEATHSIG: none
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    subprocess.Popen(['sleep', '{MARKER}'], start_new_session=True)
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)
            while True:
                time.sleep(0.5)
        os._exit(0)
    while True:
        time.sleep(0.5)
""")


def _tiny_source(folder: Path, solution: str) -> None:
    (folder / "source" / "tiny").mkdir(parents=True)
    nbformat.write(
        _notebook("### BEGIN SOLUTION\ndef answer():\n    return 42\n### END SOLUTION"),
        folder / "source" / "tiny" / "tiny.ipynb",
    )
    (folder / "submitted" / "immortal" / "tiny").mkdir(parents=True)
    nbformat.write(_notebook(solution), folder / "submitted" / "immortal" / "tiny" / "tiny.ipynb")


def _processes() -> dict[int, tuple[str, str, str]]:
    """pid -> (ppid, start time, state) of every process, and their command lines apart."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        table[int(name)] = (fields[1], fields[19], fields[0])
    return table


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _descendants(table: dict, root: int) -> set[tuple[int, str]]:
    children: dict[str, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found, stack = set(), [root]
    while stack:
        pid = stack.pop()
        found.add((pid, table[pid][1]))
        stack += children.get(str(pid), [])
    return found


@pytest.fixture
def work_folder():
    """A folder uid 65534 can reach (pytest's tmp_path lies under a folder of mode 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="attention-lifetime-"))
    os.chmod(folder, 0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("identity", IDENTITIES)
def test_no_job_outlives_its_grader(identity, work_folder):
    """SIGKILL the grading process group while a job that undid its own parent-death
    signal sleeps forever: within a few seconds nothing of that job is left."""
    tmp_path = work_folder
    _tiny_source(tmp_path, IMMORTAL)
    if switches(identity):
        chown_tree(tmp_path, NOBODY)
    job: set[tuple[int, str]] = set()  # (pid, start time) of the grader and all it started
    grading_run = subprocess.Popen(
        [
            *identity_prefix(identity),
            *autograde_command(
                tmp_path / "submitted", tmp_path / "out", source=tmp_path / "source", timeout=600, workers=1
            ),
        ],
        cwd=tmp_path,
        env=dict(os.environ, HOME=str(tmp_path)),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            table = _processes()
            if grading_run.pid not in table:
                pytest.fail("the grader ended before the job ran")
            job = _descendants(table, grading_run.pid)
            if any(MARKER in _cmdline(pid) for pid, _ in job):
                break
            time.sleep(0.2)
        else:
            pytest.fail("the immortal job never started")
        time.sleep(1)  # its double fork done
        job |= _descendants(_processes(), grading_run.pid)
        server_pids = [
            pid
            for pid, _ in job
            if "grader.autograde.sandbox" in _cmdline(pid)
            and _processes().get(pid, ("", "", ""))[0] == str(grading_run.pid)
        ]
        os.killpg(grading_run.pid, signal.SIGKILL)
        grading_run.wait(timeout=10)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            table = _processes()
            left = [
                pid for pid, start in job if pid in table and table[pid][1] == start and table[pid][2] != "Z"
            ]
            if not left and not any(MARKER in _cmdline(pid) for pid in table):
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"left running: {[(pid, _cmdline(pid)) for pid in left]}")
    finally:  # whatever happened, nothing of this test is left behind
        if grading_run.poll() is None:
            os.killpg(grading_run.pid, signal.SIGKILL)
            grading_run.wait()
        table = _processes()
        for pid in table:
            if MARKER in _cmdline(pid) or (pid, table[pid][1]) in job:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
    if identity == "root":  # its cgroups: empty, and removed by the next server's clean-up
        from grader.autograde import cgroups as cgroup_tree

        folders = [p for pid in server_pids for p in _run_folders(pid)]
        assert folders, "as root the job had cgroups"
        for folder in folders:
            for procs in folder.glob("*/cgroup.procs"):
                assert not procs.read_text().split(), procs
        assert not cgroup_tree.remove_stale(cgroup_tree.discover_bases())
        assert not [f for f in folders if f.exists()]


# ------------------------------------------------------------------ what of the machine it sees


ALLOWED_ETC = {"passwd", "group", "nsswitch.conf", "hosts", "ld.so.cache", "localtime"}


@pytest.fixture
def planted():
    """A file under /opt (removed afterwards), where root can write one."""
    if os.getuid() != 0:
        yield None
        return
    folder = Path("/opt") / f"attention-{uuid.uuid4().hex[:12]}"
    folder.mkdir()
    (folder / "secret.txt").write_text("planted")
    os.chmod(folder, 0o755)
    os.chmod(folder / "secret.txt", 0o644)
    try:
        yield folder / "secret.txt"
    finally:
        shutil.rmtree(folder)


@pytest.mark.parametrize("identity", IDENTITIES)
def test_the_job_sees_a_minimal_etc_and_no_opt(identity, planted):
    probe = textwrap.dedent(f"""
        import json, os, pwd
        import numpy as np, torch
        seen = {{'etc': sorted(os.listdir('/etc')) if os.path.isdir('/etc') else [],
                'opt': sorted(os.listdir('/opt')) if os.path.isdir('/opt') else []}}
        for path in ['/etc/shadow', '/etc/hostname', {str(planted or "/opt/none")!r}]:
            try:
                seen[path] = open(path).read()[:40]
            except OSError as exc:
                seen[path] = None
        seen['users'] = sorted(p.pw_name for p in pwd.getpwall())
        seen['me'] = pwd.getpwuid(os.getuid()).pw_name
        seen['numpy'] = float(np.linalg.solve(np.array([[2.0, 0], [0, 4]]), np.array([2.0, 8])).sum())
        seen['torch'] = float((torch.ones(3, dtype=torch.float64) @ torch.arange(3.0, dtype=torch.float64)))
        print(json.dumps(seen))
    """)
    run = run_jobs(identity, [[probe]])
    job = run["jobs"][0]
    assert job["exitcode"] == 0 and not job["errors"], job
    seen = _results(job)
    assert set(seen["etc"]) <= ALLOWED_ETC, seen["etc"]
    assert seen["opt"] == [], seen["opt"]
    for path in ("/etc/shadow", "/etc/hostname", str(planted or "/opt/none")):
        assert seen[path] is None, (path, seen[path])
    assert set(seen["users"]) <= {"root", "nobody", "learner"}, seen["users"]
    assert seen["me"] in ("nobody", "learner")
    assert seen["numpy"] == 3.0 and seen["torch"] == 3.0, seen
