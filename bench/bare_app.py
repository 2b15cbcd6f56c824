"""The lower bound for bench/http_search.py: Flask returning a constant.

Served by gunicorn with memsvc's own settings, it answers the same URL with
a fixed body of about the size memsvc returns, doing no work at all.
"""

from flask import Flask
from flask import Response

app = Flask(__name__)
ITEM = (
    '{{"id":"6b0c0a5e-3f1d-4f0e-9c7e-2b1e6e1f8a{i:02d}","content":"fact {i} about tea",'
    '"userId":"u","idpUserId":"bench","metadata":{{}},"createdAt":"2026-11-22T00:00:00.000Z",'
    '"updatedAt":"2026-11-22T00:00:00.000Z","similarity":0.5}}'
)
BODY = '{"result":{"data":[' + ",".join(ITEM.format(i=i) for i in range(10)) + "]}}"


@app.get("/trpc/memory.search")
def search() -> Response:
    return Response(BODY, mimetype="application/json")


MEMORY = (
    '{"result":{"data":{"id":"6b0c0a5e-3f1d-4f0e-9c7e-2b1e6e1f8a00","content":"The user '
    'mentioned tea in conversation number 0, and it matters to them for reason 0.",'
    '"userId":"u","idpUserId":"bench","metadata":{},"createdAt":"2026-11-22T00:00:00.000Z",'
    '"updatedAt":"2026-11-22T00:00:00.000Z"}}}'
)


@app.get("/trpc/memory.getById")
def get_by_id() -> Response:
    return Response(MEMORY, mimetype="application/json")
