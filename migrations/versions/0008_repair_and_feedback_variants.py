"""repaired calls keep the command delivered instead; calls record their session's feedback variant;
calls and errors per session and hour for the session intervals, filled from the rows already stored"""
from alembic import op
import sqlalchemy as sa

from proxy.migrations.columns import required
from proxy.store import rollups


revision, down_revision = '0008', '0007'


def upgrade() -> None:
    if op.get_bind().dialect.name == 'postgresql':
        # 0005's rebuild reads tool_calls through server-side cursors that stay open in this transaction
        # (asyncpg), and Postgres refuses to ALTER a table an open cursor reads.
        op.execute('CLOSE ALL')
    with op.batch_alter_table('tool_calls') as batch:
        batch.add_column(sa.Column('repaired_command', sa.Text(), nullable=True))
        batch.add_column(sa.Column('feedback_variant', sa.String(length=64), nullable=True))
    op.create_table('stats_session_calls',
    *required(bucket=sa.Float(), model=sa.String(256), policy_name=sa.String(128), route=sa.String(64),
              session_id=sa.String(128), calls=sa.Integer(), errors=sa.Integer()),
    sa.PrimaryKeyConstraint('bucket', 'model', 'policy_name', 'route', 'session_id')
    )
    # A store that already holds rows gets the new rollup now (and the others again, unchanged).
    rollups.rebuild(op.get_bind())


def downgrade() -> None:
    op.drop_table('stats_session_calls')
    with op.batch_alter_table('tool_calls') as batch:
        batch.drop_column('feedback_variant')
        batch.drop_column('repaired_command')
