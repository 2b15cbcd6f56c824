"""``service.info``: the deployment's model, defaults and the caller's limits."""

from __future__ import annotations

import typing as t

from ..embeddings import Embedder
from ..limits import Limits

#: Thresholds measured with ``make eval`` (bench/eval.py) on memsvc's
#: labelled set: the similarity that best separates related from unrelated
#: memories, over the English questions for MiniLM (which reads English
#: only) and over every question for the multilingual model
#: (bench/eval_multilingual.py). Operators measure other models the same
#: way and set MEMSVC_RECOMMENDED_THRESHOLD.
MEASURED_THRESHOLDS = {
    "local:all-MiniLM-L6-v2": 0.35,
    "local:universal-sentence-encoder-multilingual-3": 0.2,
}


def recommended_threshold(embedder: Embedder, settings: t.Mapping[str, t.Any]) -> float | None:
    configured = settings["RECOMMENDED_THRESHOLD"]
    if configured is not None:
        return float(configured)
    return MEASURED_THRESHOLDS.get(embedder.model_id)


def describe(
    version: str, embedder: Embedder, settings: t.Mapping[str, t.Any], limits: Limits
) -> dict[str, t.Any]:
    return {
        "version": version,
        "embedder": {
            "model": embedder.model_id,
            "dimensions": embedder.dimensions,
            "maxTokens": embedder.max_tokens,
            "recommendedThreshold": recommended_threshold(embedder, settings),
        },
        "defaults": {"threshold": settings["SEARCH_DEFAULT_THRESHOLD"], "limit": 10},
        "limits": {"perMinute": limits.per_minute, "concurrent": limits.concurrent},
    }
