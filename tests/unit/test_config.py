import pathlib
import stat

import pytest

from memsvc import create_app
from memsvc import generated_docs
from memsvc import settings
from memsvc.errors import ConfigError


def make(tmp_path, **settings):
    return create_app(
        {"DATABASE": str(tmp_path / "db.sqlite3"), **settings},
        instance_path=str(tmp_path / "instance"),
    )


@pytest.mark.parametrize(
    "setting, value, message",
    [
        ("EMBEDDER", "magic", "MEMSVC_EMBEDDER must be one of local, openai, got 'magic'"),
        ("LOCAL_MODEL", "bert", "MEMSVC_LOCAL_MODEL must be one of minilm, multilingual, got"),
        ("EMBEDDING_DIMENSIONS", "abc", "MEMSVC_EMBEDDING_DIMENSIONS must be a positive whole"),
        ("EMBEDDING_DIMENSIONS", 0, "MEMSVC_EMBEDDING_DIMENSIONS must be a positive whole"),
        ("EMBEDDING_URL", "ftp://x", "MEMSVC_EMBEDDING_URL must be an http(s) URL"),
        ("EMBEDDING_TIMEOUT", -1, "MEMSVC_EMBEDDING_TIMEOUT must be a positive number"),
        ("SQLITE_SYNCHRONOUS", "OFF", "MEMSVC_SQLITE_SYNCHRONOUS must be one of"),
        ("API_KEY_WORD", "a_b", "MEMSVC_API_KEY_WORD must be letters and digits"),
        ("MAX_BATCH_SIZE", True, "MEMSVC_MAX_BATCH_SIZE must be a positive whole"),
    ],
)
def test_a_bad_setting_fails_start_up_naming_it(tmp_path, setting, value, message):
    with pytest.raises(ConfigError) as e:
        make(tmp_path, **{setting: value})
    assert str(e.value).startswith(message)
    assert "\n" not in str(e.value)


def test_settings_come_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMSVC_EMBEDDING_DIMENSIONS", "abc")
    with pytest.raises(ConfigError, match="MEMSVC_EMBEDDING_DIMENSIONS"):
        make(tmp_path)
    monkeypatch.setenv("MEMSVC_EMBEDDING_DIMENSIONS", "768")
    monkeypatch.setenv("MEMSVC_MAX_BATCH_SIZE", "7")
    app = make(tmp_path)
    assert app.config["EMBEDDING_DIMENSIONS"] == 768
    assert app.config["MAX_BATCH_SIZE"] == 7


def test_settings_come_from_the_instance_config_file(tmp_path):
    instance = tmp_path / "instance"
    instance.mkdir()
    (instance / "config.py").write_text("MAX_BATCH_SIZE = 9\n")
    assert make(tmp_path).config["MAX_BATCH_SIZE"] == 9


def test_the_database_defaults_to_the_instance_folder(tmp_path):
    app = create_app(instance_path=str(tmp_path / "inst"))
    assert app.config["DATABASE"] == str(tmp_path / "inst" / "memsvc.sqlite3")
    assert (tmp_path / "inst" / "memsvc.sqlite3").exists()


def test_openai_needs_a_key_for_the_openai_api_but_not_for_local_servers(tmp_path):
    with pytest.raises(ConfigError, match="MEMSVC_EMBEDDING_API_KEY must be set"):
        make(tmp_path, EMBEDDER="openai")
    (tmp_path / "b").mkdir()
    make(tmp_path / "b", EMBEDDER="openai", EMBEDDING_URL="http://127.0.0.1:11434/v1")


def test_a_bad_secret_setting_is_named_but_never_echoed(tmp_path):
    with pytest.raises(ConfigError) as e:
        make(tmp_path, JWT_SECRET="too-short-but-still-secret")
    assert str(e.value) == "MEMSVC_JWT_SECRET must be at least 32 characters long, got (hidden)"
    with pytest.raises(ConfigError) as e:
        make(tmp_path, EMBEDDER="openai", EMBEDDING_API_KEY="", EMBEDDING_URL="http://x.test")
    assert str(e.value) == "MEMSVC_EMBEDDING_API_KEY must be a string, got (hidden)"


def test_numeric_looking_secrets_stay_strings(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMSVC_JWT_SECRET", "1" * 40)
    monkeypatch.setenv("MEMSVC_EMBEDDING_API_KEY", "12345")
    app = make(tmp_path)
    assert app.config["JWT_SECRET"] == "1" * 40
    assert app.config["EMBEDDING_API_KEY"] == "12345"
    app.extensions["memsvc"].close()


def test_an_unknown_environment_variable_is_named_with_the_closest_setting(
    tmp_path, monkeypatch, caplog
):
    monkeypatch.setenv("MEMSVC_EMBEDING_MODEL", "text-embedding-3-large")
    monkeypatch.setenv("MEMSVC_NOT_A_THING", "1")
    app = make(tmp_path)
    messages = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert (
        "MEMSVC_EMBEDING_MODEL is not a memsvc setting and is ignored; "
        "did you mean MEMSVC_EMBEDDING_MODEL?"
    ) in messages
    assert "MEMSVC_NOT_A_THING is not a memsvc setting and is ignored" in messages
    app.extensions["memsvc"].close()


@pytest.mark.parametrize(
    "typo, meant",
    [
        # One word of two settings' names: both, not THREADS, which is spelt alike.
        ("MEMSVC_THRESHOLD", ["MEMSVC_RECOMMENDED_THRESHOLD", "MEMSVC_SEARCH_DEFAULT_THRESHOLD"]),
        ("MEMSVC_DEFAULT_THRESHOLD", ["MEMSVC_SEARCH_DEFAULT_THRESHOLD"]),
        ("MEMSVC_THRESHOLD_DEFAULT", ["MEMSVC_SEARCH_DEFAULT_THRESHOLD"]),
        ("MEMSVC_THREAD", ["MEMSVC_THREADS"]),
        ("MEMSVC_EMBEDING_MODEL", ["MEMSVC_EMBEDDING_MODEL"]),
        ("MEMSVC_SQLITE_SYNCRONOUS", ["MEMSVC_SQLITE_SYNCHRONOUS"]),
        # Every word of two settings' names: both, the one spelt nearer first.
        (
            "MEMSVC_CONCURENCY_LIMIT",
            ["MEMSVC_CONCURRENCY_LIMIT", "MEMSVC_TENANT_CONCURRENCY_LIMIT"],
        ),
        ("MEMSVC_MAX_CONTENT_CHAR", ["MEMSVC_MAX_CONTENT_CHARS"]),
        ("MEMSVC_LOG_URLS", ["MEMSVC_LOG_FULL_URLS"]),
        # The setting's other name, and words for its words.
        ("MEMSVC_WORKERS", ["WEB_CONCURRENCY"]),
        ("MEMSVC_DATABASE_URL", ["MEMSVC_DATABASE"]),
        ("MEMSVC_PORT", ["MEMSVC_METRICS_BIND", "MEMSVC_BIND"]),
        ("MEMSVC_OPENAI_API_KEY", ["MEMSVC_EMBEDDING_API_KEY"]),
        (
            "MEMSVC_API_KEY",
            ["MEMSVC_LLM_API_KEY", "MEMSVC_API_KEY_WORD", "MEMSVC_EMBEDDING_API_KEY"],
        ),
        (
            "MEMSVC_TIMEOUT",
            ["MEMSVC_REQUEST_TIMEOUT", "MEMSVC_EMBEDDING_TIMEOUT", "MEMSVC_LLM_TIMEOUT_SECONDS"],
        ),
        ("MEMSVC_NOT_A_THING", []),
        ("MEMSVC_SOAK_SECONDS", []),
    ],
)
def test_a_mistyped_name_is_offered_the_settings_it_may_mean(typo, meant):
    assert settings.suggestions(typo) == meant


def test_an_ambiguous_name_is_offered_every_setting_it_may_mean():
    assert settings.unknown_names({"MEMSVC_THRESHOLD": "0.5", "MEMSVC_THREADS": "4"}) == [
        "MEMSVC_THRESHOLD is not a memsvc setting and is ignored; did you mean "
        "MEMSVC_RECOMMENDED_THRESHOLD or MEMSVC_SEARCH_DEFAULT_THRESHOLD?"
    ]
    [timeout] = settings.unknown_names({"MEMSVC_TIMEOUT": "5"})
    assert timeout.endswith(
        "did you mean MEMSVC_REQUEST_TIMEOUT, MEMSVC_EMBEDDING_TIMEOUT or "
        "MEMSVC_LLM_TIMEOUT_SECONDS?"
    )


def test_the_configuration_docs_list_every_setting_as_the_table_says():
    docs = (pathlib.Path(__file__).parents[2] / "docs" / "configuration.md").read_text()
    block = generated_docs.block(docs, settings.DOCS_START, settings.DOCS_END)
    assert block.strip() == settings.markdown().strip(), (
        "docs/configuration.md is out of date: run make docs"
    )
    for setting in settings.SETTINGS:
        assert f"`{setting.env}`" in docs


def test_a_database_of_another_model_is_refused_with_directions(tmp_path):
    make(tmp_path)  # records the local model
    with pytest.raises(ConfigError) as e:
        make(
            tmp_path,
            EMBEDDER="openai",
            EMBEDDING_API_KEY="sk-test",
            EMBEDDING_MODEL="text-embedding-3-small",
        )
    message = str(e.value)
    assert "local:all-MiniLM-L6-v2 (384 dimensions)" in message
    assert "openai:text-embedding-3-small (1536 dimensions)" in message
    assert "memsvc reembed" in message


def test_a_minilm_database_is_refused_by_the_multilingual_model_with_directions(tmp_path):
    make(tmp_path)
    with pytest.raises(ConfigError) as e:
        make(tmp_path, LOCAL_MODEL="multilingual")
    message = str(e.value)
    assert "holds vectors from local:all-MiniLM-L6-v2 (384 dimensions)" in message
    assert "local:universal-sentence-encoder-multilingual-3 (512 dimensions)" in message
    assert "MEMSVC_LOCAL_MODEL" in message and "memsvc reembed" in message


def test_the_multilingual_model_takes_no_bert_model_path(tmp_path):
    with pytest.raises(ConfigError) as e:
        make(tmp_path, LOCAL_MODEL="multilingual", LOCAL_MODEL_PATH=str(tmp_path))
    assert str(e.value) == (
        "MEMSVC_LOCAL_MODEL_PATH replaces the bundled MiniLM model; unset it to use "
        "MEMSVC_LOCAL_MODEL=multilingual"
    )


def test_an_unusable_database_path_fails_start_up(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(ConfigError, match="MEMSVC_DATABASE .* cannot be used"):
        make(tmp_path, DATABASE=str(tmp_path / "file" / "db.sqlite3"))


def test_a_database_in_a_missing_folder_is_refused_and_nothing_is_created(tmp_path):
    missing = tmp_path / "nonexistent"
    with pytest.raises(ConfigError, match="nonexistent does not exist"):
        make(tmp_path, DATABASE=str(missing / "x.sqlite3"))
    assert not missing.exists()


def test_the_database_and_instance_folder_are_private(tmp_path):
    app = create_app(instance_path=str(tmp_path / "inst"))
    client = app.test_client()
    assert client.get("/health").status_code == 200
    assert stat.S_IMODE((tmp_path / "inst").stat().st_mode) == 0o700
    for name in ("memsvc.sqlite3", "memsvc.sqlite3-wal", "memsvc.sqlite3-shm"):
        assert stat.S_IMODE((tmp_path / "inst" / name).stat().st_mode) == 0o600, name
    app.extensions["memsvc"].close()


def test_a_database_urls_password_is_never_shown():
    from memsvc.settings import database_shown

    url = "postgresql://memsvc:s3cr%2Ft@db.internal:5432/memsvc?sslmode=require&password=other"
    shown = database_shown(url)
    assert shown == "postgresql://memsvc:***@db.internal:5432/memsvc?sslmode=require&password=***"
    assert "s3cr" not in shown and "other" not in shown
    assert database_shown("/var/lib/memsvc/memsvc.sqlite3") == "/var/lib/memsvc/memsvc.sqlite3"
    assert database_shown("postgresql:///memsvc?host=/run/postgresql") == (
        "postgresql:///memsvc?host=/run/postgresql"
    )


def test_too_few_threads_for_a_tenants_concurrency_limit_is_warned_of():
    from memsvc.serving.config import thread_warning

    assert thread_warning(2, 8, 10, 10) is None
    assert "MEMSVC_CONCURRENCY_LIMIT (10)" in (thread_warning(1, 6, 10, 10) or "")
    warning = thread_warning(2, 8, 10, 16) or ""
    assert "not above MEMSVC_TENANT_CONCURRENCY_LIMIT (16): one tenant at its limit" in warning
    assert thread_warning(2, 8, 10, 0) is None  # no limit per tenant: the operator's choice
