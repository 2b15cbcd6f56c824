"""The SQL of API keys, alike on both stores."""

from __future__ import annotations

from ...models import ApiKey
from ..base import KEY_COLUMNS
from ..base import key_of
from .frame import SqlFrame


class SqlKeys(SqlFrame):
    """API keys: the statements both stores take alike."""

    def insert_key(self, key: ApiKey, secret_hash: bytes) -> None:
        self._execute(
            f"INSERT INTO api_keys ({KEY_COLUMNS}, secret_hash) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                key.id, key.tenant, key.key_id, key.name, key.created_at, key.last_used_at,
                key.revoked_at, key.rate_limit, key.concurrency_limit, key.rate_ceiling,
                key.concurrency_ceiling, secret_hash,
            ),
        )  # fmt: skip

    def active_keys(self, tenant: str) -> int:
        (n,) = self._one(
            "SELECT count(*) FROM api_keys WHERE tenant = ? AND revoked_at IS NULL", (tenant,)
        )
        return int(n)

    def key_by_hash(self, secret_hash: bytes) -> ApiKey | None:
        row = self._one(f"SELECT {KEY_COLUMNS} FROM api_keys WHERE secret_hash = ?", (secret_hash,))
        return key_of(row) if row else None

    def get_key(self, key_id: str) -> ApiKey | None:
        row = self._one(f"SELECT {KEY_COLUMNS} FROM api_keys WHERE id = ?", (key_id,))
        return key_of(row) if row else None

    def list_keys(self, tenant: str | None = None) -> list[ApiKey]:
        if tenant is None:
            rows = self._rows(
                f"SELECT {KEY_COLUMNS} FROM api_keys ORDER BY tenant, created_at, {self._KEY_ORDER}"
            )
        else:
            rows = self._rows(
                f"SELECT {KEY_COLUMNS} FROM api_keys WHERE tenant = ? "
                f"ORDER BY created_at, {self._KEY_ORDER}",
                (tenant,),
            )
        return [key_of(row) for row in rows]

    def revoke_key(self, key_id: str, now: int) -> None:
        self._execute(
            "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL",
            (now, key_id),
        )

    def set_key_limits(
        self,
        key_id: str,
        rate_limit: int | None,
        concurrency_limit: int | None,
        *,
        ceiling: bool = False,
    ) -> bool:
        pair = (
            ("rate_ceiling", "concurrency_ceiling")
            if ceiling
            else ("rate_limit", "concurrency_limit")
        )
        columns = ", ".join(f"{column} = ?" for column in pair)
        cur = self._execute(
            f"UPDATE api_keys SET {columns} WHERE id = ?", (rate_limit, concurrency_limit, key_id)
        )
        return cur.rowcount == 1

    def touch_key(self, key_id: str, now: int) -> None:
        self._execute("UPDATE api_keys SET last_used_at = ? WHERE id = ?", (now, key_id))
