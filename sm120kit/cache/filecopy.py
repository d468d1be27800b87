"""Copies of released files into a store: inside the kernel, or past the page cache.

A store's copy of a wheel only serves later hosts and runs, so it should cost the run that
makes it as little as possible: no pass through Python's buffers (`copy_in_kernel`) and, where
the filesystem allows it, no second copy of gigabytes in the page cache (`copy_past_cache`).
"""

from __future__ import annotations

import mmap
import os
import shutil
from pathlib import Path
from typing import Any


def copy_in_kernel(src: Any, dst: Any) -> None:
    """Copy the rest of file `src` to file `dst` inside the kernel (copy_file_range, else
    sendfile): gigabytes of released wheels never pass through Python's buffers."""
    n = 1 << 30
    try:
        while os.copy_file_range(src.fileno(), dst.fileno(), n):
            pass
        return
    except (AttributeError, OSError):
        pass
    shutil.copyfileobj(src, dst, 1 << 20)


#: The block of an uncached copy: a multiple of every logical block size O_DIRECT may require.
_DIRECT_BLOCK = 8 << 20
_DIRECT_ALIGN = 4096


def copy_past_cache(src: Path, tmp: Path) -> bool:
    """Copy file `src` to the new file `tmp` with O_DIRECT, made durable: False (nothing left at
    `tmp`) where this filesystem refuses it, for a copy through the page cache instead.

    A store's copy only serves later hosts and runs. Through the page cache the 4.4 GB of a
    lock's wheels took as much memory again while the host's install filled it with its env,
    and the kernel's reclaim and writeback of those pages cost the install about 15 CPU-s on
    2 cores (docs/benchmarks.md); uncached, the copy is one read from the cache the download
    just filled and a write the disk takes straight from this process's buffer.
    """
    direct = getattr(os, "O_DIRECT", 0)
    if not direct:
        return False
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | direct, 0o644)
    except OSError:
        tmp.unlink(missing_ok=True)  # O_EXCL: only a file this call made
        return False
    try:
        copied = write_direct(fd, src)
        if copied is not None:
            os.ftruncate(fd, copied)  # the last block's padding
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    if copied is None:
        tmp.unlink(missing_ok=True)
        return False
    return True


def write_direct(fd: int, src: Path) -> int | None:
    """Write file `src` to the O_DIRECT file `fd` in whole aligned blocks: the bytes copied, or
    None when the filesystem refused the first write (EINVAL: no O_DIRECT writes here)."""
    size = 0
    # An anonymous mapping is page-aligned, as O_DIRECT wants the buffer to be.
    with mmap.mmap(-1, _DIRECT_BLOCK) as buf, open(src, "rb", buffering=0) as sfh:
        view = memoryview(buf)
        try:
            while True:
                n = 0
                while n < _DIRECT_BLOCK:
                    got = sfh.readinto(view[n:])
                    if not got:
                        break
                    n += got
                if not n:
                    return size
                # The last block goes out padded to the alignment; the caller cuts it back.
                out = -(-n // _DIRECT_ALIGN) * _DIRECT_ALIGN
                view[n:out] = bytes(out - n)
                try:
                    done = os.write(fd, view[:out])
                except OSError:
                    if size:
                        raise
                    return None
                if done != out:
                    raise OSError(f"short write: {done} of {out} bytes")
                size += n
                if n < _DIRECT_BLOCK:
                    return size
        finally:
            view.release()
