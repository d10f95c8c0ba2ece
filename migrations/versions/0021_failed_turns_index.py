"""blocked turns and upstream errors per model: a partial index of the requests that ended so (few of all), for
/stats/models, `stats` and `report` (proxy/store/queries.py `failed_turn_counts`)"""
from alembic import op
import sqlalchemy as sa


revision, down_revision = '0021', '0020'

# The same text as the query's condition (proxy/store/queries.py FAILED_OUTCOMES): SQLite uses a partial index
# only for a query whose WHERE contains the index's own terms.
_WHERE = sa.text("outcome IN ('blocked', 'upstream_error')")


def upgrade() -> None:
    op.create_index('ix_requests_failed', 'requests', ['model', 'started_at', 'outcome'], sqlite_where=_WHERE,
                    postgresql_where=_WHERE)


def downgrade() -> None:
    op.drop_index('ix_requests_failed', table_name='requests')
