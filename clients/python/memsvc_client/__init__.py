"""memsvc's Python client: per-user memories with semantic search, sync and async."""

from __future__ import annotations

from ._core import DEFAULT_MODE
from ._version import __version__
from .aio import AsyncMemsvc
from .client import Memsvc
from .errors import BadRequest
from .errors import ConnectionFailed
from .errors import MemsvcError
from .errors import NotFound
from .errors import RateLimited
from .errors import ServerError
from .errors import Unauthorized
from .models import UNSET
from .models import EndUser
from .models import Explain
from .models import Memory

__all__ = [
    "__version__",
    "DEFAULT_MODE",
    "Memsvc",
    "AsyncMemsvc",
    "Memory",
    "EndUser",
    "Explain",
    "UNSET",
    "MemsvcError",
    "BadRequest",
    "Unauthorized",
    "NotFound",
    "RateLimited",
    "ServerError",
    "ConnectionFailed",
]
