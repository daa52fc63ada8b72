"""Exec a program with NT_X86_XSTATE regset ptrace requests failing (the lab's "legacy" FPU mode).

Run by path, before anything else is imported: ``python -I -S seccomp_exec.py PROGRAM ARGS...``.
It installs a seccomp filter that makes ``ptrace(PTRACE_GETREGSET/PTRACE_SETREGSET,
pid, NT_X86_XSTATE, ...)`` fail with EIO, then execs PROGRAM. Debian 12's UML (6.1) then
believes the host has no XSTATE support and saves only the legacy FXSAVE area (x87 and SSE)
with PTRACE_GETFPREGS/SETFPREGS, which the host accepts whatever its XSAVE size is.

The price: YMM upper halves, AVX-512 and AMX state of guest processes are not preserved across
UML's page-fault handling, so the guest must not use AVX (lbtune.lab.guests.uml sets GLIBC_TUNABLES
and OPENSSL_ia32cap in the guest for that). The shim mode (xstate_shim.c) has no such limit and
is preferred whenever a C compiler is available. Only the standard library is used here.
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2

AUDIT_ARCH_X86_64 = 0xC000003E
NR_PTRACE_X86_64 = 101
PTRACE_GETREGSET = 0x4204
PTRACE_SETREGSET = 0x4205
NT_X86_XSTATE = 0x202
EIO = 5

SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000

BPF_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
BPF_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
BPF_RET_K = 0x06  # BPF_RET | BPF_K

# offsets in struct seccomp_data
OFF_NR = 0
OFF_ARCH = 4
OFF_ARG0_LO = 16
OFF_ARG2_LO = 32


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def filter_program() -> list[bytes]:
    """BPF: EIO for ptrace(GETREGSET|SETREGSET, _, NT_X86_XSTATE, _) on x86_64, else allow."""
    return [
        _insn(BPF_LD_W_ABS, 0, 0, OFF_ARCH),  # 0
        _insn(BPF_JEQ_K, 0, 7, AUDIT_ARCH_X86_64),  # 1: other arch -> 9 allow
        _insn(BPF_LD_W_ABS, 0, 0, OFF_NR),  # 2
        _insn(BPF_JEQ_K, 0, 5, NR_PTRACE_X86_64),  # 3: not ptrace -> 9 allow
        _insn(BPF_LD_W_ABS, 0, 0, OFF_ARG0_LO),  # 4: request
        _insn(BPF_JEQ_K, 1, 0, PTRACE_GETREGSET),  # 5: -> 7
        _insn(BPF_JEQ_K, 0, 2, PTRACE_SETREGSET),  # 6: other request -> 9 allow
        _insn(BPF_LD_W_ABS, 0, 0, OFF_ARG2_LO),  # 7: regset type (addr)
        _insn(BPF_JEQ_K, 1, 0, NT_X86_XSTATE),  # 8: -> 10 errno
        _insn(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),  # 9
        _insn(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | EIO),  # 10
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install_filter() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    program = filter_program()
    buf = ctypes.create_string_buffer(b"".join(program))
    prog = _SockFprog(len(program), ctypes.cast(buf, ctypes.c_void_p))
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(err)}")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_SECCOMP): {os.strerror(err)}")


def main(argv: list[str]) -> int:
    if not argv:
        sys.stderr.write("usage: seccomp_exec.py PROGRAM [ARGS...]\n")
        return 2
    try:
        install_filter()
        os.execv(argv[0], argv)  # noqa: S606 - exec by design, argv list, no shell
    except OSError as exc:
        sys.stderr.write(f"seccomp_exec: {exc}\n")
        return 127
    return 0  # not reached: execv does not return


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
