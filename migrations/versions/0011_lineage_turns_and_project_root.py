"""session lineage keyed on the delivered turns, several sessions per digest (identical runs); the project
root learned or pinned per request and session"""
from alembic import op
import sqlalchemy as sa

from proxy.migrations.columns import required


revision, down_revision = '0011', '0008'


def upgrade() -> None:
    if op.get_bind().dialect.name == 'postgresql':
        op.execute('CLOSE ALL')  # 0005's rebuild leaves cursors open in this transaction (see 0008)
    # The digests of 0004 hashed turns without their call ids: none of them can match a digest of 0011, so
    # the table starts again (a conversation in flight during the upgrade continues as a session of its own).
    op.drop_table('session_lineage')
    op.create_table('session_lineage',
    *required(digest=sa.String(64), session_id=sa.String(128), created_at=sa.Float()),
    sa.PrimaryKeyConstraint('digest', 'session_id')
    )
    op.create_index('ix_session_lineage_session', 'session_lineage', ['session_id', 'created_at'])
    for table in ('requests', 'sessions'):
        with op.batch_alter_table(table) as batch:
            batch.add_column(sa.Column('project_root', sa.String(length=1024), nullable=True))


def downgrade() -> None:
    for table in ('requests', 'sessions'):
        with op.batch_alter_table(table) as batch:
            batch.drop_column('project_root')
    op.drop_index('ix_session_lineage_session', table_name='session_lineage')
    op.drop_table('session_lineage')
    op.create_table('session_lineage',
    *required(digest=sa.String(64), session_id=sa.String(128), created_at=sa.Float()),
    sa.PrimaryKeyConstraint('digest')
    )
