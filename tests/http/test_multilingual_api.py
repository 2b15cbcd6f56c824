"""MEMSVC_LOCAL_MODEL=multilingual through the API: the bundled multilingual model itself."""

from __future__ import annotations

import dataclasses

import pytest
from click.testing import CliRunner

from memsvc.cli import cli
from memsvc.errors import ConfigError
from memsvc.services import keys
from tests.support.helpers import data
from tests.support.helpers import mutate
from tests.support.helpers import query

MODEL = "local:universal-sentence-encoder-multilingual-3"
MEMORIES = [
    "Meine Tochter Lena ist allergisch gegen Erdnüsse und Haselnüsse.",
    "Der Zahnarzttermin ist am Dienstag um neun Uhr in der Praxis am Markt.",
    "Mein Auto ist ein blauer VW Golf, Baujahr 2017.",
    "Ich spiele donnerstags Volleyball im Sportverein.",
    "Unsere Wohnung in Leipzig hat drei Zimmer und einen Balkon.",
    "User's sister lives in Toronto and works as a nurse.",
]
QUESTIONS = [
    "Hat meine Tochter eine Lebensmittelallergie?",  # German
    "Is my daughter allergic to any food?",  # English
]


def add_all(client, headers, user="anna"):
    for content in MEMORIES:
        data(mutate(client, "memory.add", {"userId": user, "content": content}, headers=headers))


def search(client, headers, text, user="anna"):
    found = query(
        client,
        "memory.search",
        {"userId": user, "query": text, "threshold": 0, "limit": 3},
        headers=headers,
    )
    return data(found)


@pytest.mark.parametrize("question", QUESTIONS)
def test_a_german_memory_is_found_first_by_a_german_and_an_english_question(configured, question):
    client, headers = configured(LOCAL_MODEL="multilingual")
    add_all(client, headers)
    results = search(client, headers, question)
    assert results[0]["content"] == MEMORIES[0]
    assert results[0]["similarity"] > results[1]["similarity"] + 0.1


def test_service_info_reports_the_multilingual_model_and_its_threshold(configured):
    client, headers = configured(LOCAL_MODEL="multilingual")
    info = data(query(client, "service.info", headers=headers))
    assert info["embedder"] == {
        "model": MODEL,
        "dimensions": 512,
        "maxTokens": 256,
        "recommendedThreshold": 0.2,
    }


def test_reembed_moves_a_minilm_database_to_the_multilingual_model(
    make_app, cli_context, multilingual_embedder
):
    app = make_app()  # MiniLM, the default
    with app.app_context():
        from memsvc.api.context import store

        secret = keys.create(store(), "tenant-A", "test", "memsvc").secret
    headers = {"x-api-key": secret}
    add_all(app.test_client(), headers)
    app.extensions["memsvc"].close()  # the service stops

    context = dataclasses.replace(
        cli_context,
        overrides={**(cli_context.overrides or {}), "LOCAL_MODEL": "multilingual"},
        embedder=multilingual_embedder,
    )
    result = CliRunner().invoke(cli, ["reembed", "--batch-size", "4"], obj=context)
    assert result.exit_code == 0, result.output
    assert f"Done: {len(MEMORIES)} memories now use {MODEL}" in result.stderr

    client = make_app(LOCAL_MODEL="multilingual").test_client()
    info = data(query(client, "service.info", headers=headers))
    assert info["embedder"]["model"] == MODEL
    for question in QUESTIONS:
        assert search(client, headers, question)[0]["content"] == MEMORIES[0]
    assert len(data(query(client, "memory.getAll", {"userId": "anna"}, headers=headers))) == 6
    with pytest.raises(ConfigError, match="memsvc reembed"):
        make_app()  # MiniLM no longer matches the database
