"""rollups applied after release: the batches whose rollups are still to be added (stats_pending)"""
from alembic import op
import sqlalchemy as sa

from proxy.migrations.columns import required


revision, down_revision = '0014', '0011'


def upgrade() -> None:
    op.create_table('stats_pending',
    *required(id=sa.String(32), created_at=sa.Float(), tool_call_ids=sa.Text(), request_ids=sa.Text()),
    sa.PrimaryKeyConstraint('id')
    )


def downgrade() -> None:
    op.drop_table('stats_pending')
