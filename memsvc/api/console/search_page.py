"""The console's search playground: a search as the API runs it, with what a slightly lower
threshold would add, and the similarities drawn as a histogram; a message found is shown inside
its conversation (the messages around it)."""

from __future__ import annotations

import math
import typing as t

from flask import request
from werkzeug.wrappers import Response

from ...errors import ApiError
from ...errors import BadRequest
from .pages import KEY
from .pages import bp
from .pages import call
from .pages import failure
from .pages import iso_from_local
from .pages import needs
from .pages import page

MODES = ("hybrid", "semantic", "keyword")
KINDS = ("memory", "message", "fact")
#: Reading the query's time expressions: "auto" leaves it to the server (``time`` not sent).
TIMES = ("auto", "on", "off")


def _number(field: str, default: float, low: float, high: float) -> float:
    """A number of the search form, moved into ``low``..``high``; absent: ``default``.

    :raises BadRequest: it is no number (NaN and infinities are none either).
    """
    text = request.args.get(field)
    if text in (None, ""):
        return default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise BadRequest(f"{field} must be a number from {low:g} to {high:g}")
    return min(max(value, low), high)


def _scope() -> dict[str, t.Any]:
    """What the form narrows the search to, as the API's inputs; only what the user set.

    Values the console cannot read (a kind it does not know, a time that is
    no time) go to the API as given: it names the field and the rule.
    """
    scope: dict[str, t.Any] = {}
    kinds = request.args.getlist("kinds")
    if kinds:
        scope["kinds"] = kinds
    for field in ("occurredAfter", "occurredBefore"):
        if request.args.get(field):
            scope[field] = iso_from_local(request.args[field])
    if request.args.get("time") in ("on", "off"):
        scope["time"] = request.args["time"]
    if request.args.get("now"):
        scope["now"] = iso_from_local(request.args["now"])
    return scope


@bp.get("/search")
@needs(KEY)
def search() -> Response:
    info = call("service.info")
    recommended = info["embedder"]["recommendedThreshold"]
    default_threshold = recommended if recommended is not None else info["defaults"]["threshold"]
    user_id = request.args.get("user", "")
    query = request.args.get("q", "")
    mode = request.args.get("mode", "hybrid")
    mode = mode if mode in MODES else "hybrid"
    time = request.args.get("time", "auto")
    time = time if time in TIMES else "auto"
    error = None
    try:
        limit = int(_number("limit", 10, 1, 100))
        threshold = round(_number("threshold", default_threshold, 0, 1), 2)
        context = int(_number("context", 0, 0, 10))
    except BadRequest as e:
        limit, threshold, context = 10, round(default_threshold, 2), 0
        error = failure(e)

    def render(
        results: list[dict[str, t.Any]],
        below: list[dict[str, t.Any]],
        error: dict[str, t.Any] | None = error,
    ) -> Response:
        return page(
            "search.html",
            user_id=user_id,
            query=query,
            mode=mode,
            modes=MODES,
            limit=limit,
            threshold=threshold,
            recommended=recommended,
            kinds=KINDS,
            kinds_chosen=request.args.getlist("kinds"),
            context=context,
            occurred_after=request.args.get("occurredAfter", ""),
            occurred_before=request.args.get("occurredBefore", ""),
            time=time,
            times=TIMES,
            now=request.args.get("now", ""),
            results=results,
            below=below,
            chart=_chart(results + below, threshold, recommended),
            error=error,
        )

    if not (user_id and query) or error is not None:
        return render([], [])  # the form alone
    base = {"userId": user_id, "query": query, "mode": mode, "explain": True, **_scope()}
    asked = {**base, "limit": limit, "threshold": threshold}
    if context:
        asked["context"] = context
    try:
        if threshold <= 0:
            return call("memory.search", asked, then=lambda results: render(results, []))
        results = call("memory.search", asked)
        shown = {r["id"] for r in results}

        def with_near(near: list[dict[str, t.Any]]) -> Response:
            # What a slightly lower threshold would add: shown greyed, below the line.
            below = [r for r in near if r["id"] not in shown and r["similarity"] < threshold]
            return render(results, below[:5])

        # Without context: the results below the line are shown alone.
        lower = {**base, "limit": limit + 5, "threshold": max(0.0, threshold - 0.15)}
        return call("memory.search", lower, then=with_near)
    except ApiError as e:
        return render([], [], failure(e))


def _chart(
    results: list[dict[str, t.Any]], threshold: float, recommended: float | None
) -> dict[str, t.Any]:
    """A histogram of the results' similarities in ten bins, drawn as SVG by the template."""
    bins = [0] * 10
    for r in results:
        bins[min(int(r["similarity"] * 10), 9)] += 1
    top = max(bins) or 1
    height = 60
    bars = [
        {
            "x": i * 30,
            "h": round(height * n / top),
            "y": height - round(height * n / top),
            "n": n,
            "label": f"{i / 10:.1f}–{(i + 1) / 10:.1f}",
            "below": (i + 1) / 10 <= threshold,
        }
        for i, n in enumerate(bins)
    ]
    return {
        "bars": bars,
        "height": height,
        "threshold_x": round(threshold * 300),
        "recommended_x": None if recommended is None else round(recommended * 300),
    }
