"""session lineage shared by replicas"""
from alembic import op
import sqlalchemy as sa

from proxy.migrations.columns import required


revision, down_revision = '0004', '0003'


def upgrade() -> None:
    op.create_table('session_lineage',
    *required(digest=sa.String(64), session_id=sa.String(128), created_at=sa.Float()),
    sa.PrimaryKeyConstraint('digest')
    )


def downgrade() -> None:
    op.drop_table('session_lineage')
