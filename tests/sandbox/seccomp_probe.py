"""Calls each system call the jail's filter denies, as root, and prints the errno of each (0: it worked).

Run by tests/sandbox/test_seccomp.py in a process of its own, once plain and once with the filter
loaded (`--filter`). Root would get past most permission checks, so an EPERM under the filter is
the filter's doing. Every argument is harmless even if a call got through: bad pointers, bad
descriptors, impossible flags, names that do not exist. Calls that could touch the host even so
are made only under the filter (`baseline=False`).
"""
from __future__ import annotations

import ctypes
import json
import os
import sys

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
BAD = 1  # an address no process maps
NO_FD = -1
CLONE_THREAD = 0x00010000  # without CLONE_SIGHAND: clone refuses (EINVAL) before making anything


Case = tuple[str, str, tuple, bool]
s = ctypes.c_char_p


def cases() -> list[Case]:
    """(label, system call, arguments, also made without the filter)."""
    from svc_sandbox.backends.seccomp import NAMESPACE_FLAGS
    table = [*_kernel_interfaces(), *_mounts_and_modules(), *_machine_state()]
    table += [(f"clone {name}", "clone", (flag | CLONE_THREAD, 0, 0, 0, 0), True)
              for name, flag in NAMESPACE_FLAGS.items()]
    return table


def _kernel_interfaces() -> list[Case]:
    """Keyrings, BPF, perf, io_uring and the handle and log calls."""
    return [
        ("add_key", "add_key", (s(b"user"), s(b"m1flow-probe"), s(b"x"), 1, -3), True),  # -3: this session's keyring
        ("keyctl", "keyctl", (0, -3, 0), True),  # KEYCTL_GET_KEYRING_ID
        ("request_key", "request_key", (s(b"user"), s(b"m1flow-none"), None, 0), True),
        ("bpf", "bpf", (5, None, 0), True),
        ("perf_event_open", "perf_event_open", (None, 0, -1, -1, 0), True),
        ("userfaultfd", "userfaultfd", (1,), True),  # UFFD_USER_MODE_ONLY
        ("io_uring_setup", "io_uring_setup", (0, None), True),
        ("io_uring_enter", "io_uring_enter", (NO_FD, 0, 0, 0, None, 0), True),
        ("io_uring_register", "io_uring_register", (NO_FD, 0, None, 0), True),
        ("kcmp", "kcmp", (os.getpid(), os.getpid(), 0, NO_FD, NO_FD), True),
        ("fanotify_init", "fanotify_init", (0xFFFFFFFF, 0), True),
        ("name_to_handle_at", "name_to_handle_at", (NO_FD, BAD, BAD, BAD, 0), True),
        ("open_by_handle_at", "open_by_handle_at", (NO_FD, BAD, 0), True),
        ("syslog", "syslog", (10, None, 0), True),  # SYSLOG_ACTION_SIZE_BUFFER: read-only
    ]


def _mounts_and_modules() -> list[Case]:
    """Namespaces, mounts and kernel modules."""
    return [
        ("unshare", "unshare", (0x04000000,), True),  # a UTS namespace of this probe's own
        ("setns", "setns", (NO_FD, 0), True),
        ("mount", "mount", (None, None, None, 0, None), True),
        ("umount2", "umount2", (s(b"/nonexistent-m1flow"), 0), True),
        ("pivot_root", "pivot_root", (None, None), True),
        ("chroot", "chroot", (s(b"/nonexistent-m1flow"),), True),
        ("move_mount", "move_mount", (NO_FD, BAD, NO_FD, BAD, 0), True),
        ("open_tree", "open_tree", (NO_FD, BAD, 0), True),
        ("fsopen", "fsopen", (BAD, 0), True),
        ("fsconfig", "fsconfig", (NO_FD, 0, None, None, 0), True),
        ("fsmount", "fsmount", (NO_FD, 0, 0), True),
        ("fspick", "fspick", (NO_FD, BAD, 0), True),
        ("mount_setattr", "mount_setattr", (NO_FD, BAD, 0, None, 0), True),
        ("init_module", "init_module", (BAD, 0, BAD), True),
        ("finit_module", "finit_module", (NO_FD, BAD, 0), True),
        ("delete_module", "delete_module", (s(b"m1flow_none"), 0), True),
    ]


def _machine_state() -> list[Case]:
    """The machine's own state (reboot, swap, clocks, names, ports) and other processes' memory."""
    return [
        ("kexec_load", "kexec_load", (0, 0, None, 0xFFFF0000), False),
        ("kexec_file_load", "kexec_file_load", (NO_FD, NO_FD, 0, None, 0xFFFF0000), False),
        ("reboot", "reboot", (0, 0, 0, None), False),  # wrong magic numbers
        ("swapon", "swapon", (BAD, 0), True),
        ("swapoff", "swapoff", (BAD,), True),
        ("acct", "acct", (BAD,), True),
        ("quotactl", "quotactl", (0, BAD, 0, None), True),
        ("settimeofday", "settimeofday", (BAD, BAD), True),
        ("clock_settime", "clock_settime", (-1, BAD), True),
        ("clock_adjtime", "clock_adjtime", (-1, BAD), True),
        ("adjtimex", "adjtimex", (BAD,), True),
        ("sethostname", "sethostname", (BAD, 100_000), True),  # longer than the kernel allows
        ("setdomainname", "setdomainname", (BAD, 100_000), True),
        ("iopl", "iopl", (4,), True),  # there is no level 4
        ("ioperm", "ioperm", (0xFFFFFFFF, 1, 1), True),
        ("vhangup", "vhangup", (), False),
        ("sysfs", "sysfs", (0,), True),
        ("process_vm_readv", "process_vm_readv", (os.getpid(), None, 0, None, 0, 0), True),
        ("process_vm_writev", "process_vm_writev", (os.getpid(), None, 0, None, 0, 0), True),
        ("pidfd_getfd", "pidfd_getfd", (NO_FD, NO_FD, 0), True),
        ("clone3", "clone3", (None, 0), True),
    ]


def install(bpf: bytes) -> None:
    """Load the filter into this process the way bwrap does (no_new_privs, then PR_SET_SECCOMP)."""
    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    program = ctypes.create_string_buffer(bpf, len(bpf))
    fprog = SockFprog(len(bpf) // 8, ctypes.addressof(program))
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "PR_SET_SECCOMP")


def main() -> None:
    from svc_sandbox.backends import seccomp
    filtered = "--filter" in sys.argv
    resolve = seccomp._lib().seccomp_syscall_resolve_name
    libc.syscall(250, 1, None)  # KEYCTL_JOIN_SESSION_KEYRING: a fresh anonymous session keyring for add_key
    if filtered:
        install(seccomp.filter_bpf())
    results = {}
    for label, name, args, baseline in cases():
        number = resolve(name.encode())
        if number < 0 or not (filtered or baseline):
            continue
        ctypes.set_errno(0)
        value = libc.syscall(ctypes.c_long(number), *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
        results[label] = ctypes.get_errno() if value == -1 else 0
        if value >= 0 and name in ("userfaultfd", "fanotify_init"):
            os.close(value)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
