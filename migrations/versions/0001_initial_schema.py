"""initial schema"""
from alembic import op
import sqlalchemy as sa

from proxy.migrations.columns import optional, required


revision, down_revision = '0001', None


def upgrade() -> None:
    op.create_table('requests',
    *required(id=sa.String(64), session_id=sa.String(128), model=sa.String(256), route=sa.String(64),
              upstream=sa.String(512), stream=sa.Boolean(), started_at=sa.Float()),
    *optional(ttfb_ms=sa.Float(), ttft_ms=sa.Float(), duration_ms=sa.Float(), status=sa.Integer()),
    *required(outcome=sa.String(32)),
    *optional(error=sa.Text(), prompt_tokens=sa.Integer(), completion_tokens=sa.Integer(),
              cached_tokens=sa.Integer()),
    *required(concurrency=sa.Integer(), attempts=sa.Integer(), budget_exhausted=sa.Boolean()),
    *optional(policy_name=sa.String(128), policy_hash=sa.String(64), mode=sa.String(16)),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('requests', schema=None) as batch_op:
        batch_op.create_index('ix_requests_model_started', ['model', 'started_at'], unique=False)
        batch_op.create_index('ix_requests_session', ['session_id'], unique=False)

    op.create_table('sessions',
    *required(id=sa.String(128), source=sa.String(32)),
    *optional(model=sa.String(256)),
    *required(created_at=sa.Float()),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_table('tool_call_reasons',
    *required(tool_call_id=sa.String(64), position=sa.Integer(), reason=sa.String(32), model=sa.String(256),
              created_at=sa.Float()),
    sa.PrimaryKeyConstraint('tool_call_id', 'position')
    )
    with op.batch_alter_table('tool_call_reasons', schema=None) as batch_op:
        batch_op.create_index('ix_tool_call_reasons_model_created', ['model', 'created_at'], unique=False)

    op.create_table('tool_calls',
    *required(id=sa.String(64), request_id=sa.String(64), session_id=sa.String(128), model=sa.String(256),
              route=sa.String(64), attempt=sa.Integer(), call_index=sa.Integer(), created_at=sa.Float(),
              tool_name=sa.String(256), source=sa.String(32), arguments_raw=sa.Text()),
    *optional(arguments_json=sa.Text(), command=sa.Text()),
    *required(decision=sa.String(16)),
    *optional(primary_reason=sa.String(32)),
    *required(reasons=sa.Text()),
    *optional(shape=sa.String(256), policy_name=sa.String(128), policy_hash=sa.String(64), mode=sa.String(16)),
    *required(delivered=sa.Boolean()),
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
