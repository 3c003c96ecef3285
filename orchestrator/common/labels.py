"""The labels the service puts on what it creates on a container engine: how a deployment's resources are found
again (cleanup, start-up reconciliation) without a record."""

DEPLOYMENT_LABEL = "dev.preview-orchestrator.deployment"
ROLE_LABEL = "dev.preview-orchestrator.role"
OWNER_LABEL = "dev.preview-orchestrator.owner"  # the HostEnv marker of the service that started it
