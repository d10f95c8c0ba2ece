"""ungoverned text actions per request: turns of a text-acting client whose actions the proxy could not read or
judge (the dashboard's and /stats/models' count); a partial index, as such requests are few"""
from alembic import op
import sqlalchemy as sa


revision, down_revision = '0015', '0014'

_WHERE = sa.text('ungoverned_text IS NOT NULL')


def upgrade() -> None:
    with op.batch_alter_table('requests') as batch:
        batch.add_column(sa.Column('ungoverned_text', sa.Integer(), nullable=True))
    op.create_index('ix_requests_ungoverned', 'requests', ['model', 'started_at'], sqlite_where=_WHERE,
                    postgresql_where=_WHERE)


def downgrade() -> None:
    op.drop_index('ix_requests_ungoverned', table_name='requests')
    with op.batch_alter_table('requests') as batch:
        batch.drop_column('ungoverned_text')
