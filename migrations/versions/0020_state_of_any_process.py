"""state of any process: the Responses chains and the sessions' stated project roots in the store

`serve --workers N` and replicas behind a balancer answer a conversation's requests in whichever process: what one
process learnt that the next request needs (the upstream response a handed-out Responses id continues from, the
project root a session's client stated) is written to the store, not kept in that process alone."""
import sqlalchemy as sa
from alembic import op


revision, down_revision = '0020', '0019'


def upgrade() -> None:
    op.create_table(
        'response_chains',
        sa.Column('client_id', sa.String(128), primary_key=True),
        sa.Column('upstream_id', sa.String(128), nullable=False),
        sa.Column('items', sa.Text(), nullable=False),
        sa.Column('created_at', sa.Float(), nullable=False),
    )
    op.create_index('ix_response_chains_created', 'response_chains', ['created_at'])
    op.create_table(
        'session_roots',
        sa.Column('id', sa.String(32), primary_key=True),
        sa.Column('session_id', sa.String(128), nullable=False),
        sa.Column('root', sa.String(1024), nullable=False),
        sa.Column('created_at', sa.Float(), nullable=False),
    )
    op.create_index('ix_session_roots_session', 'session_roots', ['session_id', 'created_at'])


def downgrade() -> None:
    op.drop_index('ix_session_roots_session', table_name='session_roots')
    op.drop_table('session_roots')
    op.drop_index('ix_response_chains_created', table_name='response_chains')
    op.drop_table('response_chains')
