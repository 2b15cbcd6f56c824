"""Long memories with the bundled model: any length is stored, and found by any of its parts."""

from __future__ import annotations

import random

from tests.support.helpers import data
from tests.support.helpers import mutate
from tests.support.helpers import query

DAYS = [
    "On Monday",
    "On Tuesday",
    "The next morning",
    "Later that week",
    "On Saturday",
    "After breakfast",
    "Early on Sunday",
    "That evening",
    "Around noon",
    "Before sunset",
]
PEOPLE = [
    "we",
    "my brother and I",
    "the whole family",
    "our guide",
    "my aunt",
    "the two of us",
    "a friendly local couple",
    "my cousins",
]
ACTS = [
    "walked along",
    "took a slow train to",
    "cycled up to",
    "wandered around",
    "drove past",
    "spent two hours exploring",
    "queued for tickets at",
    "picnicked near",
    "got lost somewhere around",
    "photographed",
]
PLACES = [
    "the old harbour",
    "a hilltop monastery",
    "the covered market",
    "the botanical garden",
    "a crumbling castle",
    "the river promenade",
    "a tiny fishing village",
    "the modern art museum",
    "the cathedral square",
    "a vineyard outside town",
    "the railway museum",
    "a windy lighthouse",
]
AFTER = ["and the weather turned cold.", "and ate grilled sardines with bread.",
         "and bought postcards for the neighbours.", "and listened to a street accordionist.",
         "where the views over the valley were stunning.", "and argued about the best route back.",
         "and stopped for coffee and custard tarts.", "although half of it was closed.",
         "and met a dog that followed us for an hour.",
         "and watched the ferries come and go."]  # fmt: skip

FACT = "The spare key to the holiday flat was hidden inside the red watering can on the balcony."
QUESTION = "Where was the spare key of the apartment kept?"

DISTRACTORS = [
    "User prefers window seats on long flights", "User's sister lives in Melbourne",
    "User is allergic to cats", "User drinks oat milk in coffee", "User's car is a blue hatchback",
    "User practises yoga on Wednesday evenings", "User is learning Portuguese",
    "User's favourite band is Radiohead", "User has a meeting with the bank on Friday",
    "User keeps a sourdough starter called Bubbles", "User's office is on the fourth floor",
    "User dislikes horror films", "User's birthday is on 3 March",
    "User runs five kilometres daily",
    "User lost their house keys last winter", "User locks the bike with a combination lock",
    "User's locker at the gym is number 42", "User keeps passwords in a password manager",
    "User's landlord is called Mr Adeyemi", "User watered the plants on the balcony yesterday",
    "User wants to visit Japan in spring", "User's daughter plays the violin",
    "User booked a dentist appointment", "User is vegetarian", "User reads science fiction",
    "User grows tomatoes in the garden", "User has two brothers", "User works as a nurse",
    "User's flat has a red front door", "User's phone is an old Android",
    "User is saving for a new sofa", "User dislikes the smell of coriander",
    "User's cousin is getting married in June", "User takes the 8:15 bus to work",
    "User's favourite colour is green", "User plays padel on Sundays",
    "User's laptop needs a new battery", "User likes jazz piano", "User's mother is a teacher",
    "User volunteers at the food bank", "User is afraid of heights",
    "User's passport expires next year", "User has a cat named Miso",
    "User drinks green tea in the afternoon", "User moved house in August",
    "User is training for a half marathon", "User has a peanut allergy",
    "User bought a new kettle", "User uses a standing desk", "User likes spicy food",
]  # fmt: skip


def long_diary() -> str:
    """About 2,000 words of a travel diary, with one fact near its end."""
    rng = random.Random(7)
    sentences = [
        f"{rng.choice(DAYS)} {rng.choice(PEOPLE)} {rng.choice(ACTS)} "
        f"{rng.choice(PLACES)} {rng.choice(AFTER)}"
        for _ in range(150)
    ]
    sentences.insert(128, FACT)
    return " ".join(sentences)


def test_a_question_about_one_sentence_of_a_2000_word_memory_finds_it_first(client, auth):
    diary = long_diary()
    assert len(diary.split()) >= 2000
    for text in DISTRACTORS:
        mutate(client, "memory.add", {"userId": "u", "content": text}, headers=auth)
    added = data(mutate(client, "memory.add", {"userId": "u", "content": diary}, headers=auth))
    assert added["content"] == diary
    found = data(
        query(
            client,
            "memory.search",
            {"userId": "u", "query": QUESTION, "threshold": 0},
            headers=auth,
        )
    )
    assert found[0]["id"] == added["id"], [m["content"][:60] for m in found]
    # The same, on the uncached path of a fresh app over the same database.
    with client.application.app_context():
        from memsvc.api.context import runtime

        runtime().search_cache = None
    again = data(
        query(
            client,
            "memory.search",
            {"userId": "u", "query": QUESTION, "threshold": 0},
            headers=auth,
        )
    )
    assert again == found


def test_a_memory_as_long_as_the_size_limit_allows_is_stored_and_bounded(client, auth, app):
    text = ("word " * 13_108)[:65_536]
    added = data(mutate(client, "memory.add", {"userId": "u", "content": text}, headers=auth))
    assert len(added["content"]) == 65_536
    with app.app_context():
        from memsvc.api.context import store

        (windows,) = store().conn.execute("SELECT windows FROM memories").fetchone()
    # 13,108 tokens and no sentence end: windows of 48 tokens overlapping by 12.
    assert 360 <= windows <= 366
