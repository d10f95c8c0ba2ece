"""session lineage shared by replicas

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""
from alembic import op
import sqlalchemy as sa


revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('session_lineage',
    sa.Column('digest', sa.String(length=64), nullable=False),
    sa.Column('session_id', sa.String(length=128), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('digest')
    )


def downgrade() -> None:
    op.drop_table('session_lineage')
