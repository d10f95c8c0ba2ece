"""throughput windows"""
from alembic import op
import sqlalchemy as sa

from proxy.migrations.columns import optional, required


revision, down_revision = '0002', '0001'


def upgrade() -> None:
    op.create_table('throughput_windows',
    *required(model=sa.String(256), window_start=sa.Float(), seconds=sa.Float()),
    *optional(running=sa.Integer()),
    *required(prompt_tokens=sa.Integer(), generation_tokens=sa.Float(), completed_requests=sa.Integer()),
    sa.PrimaryKeyConstraint('model', 'window_start', 'seconds')
    )
    with op.batch_alter_table('throughput_windows', schema=None) as batch_op:
        batch_op.create_index('ix_throughput_windows_start', ['window_start'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('throughput_windows', schema=None) as batch_op:
        batch_op.drop_index('ix_throughput_windows_start')

    op.drop_table('throughput_windows')
