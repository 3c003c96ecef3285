"""The labels the service puts on what it creates on a container engine: how a deployment's resources are found
again (cleanup, start-up reconciliation) without a record."""

# Every label the service reads to know what is its own (these, the seeds', the swarm's) starts so; a repository's
# compose file may set none of them (rendering/compose_policy.py).
SERVICE_LABEL_PREFIX = "dev.preview-orchestrator."
DEPLOYMENT_LABEL = "dev.preview-orchestrator.deployment"
ROLE_LABEL = "dev.preview-orchestrator.role"
OWNER_LABEL = "dev.preview-orchestrator.owner"  # the HostEnv marker of the service that started it
