"""``bench.eval`` with the bundled multilingual model (MEMSVC_LOCAL_MODEL=multilingual).

The same sets and figures; a full run is recorded in
``bench/results/eval_multilingual.txt`` beside the default model's
``eval.txt``. The facts set's threshold sweep counts every question
(``--sweep all``), since this model is for users who write in other
languages too.

    python -m bench.eval_multilingual [--set NAME ...] [--json PATH]   # or: make eval
"""

from __future__ import annotations

import contextlib
import os
import sys

from bench import eval as harness
from bench.report import recording

if __name__ == "__main__":
    os.environ["MEMSVC_LOCAL_MODEL"] = "multilingual"
    argv = ["--sweep", "all", *sys.argv[1:]]
    partial = harness.partial(harness.parse(argv))
    with contextlib.nullcontext() if partial else recording("eval_multilingual"):
        harness.main(argv)
