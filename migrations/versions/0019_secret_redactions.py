"""secrets replaced in what went upstream (DESIGN invariant 11): one row per session, tool call and detection rule,
with how many were replaced; never the secret"""
from alembic import op
import sqlalchemy as sa


revision, down_revision = '0019', '0018'


def upgrade() -> None:
    op.create_table(
        'secret_redactions',
        sa.Column('session_id', sa.String(128), nullable=False),
        sa.Column('call_id', sa.String(256), nullable=False),
        sa.Column('type', sa.String(128), nullable=False),
        sa.Column('request_id', sa.String(64), nullable=False),
        sa.Column('model', sa.String(256), nullable=False),
        sa.Column('count', sa.Integer(), nullable=False),
        sa.Column('created_at', sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint('session_id', 'call_id', 'type'),
    )
    op.create_index('ix_secret_redactions_model_created', 'secret_redactions', ['model', 'created_at'])


def downgrade() -> None:
    op.drop_index('ix_secret_redactions_model_created', table_name='secret_redactions')
    op.drop_table('secret_redactions')
