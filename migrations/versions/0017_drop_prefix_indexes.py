"""drop the indexes of 0001 that 0003's covering indexes begin with

Each index dropped here is the leading columns of a covering index of 0003 (ix_tool_calls_model_verdict,
ix_tool_calls_session_order, ix_requests_model_stats, ix_tool_call_reasons_model_reason), which serves every query
it served. Each was one more B-tree page written at every commit that inserts a row of its table: on SQLite a page
is a WAL frame, and a non-streamed answer's commit wrote ~23 of them (issue 27)."""
from alembic import op


revision, down_revision = '0017', '0016'

_DROPPED = (
    ('tool_calls', 'ix_tool_calls_model_created', ['model', 'created_at']),
    ('tool_calls', 'ix_tool_calls_session_created', ['session_id', 'created_at', 'call_index']),
    ('requests', 'ix_requests_model_started', ['model', 'started_at']),
    ('tool_call_reasons', 'ix_tool_call_reasons_model_created', ['model', 'created_at']),
)


def upgrade() -> None:
    for table, name, _columns in _DROPPED:
        op.drop_index(name, table_name=table)


def downgrade() -> None:
    for table, name, columns in _DROPPED:
        op.create_index(name, table, columns, unique=False)
