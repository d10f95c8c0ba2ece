"""all-time totals of the rollups: per session and model, and per latency bin, filled from the rollups"""
from alembic import op
import sqlalchemy as sa

from proxy.migrations.columns import optional, required
from proxy.store import totals


revision, down_revision = '0016', '0015'


def upgrade() -> None:
    op.create_table('stats_session_totals',
    *required(session_id=sa.String(128), model=sa.String(256), calls=sa.Integer(), errors=sa.Integer()),
    *optional(recovered=sa.Integer(), followed=sa.Integer()),
    sa.PrimaryKeyConstraint('session_id', 'model')
    )
    op.create_index('ix_stats_session_totals_errors', 'stats_session_totals', ['model', 'errors', 'calls'])
    op.create_index('ix_stats_session_totals_recovery', 'stats_session_totals', ['model', 'recovered', 'followed'])
    op.create_table('stats_latency_totals',
    *required(model=sa.String(256), concurrency=sa.Integer(), kind=sa.String(8), bin=sa.Integer(), n=sa.Integer(),
              low=sa.Float(), high=sa.Float()),
    sa.PrimaryKeyConstraint('model', 'concurrency', 'kind', 'bin')
    )
    # A store that already holds rows gets its totals now, from the rollups it has.
    totals.refresh(op.get_bind())


def downgrade() -> None:
    op.drop_table('stats_latency_totals')
    op.drop_index('ix_stats_session_totals_recovery', 'stats_session_totals')
    op.drop_index('ix_stats_session_totals_errors', 'stats_session_totals')
    op.drop_table('stats_session_totals')
