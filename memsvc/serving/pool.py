"""The worker's thread pool: the thread idle the shortest time takes the next request.

gunicorn's thread worker hands each request to a ``ThreadPoolExecutor``,
whose threads all wait on one queue and take turns: under light load a
worker's requests go round all its threads. Each memsvc thread keeps its
own SQLite connection (its page cache, its prepared statements) and its
own stack, so every request then starts with caches another request left
cold: a ``memory.getById`` over one keep-alive connection took 11% longer
with 8 threads than with 1.

:class:`LastIdleFirstPool` gives each request to the thread that finished
most recently, the one whose caches are warm; the others sleep until the
load needs them. It keeps what gunicorn uses of an executor: ``submit``
returning a :class:`concurrent.futures.Future`, and ``shutdown``.
"""

from __future__ import annotations

import collections
import threading
import typing as t
import weakref
from concurrent import futures

#: Every pool of this process, told to stop when the interpreter exits.
_POOLS: weakref.WeakSet[LastIdleFirstPool] = weakref.WeakSet()


#: A call: its future, the function and its arguments.
_Item = tuple["futures.Future[t.Any]", t.Callable[..., t.Any], tuple[t.Any, ...]]


class _Idle:
    """A thread waiting for work: it sleeps on ``wake`` until handed ``item``."""

    __slots__ = ("wake", "item")

    def __init__(self) -> None:
        self.wake = threading.Lock()
        self.wake.acquire()
        self.item: _Item | None = None


class LastIdleFirstPool(futures.Executor):
    """At most ``max_workers`` threads; the most recently idle one runs the next call.

    Threads start as calls need them, up to the maximum; calls beyond it
    wait in order of arrival. After :meth:`shutdown` no call is taken, and
    each thread ends once its call (and those already waiting) are done.
    """

    def __init__(self, max_workers: int, *, name: str = "memsvc-worker") -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self.max_workers = max_workers
        self.name = name
        self._lock = threading.Lock()
        #: Idle threads, the most recently idle last.
        self._idle: list[_Idle] = []
        #: Calls no thread has taken yet, oldest first.
        self._waiting: collections.deque[_Item] = collections.deque()
        self._threads: list[threading.Thread] = []
        self._stopping = False
        _POOLS.add(self)

    def submit(
        self, fn: t.Callable[..., t.Any], /, *args: t.Any, **kwargs: t.Any
    ) -> futures.Future[t.Any]:
        if kwargs:
            return self.submit(lambda: fn(*args, **kwargs))
        future: futures.Future[t.Any] = futures.Future()
        item: _Item = (future, fn, args)
        with self._lock:
            if self._stopping:
                raise RuntimeError("cannot schedule new calls after shutdown")
            if self._idle:
                idle = self._idle.pop()
                idle.item = item
                idle.wake.release()
                return future
            if len(self._threads) < self.max_workers:
                thread = threading.Thread(
                    target=self._serve,
                    args=(item,),
                    name=f"{self.name}-{len(self._threads)}",
                )
                self._threads.append(thread)
                thread.start()
                return future
            self._waiting.append(item)
        return future

    def _serve(self, item: _Item | None) -> None:
        idle = _Idle()
        while item is not None:
            future, fn, args = item
            result: t.Any = None
            failed: BaseException | None = None
            run = future.set_running_or_notify_cancel()
            if run:
                try:
                    result = fn(*args)
                except BaseException as e:
                    failed = e
            # Idle (or on to a waiting call) before the result is out: its
            # callbacks may hand over the next call at once, which must find
            # this thread, not start another.
            with self._lock:
                sleep = not self._waiting and not self._stopping
                if sleep:
                    self._idle.append(idle)
                item = self._waiting.popleft() if self._waiting else None
            if run:
                if failed is None:
                    future.set_result(result)
                else:
                    future.set_exception(failed)
            del future, fn, args, result, failed
            if sleep:
                idle.wake.acquire()  # until submit() or shutdown() hands over a call, or None
                item, idle.item = idle.item, None

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._stopping = True
            if cancel_futures:
                while self._waiting:
                    self._waiting.popleft()[0].cancel()
            idle, self._idle = self._idle, []
            threads = list(self._threads)
        for sleeper in idle:
            sleeper.item = None
            sleeper.wake.release()
        if wait:
            for thread in threads:
                if thread is not threading.current_thread():
                    thread.join()


def _stop_all() -> None:
    """At exit: idle threads end; busy ones end after their call, and exit waits for them.

    As ``ThreadPoolExecutor`` does: a worker leaving without calling
    :meth:`LastIdleFirstPool.shutdown` must not wait forever on threads
    that sleep for work.
    """
    for pool in list(_POOLS):
        pool.shutdown(wait=False)


# Before the interpreter joins its threads at exit (concurrent.futures does the same).
threading._register_atexit(_stop_all)  # type: ignore[attr-defined]
