# gunicorn reads this file when started here: `gunicorn wsgi:app`.
from memsvc.gunicorn_config import *  # noqa: F403
