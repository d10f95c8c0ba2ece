"""throughput windows

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-03
"""
from alembic import op
import sqlalchemy as sa


revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('throughput_windows',
    sa.Column('model', sa.String(length=256), nullable=False),
    sa.Column('window_start', sa.Float(), nullable=False),
    sa.Column('seconds', sa.Float(), nullable=False),
    sa.Column('running', sa.Integer(), nullable=True),
    sa.Column('prompt_tokens', sa.Integer(), nullable=False),
    sa.Column('generation_tokens', sa.Float(), nullable=False),
    sa.Column('completed_requests', sa.Integer(), nullable=False),
    sa.PrimaryKeyConstraint('model', 'window_start', 'seconds')
    )
    with op.batch_alter_table('throughput_windows', schema=None) as batch_op:
        batch_op.create_index('ix_throughput_windows_start', ['window_start'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('throughput_windows', schema=None) as batch_op:
        batch_op.drop_index('ix_throughput_windows_start')

    op.drop_table('throughput_windows')
