"""initial schema

Revision ID: 0001
Revises: 
Create Date: 2026-12-02
"""
from alembic import op
import sqlalchemy as sa


revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('requests',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('session_id', sa.String(length=128), nullable=False),
    sa.Column('model', sa.String(length=256), nullable=False),
    sa.Column('route', sa.String(length=64), nullable=False),
    sa.Column('upstream', sa.String(length=512), nullable=False),
    sa.Column('stream', sa.Boolean(), nullable=False),
    sa.Column('started_at', sa.Float(), nullable=False),
    sa.Column('ttfb_ms', sa.Float(), nullable=True),
    sa.Column('ttft_ms', sa.Float(), nullable=True),
    sa.Column('duration_ms', sa.Float(), nullable=True),
    sa.Column('status', sa.Integer(), nullable=True),
    sa.Column('outcome', sa.String(length=32), nullable=False),
    sa.Column('error', sa.Text(), nullable=True),
    sa.Column('prompt_tokens', sa.Integer(), nullable=True),
    sa.Column('completion_tokens', sa.Integer(), nullable=True),
    sa.Column('cached_tokens', sa.Integer(), nullable=True),
    sa.Column('concurrency', sa.Integer(), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('budget_exhausted', sa.Boolean(), nullable=False),
    sa.Column('policy_name', sa.String(length=128), nullable=True),
    sa.Column('policy_hash', sa.String(length=64), nullable=True),
    sa.Column('mode', sa.String(length=16), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('requests', schema=None) as batch_op:
        batch_op.create_index('ix_requests_model_started', ['model', 'started_at'], unique=False)
        batch_op.create_index('ix_requests_session', ['session_id'], unique=False)

    op.create_table('sessions',
    sa.Column('id', sa.String(length=128), nullable=False),
    sa.Column('source', sa.String(length=32), nullable=False),
    sa.Column('model', sa.String(length=256), nullable=True),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_table('tool_call_reasons',
    sa.Column('tool_call_id', sa.String(length=64), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('reason', sa.String(length=32), nullable=False),
    sa.Column('model', sa.String(length=256), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('tool_call_id', 'position')
    )
    with op.batch_alter_table('tool_call_reasons', schema=None) as batch_op:
        batch_op.create_index('ix_tool_call_reasons_model_created', ['model', 'created_at'], unique=False)

    op.create_table('tool_calls',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('request_id', sa.String(length=64), nullable=False),
    sa.Column('session_id', sa.String(length=128), nullable=False),
    sa.Column('model', sa.String(length=256), nullable=False),
    sa.Column('route', sa.String(length=64), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('call_index', sa.Integer(), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('tool_name', sa.String(length=256), nullable=False),
    sa.Column('source', sa.String(length=32), nullable=False),
    sa.Column('arguments_raw', sa.Text(), nullable=False),
    sa.Column('arguments_json', sa.Text(), nullable=True),
    sa.Column('command', sa.Text(), nullable=True),
    sa.Column('decision', sa.String(length=16), nullable=False),
    sa.Column('primary_reason', sa.String(length=32), nullable=True),
    sa.Column('reasons', sa.Text(), nullable=False),
    sa.Column('shape', sa.String(length=256), nullable=True),
    sa.Column('policy_name', sa.String(length=128), nullable=True),
    sa.Column('policy_hash', sa.String(length=64), nullable=True),
    sa.Column('mode', sa.String(length=16), nullable=True),
    sa.Column('delivered', sa.Boolean(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('tool_calls', schema=None) as batch_op:
        batch_op.create_index('ix_tool_calls_model_created', ['model', 'created_at'], unique=False)
        batch_op.create_index('ix_tool_calls_request', ['request_id'], unique=False)
        batch_op.create_index('ix_tool_calls_session_created', ['session_id', 'created_at', 'call_index'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('tool_calls', schema=None) as batch_op:
        batch_op.drop_index('ix_tool_calls_session_created')
        batch_op.drop_index('ix_tool_calls_request')
        batch_op.drop_index('ix_tool_calls_model_created')

    op.drop_table('tool_calls')
    with op.batch_alter_table('tool_call_reasons', schema=None) as batch_op:
        batch_op.drop_index('ix_tool_call_reasons_model_created')

    op.drop_table('tool_call_reasons')
    op.drop_table('sessions')
    with op.batch_alter_table('requests', schema=None) as batch_op:
        batch_op.drop_index('ix_requests_session')
        batch_op.drop_index('ix_requests_model_started')

    op.drop_table('requests')
