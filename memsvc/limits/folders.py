"""Where the limiter's files live: a private folder, on tmpfs where the box has one."""

from __future__ import annotations

import os
import stat


def private_directory(path: str, uid: int | None = None) -> str:
    """Create ``path`` (mode 0700) or check that it is this user's and no one else's.

    The limiter's files decide who is admitted, so a folder another local
    user made first (a predictable name under /dev/shm), or one others can
    write, or a symbolic link, is refused rather than used.
    """
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        os.mkdir(path, 0o700)
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise PermissionError(f"{path} is not a folder (a symbolic link?)")
    if info.st_uid != (os.getuid() if uid is None else uid):
        raise PermissionError(f"{path} belongs to another user")
    if info.st_mode & 0o077:
        raise PermissionError(f"{path} can be used by other users (mode {info.st_mode & 0o777:o})")
    return path


def default_directory(database: str, instance_path: str) -> str:
    """Where limiter state lives: tmpfs if the box has one, else the instance folder.

    One folder per database file, named after its identity (device and
    inode), not its path: the same database reached by two paths (a
    symbolic link) shares one set of limits. The user id keeps two users'
    deployments apart.
    """
    info = os.stat(database)
    tag = f"{os.getuid()}-{info.st_dev:x}-{info.st_ino:x}"
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        return os.path.join(shm, f"memsvc-limits-{tag}")
    return os.path.join(instance_path, f"limits-{tag}")
