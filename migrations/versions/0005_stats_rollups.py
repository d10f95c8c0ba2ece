"""hourly stats rollups and error runs, filled from the rows already stored"""
from alembic import op
import sqlalchemy as sa

from proxy.migrations.columns import optional, required
from proxy.store import rollups


revision, down_revision = '0005', '0004'


def _head() -> list[sa.Column]:
    return required(bucket=sa.Float(), model=sa.String(256), policy_name=sa.String(128), route=sa.String(64))


def upgrade() -> None:
    op.create_table('stats_calls', *_head(),
    *required(decision=sa.String(16), primary_reason=sa.String(32), n=sa.Integer()),
    sa.PrimaryKeyConstraint('bucket', 'model', 'policy_name', 'route', 'decision', 'primary_reason')
    )
    op.create_index('ix_stats_calls_model_bucket', 'stats_calls',
                    ['model', 'bucket', 'decision', 'primary_reason', 'n'])
    op.create_table('stats_reasons', *_head(),
    *required(reason=sa.String(32), n=sa.Integer()),
    sa.PrimaryKeyConstraint('bucket', 'model', 'policy_name', 'route', 'reason')
    )
    op.create_table('stats_requests', *_head(),
    *required(attempts=sa.Integer(), concurrency=sa.Integer(), n=sa.Integer(), rate_sum=sa.Float(),
              rate_n=sa.Integer(), ttft_sum=sa.Float(), ttft_n=sa.Integer()),
    sa.PrimaryKeyConstraint('bucket', 'model', 'policy_name', 'route', 'attempts', 'concurrency')
    )
    op.create_table('stats_sessions', *_head(),
    *required(session_id=sa.String(128)),
    sa.PrimaryKeyConstraint('bucket', 'model', 'policy_name', 'route', 'session_id')
    )
    op.create_table('stats_latency',
    *required(bucket=sa.Float(), model=sa.String(256), concurrency=sa.Integer(), kind=sa.String(8),
              bin=sa.Integer(), n=sa.Integer(), low=sa.Float(), high=sa.Float()),
    sa.PrimaryKeyConstraint('bucket', 'model', 'concurrency', 'kind', 'bin')
    )
    op.create_table('error_runs',
    *required(session_id=sa.String(128), start_at=sa.Float(), start_index=sa.Integer(), end_at=sa.Float(),
              end_index=sa.Integer(), model=sa.String(256), policy_name=sa.String(128), route=sa.String(64),
              shape=sa.String(256), attempts=sa.Integer(), exact=sa.Boolean()),
    *optional(next_at=sa.Float(), next_index=sa.Integer(), next_decision=sa.String(16)),
    sa.PrimaryKeyConstraint('session_id', 'start_at', 'start_index')
    )
    op.create_index('ix_error_runs_model_start', 'error_runs',
                    ['model', 'start_at', 'attempts', 'next_decision', 'exact'])
    op.create_index('ix_error_runs_attempts', 'error_runs', ['attempts', 'start_at'])
    # A store that already holds rows gets its rollups now; the writer keeps them from here on.
    rollups.rebuild(op.get_bind())


def downgrade() -> None:
    for name in ('error_runs', 'stats_latency', 'stats_sessions', 'stats_requests', 'stats_reasons',
                 'stats_calls'):
        op.drop_table(name)
