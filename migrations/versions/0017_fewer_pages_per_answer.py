"""fewer pages written per answer: the indexes that serve no query dropped, the short-lived tables without rowid

Four are the leading columns of a covering index of 0003 (ix_tool_calls_model_verdict, ix_tool_calls_session_order,
ix_requests_model_stats, ix_tool_call_reasons_model_reason), which serves every query they served. The journal's
owner index served only `owner != me` (proxy/store/journal.py), a scan of a table of the requests in flight, and was
written twice an answer (the entry, then its delete). Each was one more B-tree page written at every commit that
inserts a row of its table: on SQLite a page is a WAL frame, and a non-streamed answer wrote ~23.5 (issue 27).

On SQLite the journal and the rollups' markers, whose rows live from one commit to the next, become WITHOUT ROWID
tables: a row is then written into one B-tree, its key's, not into the table's and its key's index (two frames
fewer an answer). Both hold only rows in flight, so the copy is of a few rows."""
from alembic import op


revision, down_revision = '0017', '0016'

_DROPPED = (
    ('tool_calls', 'ix_tool_calls_model_created', ['model', 'created_at']),
    ('tool_calls', 'ix_tool_calls_session_created', ['session_id', 'created_at', 'call_index']),
    ('requests', 'ix_requests_model_started', ['model', 'started_at']),
    ('tool_call_reasons', 'ix_tool_call_reasons_model_created', ['model', 'created_at']),
    ('request_journal', 'ix_request_journal_owner', ['owner']),
)


_SHORT_LIVED = ('request_journal', 'stats_pending')


def upgrade() -> None:
    for table, name, _columns in _DROPPED:
        op.drop_index(name, table_name=table)
    _rowid(False)


def downgrade() -> None:
    _rowid(True)
    for table, name, columns in _DROPPED:
        op.create_index(name, table, columns, unique=False)


def _rowid(with_rowid: bool) -> None:
    if op.get_bind().dialect.name != 'sqlite':
        return
    for table in _SHORT_LIVED:
        with op.batch_alter_table(table, recreate='always', table_kwargs={'sqlite_with_rowid': with_rowid}):
            pass
