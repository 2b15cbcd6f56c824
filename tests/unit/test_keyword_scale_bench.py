"""bench.keyword_scale at a tiny scale: the whole path runs on each store.

The benchmark takes about 20 minutes; this builds 500 and then 1,000
memories, so that a broken script is not first noticed when someone runs
``make bench``. It checks what the run did, never how fast.
"""

from __future__ import annotations

from bench import keyword_scale
from memsvc.search import MODES


def test_grows_a_database_and_measures_both_sizes(store_kind, tmp_path, capsys):
    (run,) = keyword_scale.main(
        [
            "--stores", store_kind, "--users", "5,10", "--warm-users", "2",
            "--warm-queries", "6", "--cold-users", "3", "--dir", str(tmp_path),
        ]
    )  # fmt: skip
    out = capsys.readouterr().out

    assert run.sizes == [500, 1000]
    assert [b.memories for b in run.built] == [500, 500]
    assert run.measured is not None
    times = run.measured.times
    for mode in MODES:
        for size in (0, 1):
            assert len(times[(f"{mode}, warm", size)]) == 2 * 6
            assert len(times[(f"{mode}, service call, warm", size)]) == 2 * 6
            assert len(times[(f"{mode}, first search", size)]) == 3
        assert len(times[(f"{mode}, first search, new user", 1)]) == 3
    # Per-user ranking: growing the database changes no answer.
    answers = run.measured.answers
    assert answers and all(
        answers[(*key[:3], 1)] == ids for key, ids in answers.items() if key[3] == 0
    )
    # Keyword search finds the words of a user's own memory, and nothing of others'.
    found = run.measured.found
    assert min(found[("keyword", "own")]) >= 1
    assert max(found[("keyword", "others only")]) == 0
    assert f"{run.label:<11}keyword, first search" in out
    assert "searches answered the same" in out
    assert not list(tmp_path.iterdir())  # the databases are gone
