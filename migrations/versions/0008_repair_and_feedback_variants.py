"""repaired calls keep the command delivered instead; calls record their session's feedback variant

Revision ID: 0008
Revises: 0005 (on the issue-19 branch; 0007 once the parallel migrations are merged in order)
Create Date: 2026-12-03
"""
from alembic import op
import sqlalchemy as sa


revision = '0008'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name == 'postgresql':
        # 0005's rebuild reads tool_calls through server-side cursors that stay open in this transaction
        # (asyncpg), and Postgres refuses to ALTER a table an open cursor reads.
        op.execute('CLOSE ALL')
    with op.batch_alter_table('tool_calls') as batch:
        batch.add_column(sa.Column('repaired_command', sa.Text(), nullable=True))
        batch.add_column(sa.Column('feedback_variant', sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('tool_calls') as batch:
        batch.drop_column('feedback_variant')
        batch.drop_column('repaired_command')
