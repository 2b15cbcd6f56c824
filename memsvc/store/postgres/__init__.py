"""PostgreSQL (with pgvector) as memsvc's store, shared by several app servers."""
