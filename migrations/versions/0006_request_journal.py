"""request journal: the request of calls released before the request ended"""
from alembic import op
import sqlalchemy as sa

from proxy.migrations.columns import required


revision, down_revision = '0006', '0005'


def upgrade() -> None:
    op.create_table('request_journal',
    *required(id=sa.String(64), owner=sa.String(160), created_at=sa.Float(), row=sa.Text()),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index('ix_request_journal_owner', 'request_journal', ['owner'])


def downgrade() -> None:
    op.drop_index('ix_request_journal_owner', table_name='request_journal')
    op.drop_table('request_journal')
