# gunicorn reads this file when started here: `gunicorn wsgi:app`.
from memsvc.serving.config import *  # noqa: F403
