"""Every call into llama.cpp on one thread.

ggml computes each graph with an OpenMP team that belongs to the calling thread, and the team's
threads spin between tokens only while the same thread keeps calling. Starlette's thread pool runs
each step of a streamed answer on whichever worker is free, so tokens woke a sleeping team each
time: 64 decoded tokens took 2.64 s instead of 1.05 s (synthetic Qwen2.5-0.5B all-Q4_0, patched
build, 2 threads, Intel Xeon host). llama-cpp-python's server and the chat page use these two
functions in place of Starlette's.
"""

from __future__ import annotations

import asyncio
import functools
from concurrent.futures import ThreadPoolExecutor
from typing import AsyncIterator, Callable, Iterator, TypeVar

T = TypeVar("T")

_thread = ThreadPoolExecutor(1, thread_name_prefix="llama")
_END = object()


async def run_in_threadpool(func: Callable[..., T], *args, **kwargs) -> T:
    return await asyncio.get_running_loop().run_in_executor(_thread, functools.partial(func, *args, **kwargs))


async def iterate_in_threadpool(iterator: Iterator[T]) -> AsyncIterator[T]:
    while (item := await run_in_threadpool(next, iterator, _END)) is not _END:
        yield item
