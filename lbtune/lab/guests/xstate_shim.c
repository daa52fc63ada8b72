/*
 * LD_PRELOAD shim for Debian 12's linux.uml (UML 6.1) on hosts with a large XSAVE area.
 *
 * UML 6.1 saves and restores a guest process's FPU/vector state with
 * ptrace(PTRACE_GETREGSET/PTRACE_SETREGSET, NT_X86_XSTATE) into a fixed 832-byte buffer
 * (legacy area + header + AVX).  Since AMX, the host kernel refuses a SETREGSET whose length
 * is not the full user XSAVE size (11008 bytes with AMX) with EFAULT, and UML panics with
 * "userspace - ptrace set fp regs failed, errno = 14" when it starts init.  Even where the
 * set succeeds, AVX-512 state (opmask, ZMM_Hi256, Hi16_ZMM) and PKRU would not be saved.
 *
 * This shim keeps, for every buffer UML uses, a full-size shadow copy of the state:
 *   GETREGSET(pid, buf[n < full])  -> read the full state into shadow[buf], copy n bytes to buf
 *   SETREGSET(pid, buf[n < full])  -> overlay buf's n bytes on shadow[buf], write full state
 * so the part UML does not know about is restored exactly as it was read into the same buffer,
 * which is what an UML with a correctly sized buffer does.  Every other ptrace request is
 * passed through unchanged.  Built and used by lbtune.lab.uml; nothing is installed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#define SLOTS 1024u
#define PROBES 8u

struct slot {
	void *key;
	unsigned char *state;
};

static struct slot slots[SLOTS];
static size_t full_size;

static long raw_regset(long request, pid_t pid, struct iovec *iov)
{
	return syscall(SYS_ptrace, request, (long)pid, (long)NT_X86_XSTATE, iov);
}

static size_t host_xstate_size(pid_t pid)
{
	static unsigned char probe[1 << 16];
	struct iovec iov = { probe, sizeof(probe) };

	if (full_size == 0 && raw_regset(PTRACE_GETREGSET, pid, &iov) == 0)
		full_size = iov.iov_len;
	return full_size;
}

static struct slot *slot_for(void *key)
{
	size_t h = (size_t)(((uintptr_t)key >> 4) % SLOTS);
	size_t i;

	for (i = 0; i < PROBES; i++) {
		struct slot *s = &slots[(h + i) % SLOTS];
		if (s->key == key || s->key == NULL) {
			s->key = key;
			return s;
		}
	}
	/* Table crowded around h: reuse the home slot (its owner falls back to live state). */
	slots[h].key = key;
	return &slots[h];
}

static long xstate(long request, pid_t pid, struct iovec *uiov)
{
	size_t full = host_xstate_size(pid);
	struct slot *s;
	struct iovec iov;

	if (full == 0 || uiov == NULL || uiov->iov_len >= full)
		return raw_regset(request, pid, uiov);

	s = slot_for(uiov->iov_base);
	if (s->state == NULL) {
		s->state = malloc(full);
		if (s->state == NULL) {
			errno = ENOMEM;
			return -1;
		}
		memset(s->state, 0, full);
		if (request == PTRACE_SETREGSET) {
			/* Never read into this buffer: start from the tracee's live state. */
			iov.iov_base = s->state;
			iov.iov_len = full;
			if (raw_regset(PTRACE_GETREGSET, pid, &iov) != 0)
				return -1;
		}
	}
	iov.iov_base = s->state;
	iov.iov_len = full;
	if (request == PTRACE_GETREGSET) {
		if (raw_regset(PTRACE_GETREGSET, pid, &iov) != 0)
			return -1;
		memcpy(uiov->iov_base, s->state, uiov->iov_len);
		return 0;
	}
	memcpy(s->state, uiov->iov_base, uiov->iov_len);
	return raw_regset(PTRACE_SETREGSET, pid, &iov);
}

long ptrace(enum __ptrace_request request, ...)
{
	static long (*real_ptrace)(enum __ptrace_request, ...);
	va_list ap;
	pid_t pid;
	void *addr;
	void *data;

	va_start(ap, request);
	pid = va_arg(ap, pid_t);
	addr = va_arg(ap, void *);
	data = va_arg(ap, void *);
	va_end(ap);

	if ((request == PTRACE_GETREGSET || request == PTRACE_SETREGSET) &&
	    (uintptr_t)addr == NT_X86_XSTATE)
		return xstate(request, pid, (struct iovec *)data);

	if (real_ptrace == NULL)
		real_ptrace = (long (*)(enum __ptrace_request, ...))dlsym(RTLD_NEXT, "ptrace");
	if (real_ptrace == NULL) {
		errno = ENOSYS;
		return -1;
	}
	return real_ptrace(request, pid, addr, data);
}
