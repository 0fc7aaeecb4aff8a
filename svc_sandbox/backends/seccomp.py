"""The jail's system-call filter, compiled by libseccomp (through ctypes) into a BPF program.

Why a filter on top of namespaces and an unprivileged uid: the kernel still offers an
unprivileged program calls that reach state outside its namespaces (the keyrings, keyed by uid
and never namespaced), large attack surfaces (bpf, perf_event_open, userfaultfd, io_uring) and
new namespaces of its own (a user namespace hands it capabilities over them). In the spirit of
Docker's default profile, those calls fail with EPERM; everything else is allowed, so Python,
compilers, git and test suites run unchanged. `clone3` fails with ENOSYS (its flags sit behind a
pointer the filter cannot read) so the C library falls back to `clone`, whose flags it can.
Foreign architectures (32-bit and x32 entry points) are killed: they would bypass the numbers.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os

# Calls no sandboxed program needs, after Docker's default profile (moby/profiles/seccomp).
DENIED: tuple[str, ...] = (
    # kernel keyrings: keyed by uid, shared by every process of a uid and never namespaced
    "add_key", "keyctl", "request_key",
    # attack surface and kernel introspection
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "lookup_dcookie", "kcmp", "fanotify_init", "name_to_handle_at", "open_by_handle_at", "syslog",
    # namespaces and mounts
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr",
    # kernel modules, reboot, kexec, swap, accounting, quotas
    "init_module", "finit_module", "delete_module", "create_module", "kexec_load", "kexec_file_load",
    "reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "nfsservctl",
    # clocks, host names, raw I/O ports, obsolete or privileged leftovers
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "sethostname", "setdomainname",
    "iopl", "ioperm", "vhangup", "uselib", "ustat", "sysfs", "_sysctl", "get_kernel_syms",
    "query_module", "process_vm_readv", "process_vm_writev", "pidfd_getfd",
)
NAMESPACE_FLAGS = {  # clone(2) flags that make a namespace (CLONE_NEWTIME is a clone3/unshare flag)
    "CLONE_NEWNS": 0x00020000, "CLONE_NEWCGROUP": 0x02000000, "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000, "CLONE_NEWUSER": 0x10000000, "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}
_ALLOW = 0x7FFF0000  # SCMP_ACT_ALLOW
_CMP_MASKED_EQ = 7  # SCMP_CMP_MASKED_EQ: (arg & datum_a) == datum_b


def _errno_action(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)  # SCMP_ACT_ERRNO(code)


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


@functools.cache
def _lib() -> ctypes.CDLL:
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    lib = ctypes.CDLL(name, use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(_ArgCmp)]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return lib


def available() -> str:
    """Empty when libseccomp can be loaded here, else why not."""
    try:
        _lib()
    except OSError as err:
        return f"libseccomp not loadable ({err}); install libseccomp2"
    return ""


def _add(ctx: int, action: int, name: str, *conditions: _ArgCmp) -> None:
    lib = _lib()
    number = lib.seccomp_syscall_resolve_name(name.encode())
    if number < 0:  # unknown on this architecture (e.g. create_module on new kernels): nothing to deny
        return
    array = (_ArgCmp * len(conditions))(*conditions) if conditions else None
    result = lib.seccomp_rule_add_array(ctypes.c_void_p(ctx), action, number, len(conditions), array)
    if result < 0:
        raise OSError(-result, f"seccomp_rule_add({name}): {os.strerror(-result)}")


@functools.cache
def filter_bpf() -> bytes:
    """The filter as a BPF program (struct sock_filter[]), what `bwrap --seccomp FD` loads."""
    lib = _lib()
    ctx = lib.seccomp_init(_ALLOW)
    if not ctx:
        raise OSError("seccomp_init failed")
    fd = os.memfd_create("m1flow-seccomp", 0)
    try:
        for name in DENIED:
            _add(ctx, _errno_action(errno.EPERM), name)
        _add(ctx, _errno_action(errno.ENOSYS), "clone3")
        for flag in NAMESPACE_FLAGS.values():
            _add(ctx, _errno_action(errno.EPERM), "clone", _ArgCmp(0, _CMP_MASKED_EQ, flag, flag))
        result = lib.seccomp_export_bpf(ctypes.c_void_p(ctx), fd)
        if result < 0:
            raise OSError(-result, f"seccomp_export_bpf: {os.strerror(-result)}")
        os.lseek(fd, 0, os.SEEK_SET)
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
        lib.seccomp_release(ctypes.c_void_p(ctx))
