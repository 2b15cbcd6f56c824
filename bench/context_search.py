"""What a search's conversation costs: hybrid with ``context: 2`` against hybrid without.

A user holds the eval set's conversations (tests/data/eval/conversations),
each session ingested with memory.ingest, its speakers and times (about
1,000 messages), under gunicorn (limits off). The same questions are asked
over one keep-alive connection in four ways, in rounds that take turns so
the machine's drift touches all alike:

  semantic             mode semantic, limit 10 (the baseline)
  hybrid               mode hybrid, limit 10: semantic and keyword candidates,
                       their records, sessions and parts (neighbours,
                       session, speaker, dates, time, newer)
  hybrid, context 2    the same with context: 2 (up to two messages of the
                       session before and after each message result)
  hybrid, time off     hybrid with time: "off"

Target: hybrid with context 2 within 1.3x of hybrid without.

    python -m bench.context_search [--rounds 5]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import pathlib
import statistics
import tempfile
import time

import requests

from bench.report import recording
from tests.support.servers import start_server

DATA = pathlib.Path(__file__).resolve().parents[1] / "tests" / "data" / "eval" / "conversations"


def sessions_and_questions() -> tuple[list[dict], list[str]]:
    """Every session of the set as ingest takes it, and every question."""
    sessions: list[dict] = []
    questions: list[str] = []
    for path in sorted(DATA.glob("*.jsonl")):
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        header = next(r for r in records if r["kind"] == "conversation")
        starts = {r["id"]: r["date"] for r in records if r["kind"] == "session"}
        turns: dict[str, list[dict]] = {}
        for r in records:
            if r["kind"] == "turn":
                turns.setdefault(r["session"], []).append(r)
            elif r["kind"] == "question":
                questions.append(r["question"])
        for session_id, said in turns.items():
            start = dt.datetime.fromisoformat(starts[session_id])
            sessions.append(
                {
                    "sessionId": f"{path.stem}-{session_id}",
                    "messages": [
                        {
                            "role": header["roles"][t["speaker"]],
                            "name": t["speaker"],
                            "content": t["text"],
                            "at": (start + dt.timedelta(minutes=i)).isoformat(),
                        }
                        for i, t in enumerate(said)
                    ],
                }
            )
    return sessions, questions


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    sessions, questions = sessions_and_questions()
    messages = sum(len(s["messages"]) for s in sessions)
    ways = {
        "semantic": {"mode": "semantic"},
        "hybrid": {"mode": "hybrid"},
        "hybrid, context 2": {"mode": "hybrid", "context": 2},
        "hybrid, time off": {"mode": "hybrid", "time": "off"},
    }
    seconds: dict[str, list[float]] = {way: [] for way in ways}
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(
            pathlib.Path(tmp), MEMSVC_RATE_LIMIT_PER_MINUTE="0", MEMSVC_CONCURRENCY_LIMIT="0"
        )
        try:
            http = requests.Session()
            http.headers.update({"x-api-key": server.create_key("bench", "bench")})
            base = server.trpc
            for body in sessions:
                resp = http.post(f"{base}/memory.ingest", json={"userId": "u", **body})
                assert resp.status_code == 200, resp.text[:300]

            def ask(extra: dict) -> None:
                for q in questions:
                    params = {"userId": "u", "query": q, "limit": 10, "threshold": 0, **extra}
                    resp = http.get(f"{base}/memory.search", params={"input": json.dumps(params)})
                    assert resp.status_code == 200, resp.text[:300]

            for extra in ways.values():
                ask(extra)  # warm: the user's snapshot, the query cache is per query
            for r in range(args.rounds):
                order = list(ways)[r % len(ways) :] + list(ways)[: r % len(ways)]
                for way in order:
                    started = time.perf_counter()
                    ask(ways[way])
                    seconds[way].append((time.perf_counter() - started) / len(questions))
        finally:
            server.stop()
    print(
        f"one user, {len(sessions)} sessions, {messages} messages (memory.ingest); "
        f"{len(questions)} questions, limit 10; median of {args.rounds} rounds taking turns"
    )
    ms = {way: 1000 * statistics.median(s) for way, s in seconds.items()}
    print(f"{'way':<20}{'ms per search':>14}{'x semantic':>12}")
    for way in ways:
        print(f"{way:<20}{ms[way]:>14.2f}{ms[way] / ms['semantic']:>12.2f}")
    print(
        f"hybrid with context 2 / hybrid: {ms['hybrid, context 2'] / ms['hybrid']:.2f}  "
        "(target <= 1.3)"
    )


if __name__ == "__main__":
    with recording("context_search"):
        main()
