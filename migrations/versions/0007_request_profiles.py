"""the tool profiles chosen for each request's tools"""
from alembic import op
import sqlalchemy as sa


revision, down_revision = '0007', '0006'


def upgrade() -> None:
    if op.get_bind().dialect.name == 'postgresql':
        # 0005's rollup rebuild reads `requests` through a server-side cursor that stays open until the
        # migrations' one transaction ends, and Postgres refuses to alter a table an open cursor reads.
        op.execute('CLOSE ALL')
    with op.batch_alter_table('requests') as batch:
        batch.add_column(sa.Column('profiles', sa.String(length=256), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('requests') as batch:
        batch.drop_column('profiles')
