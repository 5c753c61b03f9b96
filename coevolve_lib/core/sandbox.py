"""An operating-system sandbox for a process that runs model-written code (AppWorld's server; an environment of your
own whose actions are code): bubblewrap's namespaces, an unprivileged user, and util-linux's `setpriv` and `prlimit`.

What a process started with `SandboxConfig(mode="bwrap")` sees and may do:

- **no network**: a network namespace of its own with only a loopback interface; the kit talks to it through a Unix
  socket in its scratch folder;
- **files**: /usr, /etc and the /bin, /lib links read-only, the read-only paths it is given (its interpreter, its
  venv, its data), its scratch folder read-write (also its HOME and TMPDIR), a private /proc and a minimal /dev;
  nothing else (no home folders, no /tmp, no /run and its sockets);
- **its own process tree**: a PID namespace whose init is bubblewrap's; killing the process `Popen` started kills
  every process in the sandbox, those that detached included;
- **an unprivileged user**: when the kit runs as root, a uid of the sandbox's own (`sandbox_uid`, none of the
  machine's users), no capabilities and no_new_privs; as another user, that user in a user namespace of its own,
  without capabilities;
- **resource limits** (`SandboxLimits`), set before the command starts, soft = hard so that the code cannot raise
  them: address space, processes and threads, open files, file size, CPU seconds.

Needs: Linux, `bwrap` (the Debian / Ubuntu package `bubblewrap`; `make appworld` installs it when run as root) and
util-linux. As root nothing else; as another user, unprivileged user namespaces (some distributions and container
runtimes turn them off). Where something is missing `check_sandbox` refuses in one line; mode "none" (opt-in) keeps
only the limits and the process-group kill, and warns.

`sandboxed` builds the command line; `process_footprint` and `kill_sandbox` watch and end what it started.
"""

from __future__ import annotations

import functools
import logging
import os
import secrets
import shutil
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import psutil

log = logging.getLogger(__name__)

SANDBOX_MODES = ("bwrap", "none")
SANDBOX_UID_BASE = 1_900_000_000
"""Sandboxes started by root run as a uid in [SANDBOX_UID_BASE, SANDBOX_UID_BASE + 2**24): one of their own each, so
that the process limit counts one sandbox's processes only (RLIMIT_NPROC counts per uid), and far above the uids
machines give their users."""
SYSTEM_PATHS = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
"""What every sandbox sees read-only: the system's programs and libraries (a link where the system has one)."""


class SandboxUnavailableError(RuntimeError):
    """The OS-level sandbox cannot run here: what is missing, and how to opt into mode "none" knowingly."""


@dataclass
class SandboxLimits:
    """Resource limits of one sandbox (`prlimit`, soft = hard). A limit the code hits fails its own call
    (MemoryError, "can't start new thread", EMFILE, EFBIG) or, for CPU seconds, kills the sandbox."""

    address_space_mb: int = 2048
    """Virtual memory of each process (RLIMIT_AS), in MiB. AppWorld's server maps ~0.4 GiB once a task is loaded
    (resident ~250 MB); the rest is what the code may allocate."""
    processes: int = 96
    """Processes and threads of the sandbox's user (RLIMIT_NPROC); AppWorld's server runs ~10 threads."""
    open_files: int = 1024
    """Open file descriptors per process (RLIMIT_NOFILE). AppWorld's server keeps ~12 open per task it has loaded
    (measured); its owners recycle it at three quarters of this (`AppWorldServer.recycle_reason`)."""
    file_size_mb: int = 256
    """Largest file a process may write (RLIMIT_FSIZE), in MiB."""
    cpu_seconds: int = 7200
    """CPU seconds of each process over its life (RLIMIT_CPU); the AppWorld server pool recycles a server at half
    of it, so that only runaway code meets it."""

    def prlimit_args(self) -> list[str]:
        mib = 1024 * 1024
        return [f"--as={self.address_space_mb * mib}", f"--nproc={self.processes}", f"--nofile={self.open_files}",
                f"--fsize={self.file_size_mb * mib}", f"--cpu={self.cpu_seconds}"]


@dataclass
class SandboxConfig:
    """How processes that run model-written code are isolated."""

    mode: str = "bwrap"
    """"bwrap": the OS-level sandbox (the module docstring); "none": an opt-in weaker mode for machines without
    bubblewrap or user namespaces (the limits and the process-group kill only: the code then runs as the kit's user,
    with its network and files). Anything else is refused."""
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    """Resource limits, in both modes."""

    def __post_init__(self):
        if self.mode not in SANDBOX_MODES:
            raise ValueError(f"sandbox mode {self.mode!r} is not one of {SANDBOX_MODES}")


DIES_WITH_PARENT = ["setpriv", "--pdeathsig", "KILL", "--"]
"""A command prefix under which the process gets SIGKILL when the kit's process (the thread that started it) ends,
however it ends, SIGKILL included: what bubblewrap's `--die-with-parent` does for a sandbox (util-linux's setpriv)."""


@dataclass
class Sandbox:
    """One sandbox's plan: call `command(argv)` for the command line and `popen_kwargs()` for `subprocess.Popen`."""

    config: SandboxConfig
    scratch: Path
    """The folder the sandboxed process may write (its cwd, HOME and TMPDIR); made writable for its uid."""
    read_only: tuple[Path, ...] = ()
    """Paths it may read besides the system's (SYSTEM_PATHS), at the same place as on the host."""
    env: dict[str, str] = field(default_factory=dict)
    """Its whole environment (nothing of the kit's is passed: no keys, no proxies), besides PATH, HOME and TMPDIR."""
    uid: int | None = field(default=None, init=False)
    """The uid it runs as when the kit runs as root (a fresh one per sandbox); None otherwise."""

    def __post_init__(self):
        self.scratch = Path(self.scratch).resolve()
        if self.config.mode == "bwrap" and os.geteuid() == 0:
            self.uid = SANDBOX_UID_BASE + secrets.randbelow(2 ** 24)
            os.chown(self.scratch, self.uid, self.uid)

    def environment(self) -> dict[str, str]:
        return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(self.scratch), "TMPDIR": str(self.scratch),
                "LANG": "C.UTF-8", **self.env}

    def command(self, argv: list[str]) -> list[str]:
        limited = ["prlimit", *self.config.limits.prlimit_args(), "--", *argv]
        if self.config.mode == "none":
            return [*DIES_WITH_PARENT, *limited]
        check_sandbox()
        args = [shutil.which("bwrap"), "--die-with-parent", "--unshare-pid", "--unshare-net", "--unshare-ipc",
                "--unshare-uts", "--unshare-cgroup-try", "--clearenv"]
        if self.uid is None:  # not root: a user namespace of its own, no capabilities in it
            args += ["--unshare-user", "--cap-drop", "ALL"]
        for name, value in self.environment().items():
            args += ["--setenv", name, value]
        args += _system_view() + ["--proc", "/proc", "--dev", "/dev"]
        made: set[Path] = set()
        for path in [*self.read_only, self.scratch]:
            path = Path(path).resolve()
            args += _parents(path, made)
            args += ["--bind" if path == self.scratch else "--ro-bind", str(path), str(path)]
        # bubblewrap's root and /dev are in-memory file systems the sandbox could fill (and in a user namespace
        # write): read-only, so that the scratch folder is the only place it writes.
        args += ["--remount-ro", "/", "--remount-ro", "/dev", "--chdir", str(self.scratch), "--"]
        if self.uid is not None:  # root sets up the namespaces, then the command runs as the sandbox's own uid
            args += ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups", "--inh-caps=-all",
                     "--bounding-set=-all", "--no-new-privs", "--"]
        return args + limited

    def popen_kwargs(self) -> dict:
        """A new session (so that `kill_sandbox` reaches the whole group in mode "none") and the environment (mode
        "none"; bubblewrap sets its own)."""
        return {"start_new_session": True, "env": self.environment() if self.config.mode == "none" else {}}


def _system_view() -> list[str]:
    args = []
    for name in SYSTEM_PATHS:
        path = Path(name)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), name]
        elif path.is_dir():
            args += ["--ro-bind", name, name]
    return args


def _parents(path: Path, made: set[Path]) -> list[str]:
    """Folders for a bind's mount point, readable by the sandbox's user (bubblewrap makes missing ones 0700 as
    root); those under a system path exist already."""
    args = []
    for parent in reversed(path.parents[:-1]):
        if parent in made or str(parent) in SYSTEM_PATHS or any(str(parent).startswith(p + "/") for p in SYSTEM_PATHS):
            continue
        made.add(parent)
        args += ["--perms", "0755", "--dir", str(parent)]
    return args


@functools.cache
def check_sandbox() -> None:
    """Raise SandboxUnavailableError in one line unless a bubblewrap sandbox starts here (tried once per process)."""
    if not Path("/proc/self/ns").is_dir():
        raise SandboxUnavailableError("the AppWorld sandbox needs Linux namespaces (this is not Linux); mode 'none' "
                                      "runs model code without OS isolation (opt in: docs/appworld.md)")
    missing = [tool for tool in ("bwrap", "prlimit", "setpriv") if shutil.which(tool) is None]
    if missing:
        raise SandboxUnavailableError(
            f"the sandbox for model-written code needs {' and '.join(missing)} (Debian/Ubuntu: `apt-get install "
            "bubblewrap util-linux`); or opt into mode 'none', without OS isolation (docs/appworld.md)")
    namespaces = ["--unshare-pid", "--unshare-net"] + (["--unshare-user"] if os.geteuid() else [])
    args = [shutil.which("bwrap"), *namespaces, "--ro-bind", "/", "/", "true"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise SandboxUnavailableError(
            f"bubblewrap cannot make a sandbox here ({why}): as a user other than root it needs unprivileged user "
            "namespaces (sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces > 0; container "
            "runtimes may block them); or opt into mode 'none', without OS isolation (docs/appworld.md)")


@dataclass(frozen=True)
class Footprint:
    """What a process tree holds now."""

    processes: int
    threads: int
    memory_mb: float
    """Resident memory, all processes together."""
    cpu_seconds: float
    """CPU time of its busiest process (what RLIMIT_CPU limits)."""
    open_files: int = 0
    """Open file descriptors of the process holding most (what RLIMIT_NOFILE limits)."""


def process_footprint(pid: int) -> Footprint:
    """What `pid` and everything under it hold; all zero once it is gone. In mode "bwrap" that is the whole sandbox:
    a process that detached is re-parented to the sandbox's init, never outside it."""
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    processes = threads = files = 0
    memory = cpu = 0.0
    for process in tree:
        try:
            with process.oneshot():
                threads += process.num_threads()
                memory += process.memory_info().rss / 2 ** 20
                times = process.cpu_times()
                cpu = max(cpu, times.user + times.system)
                files = max(files, process.num_fds())
            processes += 1
        except psutil.NoSuchProcess:
            continue
    return Footprint(processes, threads, memory, cpu, files)


def kill_sandbox(process: subprocess.Popen) -> None:
    """SIGKILL the sandbox and reap it. Mode "bwrap": its init dies with the process Popen started (bubblewrap's
    --die-with-parent), and every process of its PID namespace with it. Mode "none": the process group (a process
    that left the group survives: that mode is weaker)."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait()
