"""bench.lifecycle with PostgreSQL as the store (the tests' private server, from pgserver).

python -m bench.lifecycle_postgres [--queries 50] [--small-users 500]
"""

from bench.lifecycle import main
from bench.report import recording

if __name__ == "__main__":
    with recording("lifecycle_postgres"):
        main(postgres=True)
