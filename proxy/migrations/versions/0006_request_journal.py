"""request journal: the request of calls released before the request ended

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03
"""
from alembic import op
import sqlalchemy as sa


revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('request_journal',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('owner', sa.String(length=160), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('row', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_request_journal_owner', 'request_journal', ['owner'])


def downgrade() -> None:
    op.drop_index('ix_request_journal_owner', table_name='request_journal')
    op.drop_table('request_journal')
