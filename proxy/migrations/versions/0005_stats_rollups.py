"""hourly stats rollups and error runs, filled from the rows already stored

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03
"""
from alembic import op
import sqlalchemy as sa

from proxy.store import rollups


revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def _head() -> list[sa.Column]:
    return [
        sa.Column('bucket', sa.Float(), nullable=False),
        sa.Column('model', sa.String(length=256), nullable=False),
        sa.Column('policy_name', sa.String(length=128), nullable=False),
        sa.Column('route', sa.String(length=64), nullable=False),
    ]


def upgrade() -> None:
    op.create_table('stats_calls', *_head(),
    sa.Column('decision', sa.String(length=16), nullable=False),
    sa.Column('primary_reason', sa.String(length=32), nullable=False),
    sa.Column('n', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('bucket', 'model', 'policy_name', 'route', 'decision', 'primary_reason')
    )
    op.create_index('ix_stats_calls_model_bucket', 'stats_calls',
                    ['model', 'bucket', 'decision', 'primary_reason', 'n'])
    op.create_table('stats_reasons', *_head(),
    sa.Column('reason', sa.String(length=32), nullable=False),
    sa.Column('n', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('bucket', 'model', 'policy_name', 'route', 'reason')
    )
    op.create_table('stats_requests', *_head(),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('concurrency', sa.Integer(), nullable=False),
    sa.Column('n', sa.Integer(), nullable=False),
    sa.Column('rate_sum', sa.Float(), nullable=False),
    sa.Column('rate_n', sa.Integer(), nullable=False),
    sa.Column('ttft_sum', sa.Float(), nullable=False),
    sa.Column('ttft_n', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('bucket', 'model', 'policy_name', 'route', 'attempts', 'concurrency')
    )
    op.create_table('stats_sessions', *_head(),
    sa.Column('session_id', sa.String(length=128), nullable=False),
    sa.PrimaryKeyConstraint('bucket', 'model', 'policy_name', 'route', 'session_id')
    )
    op.create_table('stats_latency',
    sa.Column('bucket', sa.Float(), nullable=False),
    sa.Column('model', sa.String(length=256), nullable=False),
    sa.Column('concurrency', sa.Integer(), nullable=False),
    sa.Column('kind', sa.String(length=8), nullable=False),
    sa.Column('bin', sa.Integer(), nullable=False),
    sa.Column('n', sa.Integer(), nullable=False),
    sa.Column('low', sa.Float(), nullable=False),
    sa.Column('high', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('bucket', 'model', 'concurrency', 'kind', 'bin')
    )
    op.create_table('error_runs',
    sa.Column('session_id', sa.String(length=128), nullable=False),
    sa.Column('start_at', sa.Float(), nullable=False),
    sa.Column('start_index', sa.Integer(), nullable=False),
    sa.Column('end_at', sa.Float(), nullable=False),
    sa.Column('end_index', sa.Integer(), nullable=False),
    sa.Column('model', sa.String(length=256), nullable=False),
    sa.Column('policy_name', sa.String(length=128), nullable=False),
    sa.Column('route', sa.String(length=64), nullable=False),
    sa.Column('shape', sa.String(length=256), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('exact', sa.Boolean(), nullable=False),
    sa.Column('next_at', sa.Float(), nullable=True),
    sa.Column('next_index', sa.Integer(), nullable=True),
    sa.Column('next_decision', sa.String(length=16), nullable=True),
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
