"""How the local backend runs sandboxed commands: a mount plan, a holder, and nsenter.

Each sandbox has a *holder*: a sleeping process in fresh mount, net, ipc and uts
namespaces (and a user namespace when the caller is not root) whose root is the
sandbox's view, built once from one `MountPlan`:
- by bubblewrap (`bwrap_holder_argv`), the default;
- by util-linux ``unshare`` + ``mount`` + ``chroot`` (`unshare_holder_argv`), the
  fallback for hosts without bubblewrap.
Each command enters the holder's namespaces with ``nsenter`` and runs in a fresh pid
namespace (`command_argv`): when its first process exits, or when we kill its launcher,
the pid namespace dies with everything the command started, so no process outlives its
command. Building the view costs dozens of mounts; entering it costs none, which keeps a
round trip near 10 ms.

Privileges: a root caller's commands run as an unprivileged uid (`MountPlan.run_as`),
because the kernel never applies RLIMIT_NPROC to root; a non-root caller's commands keep
its uid inside the holder's user namespace (bubblewrap forbids further user namespaces
there). In both cases the command holds no capabilities (``setpriv``), so it cannot undo
a read-only mount.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field

from cuda_agent.errors import SandboxUnavailableError
from cuda_agent.sandbox_pool.terminal.hostenv import ancestors

_FIX = (
    "install bubblewrap (apt-get install bubblewrap) and allow user namespaces for non-root users "
    "(sysctl kernel.unprivileged_userns_clone=1; on Ubuntu >= 23.10 also "
    "kernel.apparmor_restrict_unprivileged_userns=0), or use the docker backend"
)


@dataclass
class MountPlan:
    """What a sandboxed command sees; every path on the left is a host path."""

    ro_binds: list[tuple[str, str]] = field(default_factory=list)
    symlinks: list[tuple[str, str]] = field(default_factory=list)  # (target, link path)
    workspace: tuple[str, str] = ("", "/workspace")
    protected: list[str] = field(default_factory=list)  # relative to the workspace, existing
    tmp_dir: str = ""
    shm_bytes: int = 256 * 1024 * 1024
    run_as: tuple[int, int] | None = None  # root callers only

    def folders(self) -> list[str]:
        """Parents to create (mode 0755) so that every mount point is reachable by run_as."""
        dsts = [d for _, d in self.ro_binds] + [self.workspace[1]]
        return sorted({a for d in dsts for a in ancestors(d)} - {"/tmp"})


def drop_privileges_argv(plan: MountPlan) -> list[str]:
    """setpriv prefix: the command keeps no capability and cannot gain one."""
    base = ["setpriv", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
    if plan.run_as is None:
        return base
    uid, gid = plan.run_as
    return [*base, f"--reuid={uid}", f"--regid={gid}", "--clear-groups"]


#: What a holder runs once its view is built (its stdout tells us so).
_HOLDER_COMMAND = ["sh", "-c", "echo ready; exec sleep infinity"]


def bwrap_holder_argv(plan: MountPlan) -> list[str]:
    """bubblewrap building the view around a sleeping holder (dies with its parent).

    bwrap is named by the host path `probe_launcher` found: the holder starts with the
    sandbox's clean environment, whose PATH need not hold the host's bwrap (a wrapper
    such as scripts/gpu-env.sh's)."""
    argv = [shutil.which("bwrap") or "bwrap", "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net",
            "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox"]
    if plan.run_as is None:
        argv += ["--unshare-user", "--disable-userns"]
    argv += ["--proc", "/proc", "--dev", "/dev", "--size", str(plan.shm_bytes), "--tmpfs", "/dev/shm",
             "--bind", plan.tmp_dir, "/tmp"]
    for folder in plan.folders():
        argv += ["--perms", "0755", "--dir", folder]
    for target, link in plan.symlinks:
        argv += ["--symlink", target, link]
    for src, dst in plan.ro_binds:
        argv += ["--ro-bind", src, dst]
    ws_src, ws_dst = plan.workspace
    argv += ["--bind", ws_src, ws_dst]
    for rel in plan.protected:
        argv += ["--ro-bind", f"{ws_src}/{rel}", f"{ws_dst}/{rel}"]
    return [*argv, "--chdir", ws_dst, "--", *drop_privileges_argv(plan), *_HOLDER_COMMAND]


def command_argv(plan: MountPlan, holder_pid: int, userns: str | None = None) -> list[str]:
    """Prefix running one command in the holder's view, in a fresh pid namespace.

    `userns`: the user namespace owning the holder's mount namespace (non-root callers;
    bubblewrap nests the holder one level deeper). Our uid owns it, so entering it gives
    the capabilities nsenter needs; the command drops them all before it starts.
    """
    argv = ["nsenter", "-t", str(holder_pid), "--mount", "--net", "--ipc", "--uts"]
    if plan.run_as is None:
        argv += [f"--user={userns}" if userns else "--user", "--preserve-credentials"]
    argv += ["--root", "--wd", "--", "unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "--"]
    return [*argv, *drop_privileges_argv(plan)]


def unshare_holder_argv(plan: MountPlan, root_dir: str) -> list[str]:
    """unshare(1) building the same view as bubblewrap under `root_dir` (an empty host
    folder), then chroot-ing the holder into it (it dies with its parent too)."""
    q = shlex.quote
    r = q(root_dir)
    lines = ["set -e", f"mount -t tmpfs -o mode=0755 sandbox-root {r}",
             f"mkdir -p {r}/tmp", f"mount --bind {q(plan.tmp_dir)} {r}/tmp"]
    for folder in plan.folders():
        lines.append(f"mkdir -p {r}{q(folder)}")
    for target, link in plan.symlinks:
        lines.append(f"ln -s {q(target)} {r}{q(link)}")
    binds = [(s, d, True) for s, d in plan.ro_binds] + [(*plan.workspace, False)]
    binds += [(f"{plan.workspace[0]}/{rel}", f"{plan.workspace[1]}/{rel}", True) for rel in plan.protected]
    for src, dst, ro in binds:
        make = "mkdir -p" if os.path.isdir(src) else "touch"
        opt = "-o ro " if ro else ""
        lines += [f"[ -e {r}{q(dst)} ] || {make} {r}{q(dst)}", f"mount --bind {opt}{q(src)} {r}{q(dst)}"]
    lines += [f"mkdir -p {r}/proc {r}/dev/shm {r}/dev/pts",
              f"mount -t tmpfs -o mode=1777,size={plan.shm_bytes} shm {r}/dev/shm"]
    for dev in ("null", "zero", "full", "random", "urandom", "tty"):
        lines += [f"touch {r}/dev/{dev}", f"mount --bind /dev/{dev} {r}/dev/{dev}"]
    lines += [f"ln -s /proc/self/fd {r}/dev/fd"] + [
        f"ln -s /proc/self/fd/{i} {r}/dev/{name}" for i, name in enumerate(("stdin", "stdout", "stderr"))
    ]
    if plan.run_as is None:  # the command runs as root of this user namespace: no nested ones
        lines.append("echo 0 > /proc/sys/user/max_user_namespaces")
    tail = ["chroot", root_dir, "env", "-C", plan.workspace[1], "setpriv", "--pdeathsig", "KILL", *_HOLDER_COMMAND]
    lines.append(f"exec {shlex.join(tail)}")
    argv = ["unshare", "--mount", "--net", "--ipc", "--uts", "--propagation", "private"]
    if plan.run_as is None:
        argv += ["--user", "--map-root-user"]
    return [*argv, "--", "/bin/sh", "-c", "\n".join(lines), "sandbox-holder"]


@functools.lru_cache(maxsize=4)
def probe_launcher(preference: str, as_root: bool) -> str:
    """'bwrap' or 'unshare', whichever works here (checked once per process)."""
    order = ["bwrap", "unshare"] if preference == "auto" else [preference]
    problems = []
    for name in order:
        problem = _try(name, as_root)
        if problem is None:
            return name
        problems.append(f"{name}: {problem}")
    raise SandboxUnavailableError(f"no namespace launcher works here ({'; '.join(problems)}); fix: {_FIX}")


def _try(name: str, as_root: bool) -> str | None:
    if shutil.which(name) is None:
        return "not installed"
    for tool in ("setpriv", "prlimit", "nsenter", "unshare"):
        if shutil.which(tool) is None:
            return f"{tool} (util-linux) not installed"
    if name == "bwrap":
        argv = ["bwrap", "--ro-bind", "/", "/", "--unshare-net", "--unshare-pid", "--dev", "/dev", "true"]
        if not as_root:
            argv[1:1] = ["--unshare-user"]
    else:
        argv = ["unshare", "--mount", "--net", "--pid", "--fork", "true"]
        if not as_root:
            argv[1:1] = ["--user", "--map-root-user"]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if done.returncode == 0 else (done.stderr.strip() or f"exit {done.returncode}")
