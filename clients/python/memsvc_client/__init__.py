"""memsvc's Python client: per-user memories with semantic search, sync and async."""

from __future__ import annotations

from ._core import DEFAULT_MODE
from ._core import Message
from ._version import __version__
from .aio import AsyncMemsvc
from .client import Memsvc
from .errors import BadRequest
from .errors import ConnectionFailed
from .errors import JobTimeout
from .errors import MemsvcError
from .errors import NotFound
from .errors import RateLimited
from .errors import ServerError
from .errors import Unauthorized
from .models import UNSET
from .models import Context
from .models import DateSpan
from .models import EndUser
from .models import Explain
from .models import Ingested
from .models import Job
from .models import JobFacts
from .models import JobStatus
from .models import JobUsage
from .models import Memory
from .models import Session

__all__ = [
    "__version__",
    "DEFAULT_MODE",
    "Memsvc",
    "AsyncMemsvc",
    "Memory",
    "EndUser",
    "Explain",
    "Message",
    "Ingested",
    "Job",
    "JobFacts",
    "JobStatus",
    "JobUsage",
    "Session",
    "Context",
    "DateSpan",
    "UNSET",
    "MemsvcError",
    "BadRequest",
    "Unauthorized",
    "NotFound",
    "RateLimited",
    "ServerError",
    "ConnectionFailed",
    "JobTimeout",
]
