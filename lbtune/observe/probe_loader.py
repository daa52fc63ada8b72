"""Probes loaded in the background while a counter window (or a monitor) already runs.

A bcc compile takes seconds (about 4 s and 180 MB here), so `diagnose` and the monitor must
not wait for it: `BackgroundProbes.start` plans, compiles and attaches in a worker thread
and returns at once. The consumer keeps sampling counters; `session` is the open
`ProbeSession` once attached (None before), `failure` says why loading failed. `close()`
detaches everything; if the compile is still running it waits for it (a compile cannot be
interrupted) and then unloads what it made, so no program outlives the consumer.

The thread does all the loading: tracefs is mounted (when needed) in that thread's own mount
namespace, which is where bcc looks tracepoints up while attaching. Reads of an open session
are safe from any thread (see `ProbeSession`).
"""

from __future__ import annotations

import threading
import time
from typing import Optional, Sequence

from lbtune.errors import LbtuneError
from lbtune.host.host import Host
from lbtune.observe.probe_plan import Status
from lbtune.observe.probes import ProbeSample, ProbeSession

__all__ = ["BackgroundProbes"]


class BackgroundProbes:
    """Probes being loaded (or loaded) by a worker thread; see the module docstring."""

    def __init__(
        self,
        host: Host,
        probes: Sequence[str],
        ifaces: Optional[Sequence[str]] = None,
        status: Optional[Status] = None,
    ) -> None:
        self.host = host
        self.probes = tuple(probes)
        self.ifaces = list(ifaces) if ifaces else None
        self._status = status
        self._lock = threading.Lock()
        self._closing = False
        self._session: Optional[ProbeSession] = None
        self.failure: Optional[str] = None  # one line: why loading failed
        self.started = time.monotonic()
        self.attached_at: Optional[float] = None  # monotonic time the programs were attached
        self.attached = threading.Event()  # set when attached, or when loading failed
        self._thread = threading.Thread(target=self._load, name="lbtune-probe-load", daemon=True)

    @classmethod
    def start(
        cls,
        host: Host,
        probes: Sequence[str],
        ifaces: Optional[Sequence[str]] = None,
        status: Optional[Status] = None,
    ) -> BackgroundProbes:
        """Begin planning, compiling and attaching `probes`; returns at once."""
        loader = cls(host, probes, ifaces, status)
        loader._thread.start()
        return loader

    def _load(self) -> None:
        try:
            session = ProbeSession.open(self.host, self.probes, self.ifaces, self._status)
        except LbtuneError as e:
            self.failure = str(e)
        except Exception as e:  # bcc and LLVM fail in many ways; the counters carry on
            self.failure = f"{type(e).__name__}: {e}".splitlines()[0]
        else:
            with self._lock:
                if self._closing:  # the consumer went away while we compiled
                    session.close()
                else:
                    self._session = session
                    self.attached_at = time.monotonic()
                    if self._status is not None:
                        self._status("attached")
        finally:
            self.attached.set()

    @property
    def session(self) -> Optional[ProbeSession]:
        """The attached session, None while loading (or after a failure or close)."""
        with self._lock:
            return self._session

    @property
    def loading(self) -> bool:
        return not self.attached.is_set()

    def read(self) -> Optional[ProbeSample]:
        """What the probes counted since the previous read (the first: since attaching);
        None when they are not attached."""
        session = self.session
        if session is None or session.closed:
            return None
        try:
            return session.read()
        except RuntimeError:  # closed by another thread meanwhile
            return None

    def close(self, wait: float = 60.0) -> None:
        """Detach and unload everything; waits up to `wait` s for a compile in progress."""
        with self._lock:
            self._closing = True
            session, self._session = self._session, None
        if session is not None:
            session.close()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(wait)
