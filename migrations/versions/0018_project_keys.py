"""project keys: each key's hash and what it binds a client to (project root, tool profile, policy), when it was
made, last used and revoked (proxy/keys/; `allowlist-proxy keys create|list|revoke`)"""
from alembic import op
import sqlalchemy as sa


revision, down_revision = '0018', '0017'


def upgrade() -> None:
    op.create_table(
        'project_keys',
        sa.Column('id', sa.String(32), primary_key=True),
        sa.Column('key_hash', sa.String(64), nullable=False),
        sa.Column('prefix', sa.String(16), nullable=False),
        sa.Column('label', sa.String(128), nullable=True),
        sa.Column('root', sa.String(1024), nullable=False),
        sa.Column('client', sa.String(64), nullable=True),
        sa.Column('policy', sa.String(128), nullable=True),
        sa.Column('created_at', sa.Float(), nullable=False),
        sa.Column('last_used_at', sa.Float(), nullable=True),
        sa.Column('revoked_at', sa.Float(), nullable=True),
        sa.UniqueConstraint('key_hash', name='uq_project_keys_key_hash'),
    )


def downgrade() -> None:
    op.drop_table('project_keys')
