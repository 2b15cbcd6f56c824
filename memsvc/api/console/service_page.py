"""The console's service page: what ``service.info`` answers for the signed-in key (model,
defaults, its limits), whether memsvc can keep memories now, and the tenant's counts."""

from __future__ import annotations

from werkzeug.wrappers import Response

from ...services import readiness
from ..context import runtime
from ..context import store
from .pages import KEY
from .pages import bp
from .pages import call
from .pages import needs
from .pages import page

#: End users counted at most (the page says "1000+" beyond).
COUNTED = 1000


@bp.get("/service")
@needs(KEY)
def service() -> Response:
    info = call("service.info")
    problem = readiness.problem(runtime().backend, store)
    return call(
        "memory.users",
        {"limit": COUNTED},
        then=lambda counted: page(
            "service.html",
            info=info,
            problem=problem,
            users=len(counted),
            memories=sum(u["memories"] for u in counted),
            more=len(counted) == COUNTED,
        ),
    )
